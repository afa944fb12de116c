// simba client (internal): CommandQueue, what other threads ask of a
// factory's I/O thread (start a service, run a statement, stop services),
// run in the order posted; each post wakes the loop. Stops posted one after another, with no other
// command between them, run as one (Lockers destroyed in a row release in
// one statement). The queue closes as the I/O thread exits: nothing posted
// after that runs.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "service_state.hpp"
#include "thread_annotations.hpp"
#include "wake_fd.hpp"

namespace simba::pg::detail {

class CommandQueue {
public:
    using Command = std::function<void()>;
    using StopAll = std::function<void(const std::vector<ServicePtr>&)>;

    /// `waker` wakes the I/O loop's poll() (it outlives the queue).
    explicit CommandQueue(WakeFd& waker) : waker_(waker) {}

    /// False once closed (the command will never run).
    bool post(Command fn) EXCLUDES(m_) {
        {
            MutexLock lock(m_);
            if (closed_) return false;
            commands_.push_back(std::move(fn));
            open_stop_.reset();
        }
        waker_.wake();
        return true;
    }

    /// Joins the stop posted last if nothing came after it, else posts
    /// `stop_all` of these services and whichever join it. False once closed.
    bool post_stop(const std::vector<ServicePtr>& svcs, StopAll stop_all) EXCLUDES(m_) {
        {
            MutexLock lock(m_);
            if (closed_) return false;
            if (!open_stop_) {
                open_stop_ = std::make_shared<std::vector<ServicePtr>>();
                commands_.push_back([stops = open_stop_, stop_all = std::move(stop_all)] { stop_all(*stops); });
            }
            open_stop_->insert(open_stop_->end(), svcs.begin(), svcs.end());
        }
        waker_.wake();
        return true;
    }

    /// The commands posted so far, to run in order (on the I/O thread).
    std::deque<Command> take() EXCLUDES(m_) {
        MutexLock lock(m_);
        open_stop_.reset();
        return std::exchange(commands_, {});
    }

    /// Asks the I/O loop to end; false if it was asked already.
    bool quit() EXCLUDES(m_) {
        {
            MutexLock lock(m_);
            if (std::exchange(quit_, true)) return false;
        }
        waker_.wake();
        return true;
    }
    [[nodiscard]] bool quitting() const EXCLUDES(m_) {
        MutexLock lock(m_);
        return quit_;
    }
    /// The I/O loop has ended: what is posted from now on is refused.
    void close() EXCLUDES(m_) {
        MutexLock lock(m_);
        closed_ = true;
    }

private:
    WakeFd& waker_;
    mutable Mutex m_;
    std::deque<Command> commands_ GUARDED_BY(m_);
    std::shared_ptr<std::vector<ServicePtr>> open_stop_ GUARDED_BY(m_);  // the last command's, while it is a stop
    bool quit_ GUARDED_BY(m_) = false;
    bool closed_ GUARDED_BY(m_) = false;
};

}  // namespace simba::pg::detail
