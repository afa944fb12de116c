// simba TCK: helpers of the suite (backend-neutral).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "simba/simba.hpp"
#include "simba/tck/backend.hpp"

namespace simba::tck {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

/// Polls `pred` every 2 ms until it holds or `timeout` passes; returns pred().
bool eventually(const std::function<bool()>& pred, SteadyClock::duration timeout);

ContendOptions lease(milliseconds ttl, milliseconds transition);

double ms_of(SteadyClock::duration d);

/// A contender recording its callbacks (time, state, and a per-process
/// callback hook run inside the callback).
class Recorder : public MutexContender {
public:
    using MutexContender::MutexContender;
    struct Event {
        bool acquired;
        MutexState state;
        SteadyClock::time_point at;
    };
    void on_acquired(const MutexState& s) override { record(true, s); }
    void on_released(const MutexState& s) override { record(false, s); }

    std::vector<Event> events() const;
    std::size_t count(bool acquired) const;
    bool wait(const std::function<bool(const std::vector<Event>&)>& pred, SteadyClock::duration timeout);
    bool wait_count(bool acquired, std::size_t n, SteadyClock::duration timeout) {
        return wait([&](const std::vector<Event>& ev) {
            std::size_t k = 0;
            for (auto& e : ev) k += e.acquired == acquired;
            return k >= n;
        }, timeout);
    }
    /// Runs inside the callback, after recording.
    std::function<void(bool acquired, const MutexState&)> hook;

private:
    void record(bool acquired, const MutexState& s);
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::vector<Event> events_;
};

/// A worker process (Backend::worker_command) and the events it printed.
class Worker {
public:
    struct Event {
        std::string kind;  // ready, acquired, released, acting, idle, stopped
        std::map<std::string, std::string> kv;
        std::int64_t num(const std::string& k) const;
        SteadyClock::time_point t() const;  // "t" as a steady time point
        SteadyClock::time_point steady(const std::string& k) const;
        ServerTime server(const std::string& k) const { return ServerTime(num(k)); }
    };

    Worker(const Backend& backend, const std::string& mutex, const std::string& id, const std::string& tag,
           milliseconds ttl, milliseconds transition);
    ~Worker();  // SIGCONT + SIGKILL if still running, reaps
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    const std::string& id() const { return id_; }
    const std::string& tag() const { return tag_; }
    pid_t pid() const { return pid_; }

    std::vector<Event> events() const;
    std::vector<Event> events(const std::string& kind) const;
    /// Waits for an event matching `pred`; returns it (kind empty if none in time).
    Event wait_for(const std::function<bool(const Event&)>& pred, SteadyClock::duration timeout);
    Event wait_kind(const std::string& kind, SteadyClock::duration timeout) {
        return wait_for([&](const Event& e) { return e.kind == kind; }, timeout);
    }

    void signal(int sig);
    /// Waits for the process to exit; returns its wait status (-1 on timeout).
    int wait_exit(SteadyClock::duration timeout);

private:
    void read_loop(int fd);
    std::string id_, tag_;
    pid_t pid_ = -1;
    bool reaped_ = false;
    int status_ = 0;
    std::thread reader_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::vector<Event> events_;
    bool eof_ = false;
};

/// Samples Backend::read_row on its own thread (every `every`) into a
/// history of the stored row, until stop() or destruction.
class HistorySampler {
public:
    HistorySampler(const Backend& backend, std::string mutex, milliseconds every = 5ms);
    ~HistorySampler();
    void stop();
    std::vector<ServerRow> rows() const;

    /// One holder's tenure as the stored rows show it.
    struct Tenure {
        std::string owner_id;
        std::int64_t fence = 0;
        ServerTime acquired_at{0};
        ServerTime transition_at{0};  // the last one seen (renewals move it)
        std::size_t samples = 0;
    };
    /// Tenures in fence order (rows with no owner are skipped).
    std::vector<Tenure> tenures() const;

private:
    const Backend& backend_;
    std::string mutex_;
    milliseconds every_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    bool quit_ = false;
    std::vector<ServerRow> rows_;
    std::vector<std::string> errors_;
    std::thread thread_;
};

struct Percentiles {
    double p50, p95, max, mean;
};
Percentiles percentiles(std::vector<double> v);

}  // namespace simba::tck
