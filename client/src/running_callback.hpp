// simba client (internal): the callback of a LockHold (a permit's or a
// locker's hold) that may be running on the handle thread. end() waits for
// it (unless called from inside it), so none runs after it returned.
#pragma once

#include <functional>
#include <thread>

#include "thread_annotations.hpp"

namespace simba::pg::detail {

/// Its state is guarded by the owner's mutex, passed to each call as `m`
/// (so the analysis checks the caller holds it, or not).
class RunningCallback {
public:
    /// The owner's mutex held: the calling thread runs a callback from now.
    void enter([[maybe_unused]] Mutex& m) REQUIRES(m) { thread_ = std::this_thread::get_id(); }
    /// Runs `cb` (enter() first) without the owner's mutex `m`, then marks
    /// it done, also when it throws.
    void run(Mutex& m, const std::function<void()>& cb) EXCLUDES(m) {
        struct Done {
            RunningCallback& r;
            Mutex& m;
            ~Done() {
                {
                    MutexLock lock(m);
                    r.thread_ = {};
                }
                r.done_.notify_all();
            }
        } done{*this, m};
        cb();
    }
    /// `lock` on the owner's mutex `m` held: waits until no callback runs,
    /// unless it is the calling thread's own.
    void wait_idle([[maybe_unused]] Mutex& m, UniqueLock& lock) REQUIRES(m) {
        while (thread_ != std::thread::id{} && thread_ != std::this_thread::get_id()) done_.wait(lock);
    }

private:
    std::thread::id thread_;  // the owner's mutex
    CondVar done_;
};

}  // namespace simba::pg::detail
