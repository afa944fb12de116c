#include "executor.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <queue>
#include <string>
#include <vector>

#include "simba/log.hpp"

namespace simba::pg::detail {

struct Executor::State {
    struct Timed {
        SteadyClock::time_point at;
        std::uint64_t seq;
        std::function<void()> fn;
        bool operator>(const Timed& o) const { return at != o.at ? at > o.at : seq > o.seq; }
    };

    std::mutex m;
    std::condition_variable cv;
    std::deque<std::function<void()>> queue;
    std::priority_queue<Timed, std::vector<Timed>, std::greater<Timed>> timed;
    std::uint64_t seq = 0;
    bool closed = false;

    static void safe_run(std::function<void()>& fn) {
        try {
            fn();
        } catch (const std::exception& e) {
            log(LogLevel::error, std::string("handle thread task threw: ") + e.what());
        } catch (...) {
            log(LogLevel::error, "handle thread task threw a non-std exception");
        }
    }

    // `self` keeps the state alive for as long as the thread runs.
    static void run(const std::shared_ptr<State>& self) {
        State& s = *self;
        std::unique_lock<std::mutex> lock(s.m);
        for (;;) {
            // Due timed tasks (lease deadlines) go first: a callback queued
            // after a deadline passed (another service's on_acquired) must
            // not run before that deadline's on_released.
            if (!s.closed && !s.timed.empty() && s.timed.top().at <= SteadyClock::now()) {
                auto fn = std::move(const_cast<Timed&>(s.timed.top()).fn);
                s.timed.pop();
                lock.unlock();
                safe_run(fn);
                lock.lock();
                continue;
            }
            if (!s.queue.empty()) {
                auto fn = std::move(s.queue.front());
                s.queue.pop_front();
                lock.unlock();
                safe_run(fn);
                lock.lock();
                continue;
            }
            if (s.closed) return;
            if (s.timed.empty()) {
                s.cv.wait(lock);
            } else {
                const auto at = s.timed.top().at;  // a copy: the heap may reallocate while we wait
                s.cv.wait_for(lock, at - SteadyClock::now());
            }
        }
    }
};

Executor::Executor() : state_(std::make_shared<State>()) {
    thread_ = std::thread([st = state_] { State::run(st); });
    id_ = thread_.get_id();
}

bool Executor::post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(state_->m);
    if (state_->closed) return false;
    state_->queue.push_back(std::move(fn));
    state_->cv.notify_one();
    return true;
}

bool Executor::post_at(SteadyClock::time_point at, std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(state_->m);
    if (state_->closed) return false;
    // The thread sleeps until the earliest task: wake it only if this one is earlier.
    const bool earliest = state_->timed.empty() || at < state_->timed.top().at;
    state_->timed.push(State::Timed{at, state_->seq++, std::move(fn)});
    if (earliest) state_->cv.notify_one();
    return true;
}

void Executor::shutdown() {
    {
        std::lock_guard<std::mutex> lock(state_->m);
        state_->closed = true;
        state_->cv.notify_one();
    }
    if (!thread_.joinable()) return;
    if (on_this_thread())
        thread_.detach();  // destroyed by one of its own tasks: it exits by itself, on the shared state
    else
        thread_.join();
}

}  // namespace simba::pg::detail
