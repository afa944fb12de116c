// simba client (internal): the callback of a permit or of a locker's hold
// that may be running on the handle thread. release() and end() wait for it
// (unless called from inside it), so none runs after they returned.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace simba::pg::detail {

class RunningCallback {
public:
    /// The owner's mutex held: the calling thread runs a callback from now.
    void enter() { thread_ = std::this_thread::get_id(); }
    /// Runs `cb` (enter() first) without the owner's mutex `m`, then marks
    /// it done, also when it throws.
    void run(std::mutex& m, const std::function<void()>& cb) {
        struct Done {
            RunningCallback& r;
            std::mutex& m;
            ~Done() {
                {
                    std::lock_guard<std::mutex> lock(m);
                    r.thread_ = {};
                }
                r.done_.notify_all();
            }
        } done{*this, m};
        cb();
    }
    /// `lock` on the owner's mutex held: waits until no callback runs,
    /// unless it is the calling thread's own.
    void wait_idle(std::unique_lock<std::mutex>& lock) {
        done_.wait(lock, [&] { return thread_ == std::thread::id{} || thread_ == std::this_thread::get_id(); });
    }

private:
    std::thread::id thread_;
    std::condition_variable done_;
};

}  // namespace simba::pg::detail
