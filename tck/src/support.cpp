#include "support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace simba::tck {

bool eventually(const std::function<bool()>& pred, SteadyClock::duration timeout) {
    const auto deadline = SteadyClock::now() + timeout;
    while (!pred()) {
        if (SteadyClock::now() >= deadline) return pred();
        std::this_thread::sleep_for(2ms);
    }
    return true;
}

ContendOptions lease(milliseconds ttl, milliseconds transition) {
    ContendOptions o;
    o.ttl = ttl;
    o.transition = transition;
    return o;
}

double ms_of(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// ---------------------------------------------------------------- Recorder

void Recorder::record(bool acquired, const MutexState& s) {
    {
        std::lock_guard<std::mutex> lock(m_);
        events_.push_back(Event{acquired, s, SteadyClock::now()});
    }
    if (hook) hook(acquired, s);
    cv_.notify_all();
}

std::vector<Recorder::Event> Recorder::events() const {
    std::lock_guard<std::mutex> lock(m_);
    return events_;
}

std::size_t Recorder::count(bool acquired) const {
    std::lock_guard<std::mutex> lock(m_);
    std::size_t n = 0;
    for (auto& e : events_) n += e.acquired == acquired;
    return n;
}

bool Recorder::wait(const std::function<bool(const std::vector<Event>&)>& pred, SteadyClock::duration timeout) {
    std::unique_lock<std::mutex> lock(m_);
    return cv_.wait_for(lock, timeout, [&] { return pred(events_); });
}

// ------------------------------------------------------------------ Worker

std::int64_t Worker::Event::num(const std::string& k) const {
    auto it = kv.find(k);
    if (it == kv.end()) throw std::runtime_error("worker event '" + kind + "' has no " + k);
    return std::stoll(it->second);
}

SteadyClock::time_point Worker::Event::steady(const std::string& k) const {
    return SteadyClock::time_point(std::chrono::duration_cast<SteadyClock::duration>(std::chrono::nanoseconds(num(k))));
}

SteadyClock::time_point Worker::Event::t() const { return steady("t"); }

Worker::Worker(const Backend& backend, const std::string& mutex, const std::string& id, const std::string& tag,
               milliseconds ttl, milliseconds transition)
    : id_(id), tag_(tag) {
    if (backend.worker_command.empty()) throw std::runtime_error("backend has no worker_command");
    std::vector<std::string> args = backend.worker_command;
    for (auto s : {"--mutex", mutex.c_str(), "--id", id.c_str(), "--tag", tag.c_str()}) args.emplace_back(s);
    args.emplace_back("--ttl-ms");
    args.push_back(std::to_string(ttl.count()));
    args.emplace_back("--transition-ms");
    args.push_back(std::to_string(transition.count()));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    if (rc != 0) {
        ::close(fds[0]);
        throw std::runtime_error("cannot start worker " + args[0] + ": " + std::strerror(rc));
    }
    int rfd = fds[0];
    reader_ = std::thread([this, rfd] { read_loop(rfd); });
}

Worker::~Worker() {
    if (!reaped_ && pid_ > 0) {
        ::kill(pid_, SIGCONT);
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status_, 0);
        reaped_ = true;
    }
    if (reader_.joinable()) reader_.join();
}

void Worker::read_loop(int fd) {
    std::string buf;
    char chunk[4096];
    for (;;) {
        ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        buf.append(chunk, static_cast<std::size_t>(n));
        std::size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
            std::string line = buf.substr(0, nl);
            buf.erase(0, nl + 1);
            std::istringstream in(line);
            Event e;
            in >> e.kind;
            std::string tok;
            while (in >> tok) {
                auto eq = tok.find('=');
                if (eq != std::string::npos) e.kv[tok.substr(0, eq)] = tok.substr(eq + 1);
            }
            {
                std::lock_guard<std::mutex> lock(m_);
                events_.push_back(std::move(e));
            }
            cv_.notify_all();
        }
    }
    ::close(fd);
    {
        std::lock_guard<std::mutex> lock(m_);
        eof_ = true;
    }
    cv_.notify_all();
}

std::vector<Worker::Event> Worker::events() const {
    std::lock_guard<std::mutex> lock(m_);
    return events_;
}

std::vector<Worker::Event> Worker::events(const std::string& kind) const {
    std::vector<Event> out;
    for (auto& e : events())
        if (e.kind == kind) out.push_back(e);
    return out;
}

Worker::Event Worker::wait_for(const std::function<bool(const Event&)>& pred, SteadyClock::duration timeout) {
    std::unique_lock<std::mutex> lock(m_);
    Event found;
    cv_.wait_for(lock, timeout, [&] {
        for (auto& e : events_)
            if (pred(e)) {
                found = e;
                return true;
            }
        return eof_;
    });
    return found;
}

void Worker::signal(int sig) {
    if (!reaped_) ::kill(pid_, sig);
}

int Worker::wait_exit(SteadyClock::duration timeout) {
    if (reaped_) return status_;
    const auto deadline = SteadyClock::now() + timeout;
    for (;;) {
        pid_t r = ::waitpid(pid_, &status_, WNOHANG);
        if (r == pid_) {
            reaped_ = true;
            return status_;
        }
        if (SteadyClock::now() >= deadline) return -1;
        std::this_thread::sleep_for(2ms);
    }
}

// ---------------------------------------------------------- HistorySampler

HistorySampler::HistorySampler(const Backend& backend, std::string mutex, milliseconds every)
    : backend_(backend), mutex_(std::move(mutex)), every_(every) {
    thread_ = std::thread([this] {
        std::unique_lock<std::mutex> lock(m_);
        while (!quit_) {
            lock.unlock();
            ServerRow row;
            std::string err;
            try {
                row = backend_.read_row(mutex_);
            } catch (const std::exception& e) {
                err = e.what();
            }
            lock.lock();
            if (err.empty())
                rows_.push_back(row);
            else
                errors_.push_back(err);
            cv_.wait_for(lock, every_, [&] { return quit_; });
        }
    });
}

HistorySampler::~HistorySampler() { stop(); }

void HistorySampler::stop() {
    {
        std::lock_guard<std::mutex> lock(m_);
        quit_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::vector<ServerRow> HistorySampler::rows() const {
    std::lock_guard<std::mutex> lock(m_);
    return rows_;
}

std::vector<HistorySampler::Tenure> HistorySampler::tenures() const {
    std::map<std::int64_t, Tenure> by_fence;
    for (auto& r : rows()) {
        if (!r.exists || r.owner_id.empty()) continue;
        auto& t = by_fence[r.fence];
        if (t.samples == 0) {
            t.owner_id = r.owner_id;
            t.fence = r.fence;
            t.acquired_at = r.acquired_at;
        }
        t.transition_at = std::max(t.transition_at, r.transition_at);
        ++t.samples;
    }
    std::vector<Tenure> out;
    for (auto& [f, t] : by_fence) out.push_back(t);
    return out;
}

Percentiles percentiles(std::vector<double> v) {
    Percentiles p{0, 0, 0, 0};
    if (v.empty()) return p;
    std::sort(v.begin(), v.end());
    auto at = [&](double q) {
        auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
        return v[std::min(i, v.size() - 1)];
    };
    p.p50 = at(0.50);
    p.p95 = at(0.95);
    p.max = v.back();
    p.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    return p;
}

}  // namespace simba::tck
