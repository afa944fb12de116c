// simba_fault_proxy: a TCP proxy on loopback that injects the network faults
// production brings and a test cannot get from a healthy local server: a
// delay in each direction, a blackhole (connections accepted, bytes taken,
// nothing ever answered: a frozen VM, a stuck pooler, a partitioned
// primary), a reset. One thread, epoll; chunks keep their order per
// direction. Used by the client's fault tests (client/test/pg_fault_test.cpp),
// the chaos and HA nemeses and bench/run.sh (a datacenter-like round trip).
//
//   simba_fault_proxy (--target-port PORT | --target-unix SOCKET_PATH)
//                     [--delay-us US] [--blackhole]
//
// Prints "ready LISTEN_PORT CONTROL_PORT" once both ports listen on
// 127.0.0.1. The control port takes one command per connection, answers
// "ok" (or "error: ...") and closes; `echo blackhole >/dev/tcp/127.0.0.1/C`
// works from bash:
//   pass          forward everything again, existing and new connections
//   blackhole     take and drop every byte of every connection, new ones too
//   hang PORT     blackhole only the connection whose upstream side has
//                 local port PORT (the server's pg_stat_activity.client_port)
//   reset         close every connection with a TCP reset
//   delay US      hold each chunk US microseconds before passing it on
//   conns         one line per connection: "UPSTREAM_PORT pass|hang"
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Chunk {
    Clock::time_point due;
    std::string bytes;
};

struct Side {
    int fd = -1;
    Side* peer = nullptr;
    std::deque<Chunk> outbox;  // bytes read from the peer, sent here when due
    int upstream_port = 0;     // of the pair's server-facing socket
    bool hung = false;         // this pair is blackholed
};

struct Target {
    int port = 0;
    std::string unix_path;
};

void usage(const char* argv0) {
    std::fprintf(stderr,
                 "usage: %s (--target-port PORT | --target-unix SOCKET_PATH) [--delay-us US] [--blackhole]\n",
                 argv0);
    std::exit(2);
}

void nodelay_nonblock(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // fails harmlessly on unix sockets
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int listen_loopback(int& port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;  // any free port
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
        std::perror("simba_fault_proxy: bind/listen");
        std::exit(1);
    }
    port = ntohs(a.sin_port);
    return fd;
}

// A blocking connect (loopback or a local socket: immediate), then non-blocking.
int connect_to(const Target& t, int& local_port) {
    int fd;
    int rc;
    if (!t.unix_path.empty()) {
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, t.unix_path.c_str(), sizeof a.sun_path - 1);
        rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        local_port = 0;
    } else {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(t.port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        socklen_t alen = sizeof a;
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen);
        local_port = ntohs(a.sin_port);
    }
    if (rc != 0) {
        close(fd);
        return -1;
    }
    nodelay_nonblock(fd);
    return fd;
}

// SO_LINGER 0: close() sends a reset instead of a FIN.
void close_with_reset(int fd) {
    linger l{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

class Proxy {
public:
    Proxy(Target target, std::chrono::microseconds delay, bool blackhole)
        : target_(std::move(target)), delay_(delay), blackhole_(blackhole) {}

    int run();

private:
    void add(int fd, void* tag) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = tag;
        epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
    }
    void accept_client();
    void serve_control();
    std::string command(const std::string& line);
    void drop(Side* s, bool reset);
    Clock::time_point flush_due();

    Target target_;
    std::chrono::microseconds delay_;
    bool blackhole_;  // new connections start hung, existing ones are hung
    int ep_ = -1, listen_fd_ = -1, control_fd_ = -1, timer_fd_ = -1;
    int listen_tag_ = 0, control_tag_ = 0, timer_tag_ = 0;
    std::map<int, std::unique_ptr<Side>> sides_;
    std::unordered_set<Side*> live_;
};

void Proxy::drop(Side* s, bool reset) {
    for (Side* x : {s, s->peer}) {
        if (!x || !live_.count(x)) continue;
        epoll_ctl(ep_, EPOLL_CTL_DEL, x->fd, nullptr);
        if (reset)
            close_with_reset(x->fd);
        else
            close(x->fd);
        live_.erase(x);
        sides_.erase(x->fd);  // frees x
    }
}

void Proxy::accept_client() {
    int cfd = accept(listen_fd_, nullptr, nullptr);
    if (cfd < 0) return;
    nodelay_nonblock(cfd);
    int upstream_port = 0;
    int sfd = connect_to(target_, upstream_port);
    if (sfd < 0) {
        close_with_reset(cfd);
        return;
    }
    auto c = std::make_unique<Side>(), s = std::make_unique<Side>();
    c->fd = cfd;
    s->fd = sfd;
    c->peer = s.get();
    s->peer = c.get();
    for (Side* x : {c.get(), s.get()}) {
        x->upstream_port = upstream_port;
        x->hung = blackhole_;
        add(x->fd, x);
        live_.insert(x);
    }
    sides_[cfd] = std::move(c);
    sides_[sfd] = std::move(s);
}

std::string Proxy::command(const std::string& line) {
    std::istringstream in(line);
    std::string verb;
    in >> verb;
    if (verb == "pass" || verb == "blackhole") {
        blackhole_ = verb == "blackhole";
        for (Side* s : live_) s->hung = blackhole_;
        return "ok\n";
    }
    if (verb == "hang") {
        int port = 0;
        if (!(in >> port)) return "error: hang PORT\n";
        int found = 0;
        for (Side* s : live_)
            if (s->upstream_port == port) s->hung = true, ++found;
        return found ? "ok\n" : "error: no connection with upstream port " + std::to_string(port) + "\n";
    }
    if (verb == "reset") {
        while (!live_.empty()) drop(*live_.begin(), true);
        return "ok\n";
    }
    if (verb == "delay") {
        long us = -1;
        if (!(in >> us) || us < 0) return "error: delay US (a count of microseconds >= 0)\n";
        delay_ = std::chrono::microseconds(us);
        return "ok\n";
    }
    if (verb == "conns") {
        std::string out;
        for (auto& [fd, s] : sides_)
            if (s->peer && s->fd < s->peer->fd)  // one line per pair
                out += std::to_string(s->upstream_port) + (s->hung ? " hang\n" : " pass\n");
        return out + "ok\n";
    }
    return "error: unknown command '" + verb + "' (pass, blackhole, hang PORT, reset, delay US, conns)\n";
}

// The control port: a short blocking exchange; its client is a test on loopback.
void Proxy::serve_control() {
    int fd = accept(control_fd_, nullptr, nullptr);
    if (fd < 0) return;
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string line;
    char c;
    while (line.size() < 256 && recv(fd, &c, 1, 0) == 1 && c != '\n') line += c;
    std::string reply = command(line);
    [[maybe_unused]] auto n = send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    close(fd);
}

// Sends what is due; returns when the next chunk is.
Clock::time_point Proxy::flush_due() {
    auto now = Clock::now();
    Clock::time_point next = Clock::time_point::max();
    std::vector<Side*> dead;
    for (auto& [fd, s] : sides_) {
        while (!s->outbox.empty() && s->outbox.front().due <= now) {
            auto& c = s->outbox.front();
            ssize_t n = send(fd, c.bytes.data(), c.bytes.size(), MSG_NOSIGNAL);
            if (n < 0) {
                if (errno != EAGAIN) dead.push_back(s.get());
                break;
            }
            if (static_cast<std::size_t>(n) < c.bytes.size()) {  // rare: retry the rest soon
                c.bytes.erase(0, static_cast<std::size_t>(n));
                break;
            }
            s->outbox.pop_front();
        }
        if (!s->outbox.empty()) next = std::min(next, s->outbox.front().due);
    }
    for (Side* s : dead)
        if (live_.count(s)) drop(s, false);
    return next;
}

int Proxy::run() {
    int listen_port = 0, control_port = 0;
    listen_fd_ = listen_loopback(listen_port);
    control_fd_ = listen_loopback(control_port);
    // Delays to the microsecond: a timerfd at the next chunk's due time,
    // with the timer slack (50 us by default) cut to 1 ns.
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    ep_ = epoll_create1(0);
    add(listen_fd_, &listen_tag_);
    add(control_fd_, &control_tag_);
    add(timer_fd_, &timer_tag_);
    std::printf("ready %d %d\n", listen_port, control_port);
    std::fflush(stdout);

    char buf[65536];
    for (;;) {
        auto next = flush_due();
        itimerspec its{};  // all zero: disarmed
        if (next != Clock::time_point::max()) {
            auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(next.time_since_epoch()).count();
            its.it_value.tv_sec = ns / 1000000000;
            its.it_value.tv_nsec = std::max<long>(1, ns % 1000000000);
        }
        timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr);
        epoll_event events[64];
        int n = epoll_wait(ep_, events, 64, -1);
        for (int i = 0; i < n; ++i) {
            void* tag = events[i].data.ptr;
            if (tag == &timer_tag_) {
                std::uint64_t expirations;
                [[maybe_unused]] auto r = read(timer_fd_, &expirations, sizeof expirations);
            } else if (tag == &listen_tag_) {
                accept_client();
            } else if (tag == &control_tag_) {
                serve_control();
            } else {
                auto* s = static_cast<Side*>(tag);
                if (!live_.count(s)) continue;  // dropped earlier in this round
                ssize_t r = recv(s->fd, buf, sizeof buf, 0);
                if (r <= 0) {
                    // A blackholed peer never learns that the other side left.
                    if (s->hung) {
                        epoll_ctl(ep_, EPOLL_CTL_DEL, s->fd, nullptr);
                        continue;
                    }
                    drop(s, false);
                    continue;
                }
                if (s->hung) continue;  // taken and dropped: nothing ever answers
                s->peer->outbox.push_back(
                    Chunk{Clock::now() + delay_, std::string(buf, static_cast<std::size_t>(r))});
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    Target target;
    long delay_us = 0;
    bool blackhole = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(argv[0]);
            return argv[++i];
        };
        char* end = nullptr;
        if (a == "--target-port") {
            std::string v = value();
            target.port = static_cast<int>(std::strtol(v.c_str(), &end, 10));
            if (*end || target.port <= 0 || target.port > 65535) usage(argv[0]);
        } else if (a == "--target-unix") {
            target.unix_path = value();
        } else if (a == "--delay-us") {
            std::string v = value();
            delay_us = std::strtol(v.c_str(), &end, 10);
            if (*end || delay_us < 0) usage(argv[0]);
        } else if (a == "--blackhole") {
            blackhole = true;
        } else {
            usage(argv[0]);
        }
    }
    if ((target.port == 0) == target.unix_path.empty()) usage(argv[0]);
    return Proxy(target, std::chrono::microseconds(delay_us), blackhole).run();
}
