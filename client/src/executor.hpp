// simba client (internal): the handle thread of a factory. Runs posted tasks
// in order (the contenders' callbacks) and timed tasks at their time (lease
// deadline checks, the statement watchdog); due timed tasks go first.
//
// Its state is shared with the thread: when the last reference to a factory
// is dropped by a callback, the Executor is destroyed on its own thread,
// which then finishes that task and exits on state that is still alive.
#pragma once

#include <functional>
#include <memory>
#include <thread>

#include "simba/clock.hpp"

namespace simba::pg::detail {

class Executor {
public:
    Executor();
    ~Executor() { shutdown(); }
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    /// Queues `fn`; false once shut down (the task is dropped).
    bool post(std::function<void()> fn);
    /// Runs `fn` at `at` (not before); false once shut down.
    bool post_at(SteadyClock::time_point at, std::function<void()> fn);
    [[nodiscard]] bool on_this_thread() const { return std::this_thread::get_id() == id_; }
    /// Runs what is queued (not the timed tasks), then stops the thread.
    void shutdown();

private:
    struct State;
    std::shared_ptr<State> state_;
    std::thread thread_;
    std::thread::id id_;
};

}  // namespace simba::pg::detail
