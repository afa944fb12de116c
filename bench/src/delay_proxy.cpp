// A TCP proxy on loopback that holds every chunk of bytes for a fixed delay
// in each direction: a network round trip of 2 x delay between a client and
// a server on the same machine (netem is not available in containers). One
// thread, epoll; chunks keep their order per direction. Used by
// bench/run.sh to measure benchmark 1 at a datacenter-like round trip.
//
//   bench_delay_proxy TARGET_PORT DELAY_US   (prints "ready PORT": the port it listens on)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>
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
    bool closed = false;
};

void nodelay_nonblock(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        return -1;
    }
    nodelay_nonblock(fd);
    return fd;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s TARGET_PORT DELAY_US\n", argv[0]);
        return 2;
    }
    const int target = std::atoi(argv[1]);
    const auto delay = std::chrono::microseconds(std::atol(argv[2]));
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;  // any free port
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(lfd, 64) != 0 ||
        getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
        std::perror("bench_delay_proxy: bind/listen");
        return 1;
    }
    // Wake-ups to the microsecond: a timerfd at the next chunk's due time,
    // with the timer slack (50 us by default) cut to 1 ns.
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    int ep = epoll_create1(0);
    int listen_tag = 0, timer_tag = 0;
    for (auto [fd, tag] : {std::pair<int, int*>{lfd, &listen_tag}, {tfd, &timer_tag}}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = tag;
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    std::map<int, std::unique_ptr<Side>> sides;
    std::unordered_set<Side*> live;
    std::printf("ready %d\n", ntohs(a.sin_port));
    std::fflush(stdout);

    auto drop = [&](Side* s) {
        for (Side* x : {s, s->peer}) {
            if (!x || x->fd < 0) continue;
            epoll_ctl(ep, EPOLL_CTL_DEL, x->fd, nullptr);
            close(x->fd);
            live.erase(x);
            sides.erase(x->fd);  // frees x
        }
    };
    char buf[65536];
    for (;;) {
        // Send what is due; sleep until the next chunk is.
        auto now = Clock::now();
        Clock::time_point next = Clock::time_point::max();
        std::vector<Side*> dead;
        for (auto& [fd, s] : sides) {
            while (!s->outbox.empty() && s->outbox.front().due <= now) {
                auto& c = s->outbox.front();
                ssize_t n = send(fd, c.bytes.data(), c.bytes.size(), MSG_NOSIGNAL);
                if (n < 0) {
                    dead.push_back(s.get());
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
            if (live.count(s)) drop(s);
        itimerspec its{};  // all zero: disarmed
        if (next != Clock::time_point::max()) {
            auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(next.time_since_epoch()).count();
            its.it_value.tv_sec = ns / 1000000000;
            its.it_value.tv_nsec = std::max<long>(1, ns % 1000000000);
        }
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
        epoll_event events[64];
        int n = epoll_wait(ep, events, 64, -1);
        for (int i = 0; i < n; ++i) {
            if (events[i].data.ptr == &timer_tag) {
                std::uint64_t expirations;
                [[maybe_unused]] auto r = read(tfd, &expirations, sizeof expirations);
                continue;
            }
            if (events[i].data.ptr == &listen_tag) {
                int cfd = accept(lfd, nullptr, nullptr);
                if (cfd < 0) continue;
                nodelay_nonblock(cfd);
                int sfd = connect_to(target);
                if (sfd < 0) {
                    close(cfd);
                    continue;
                }
                auto c = std::make_unique<Side>(), s = std::make_unique<Side>();
                c->fd = cfd;
                s->fd = sfd;
                c->peer = s.get();
                s->peer = c.get();
                for (Side* x : {c.get(), s.get()}) {
                    epoll_event e{};
                    e.events = EPOLLIN;
                    e.data.ptr = x;
                    epoll_ctl(ep, EPOLL_CTL_ADD, x->fd, &e);
                }
                live.insert(c.get());
                live.insert(s.get());
                sides[cfd] = std::move(c);
                sides[sfd] = std::move(s);
                continue;
            }
            auto* s = static_cast<Side*>(events[i].data.ptr);
            if (!live.count(s)) continue;  // dropped earlier in this round
            ssize_t r = recv(s->fd, buf, sizeof buf, 0);
            if (r <= 0) {
                drop(s);
                continue;
            }
            s->peer->outbox.push_back(Chunk{Clock::now() + delay, std::string(buf, static_cast<std::size_t>(r))});
        }
    }
}
