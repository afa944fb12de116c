// simba client (internal): the I/O thread's timers. AttemptQueue holds each
// running service's next attempt (one current timer per service; a newer
// one cancels the older by generation) and pops due attempts in batches;
// TaskQueue holds other timed work (semaphore permit refreshes). I/O state
// (io_state.hpp): no locking of their own.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "service_state.hpp"

namespace simba::pg::detail {

class AttemptQueue {
public:
    /// `svc` attempts at `at`, instead of at any earlier-set time
    /// (svc->next_at says when; due_batch() sets it to max() again).
    /// `live_services` bounds the cancelled timers kept (compaction).
    void schedule(const ServicePtr& svc, SteadyClock::time_point at, std::size_t live_services) REQUIRES(io_state);
    /// Pops the attempts due now, plus those due within their batch window
    /// (`window`, at most a tenth of the service's ttl), up to `max`.
    std::vector<ServicePtr> due_batch(SteadyClock::time_point now, SteadyClock::duration window, std::size_t max)
        REQUIRES(io_state);
    /// When the next live attempt is due (max() if none).
    SteadyClock::time_point next_due() REQUIRES(io_state);

private:
    struct Timer {
        SteadyClock::time_point at;
        std::uint64_t seq;
        std::weak_ptr<ServiceState> svc;  // a stopped, destroyed service is not kept alive
        std::uint64_t gen;
        /// The service if this timer is still current.
        ServicePtr live() const REQUIRES(io_state) {
            auto s = svc.lock();
            return s && s->timer_gen == gen && s->io_active ? s : nullptr;
        }
        bool operator>(const Timer& o) const { return at != o.at ? at > o.at : seq > o.seq; }
    };
    std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
    std::uint64_t seq_ = 0;
};

class TaskQueue {
public:
    void push(SteadyClock::time_point at, std::function<void()> fn) REQUIRES(io_state) {
        tasks_.push(Task{at, seq_++, std::move(fn)});
    }
    /// Runs the tasks due by now.
    void run_due() REQUIRES(io_state);
    /// When the next task is due (max() if none).
    SteadyClock::time_point next_due() const REQUIRES(io_state) {
        return tasks_.empty() ? SteadyClock::time_point::max() : tasks_.top().at;
    }

private:
    struct Task {
        SteadyClock::time_point at;
        std::uint64_t seq;
        std::function<void()> fn;
        bool operator>(const Task& o) const { return at != o.at ? at > o.at : seq > o.seq; }
    };
    std::priority_queue<Task, std::vector<Task>, std::greater<Task>> tasks_;
    std::uint64_t seq_ = 0;
};

}  // namespace simba::pg::detail
