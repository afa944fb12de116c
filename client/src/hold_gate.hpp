// simba client (internal): HoldGate, the in-process side of a SharedLocker
// or MultiLocker: a std::shared_mutex (not recursive, writers preferred)
// over the one LockHold that holds the lock on the server. The first shared
// lock takes a read hold that later shared locks join while it is live; the
// last shared unlock releases it; an exclusive lock waits until no thread
// holds the gate, then takes the write hold (a MultiLocker's only mode).
//
// Locking: the annotations below (thread_annotations.hpp). No thread holds m_
// while the LockHold waits for the I/O thread (take, end, regrant): the
// hold's callbacks and a lock_async() completion take m_ on their threads.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lock_hold.hpp"
#include "io_state.hpp"
#include "thread_annotations.hpp"

namespace simba::pg::detail {

class HoldGate {
public:
    /// `mode(shared)` sets the statements' mode before a take (on the
    /// calling thread, before the I/O thread reads it).
    HoldGate(std::shared_ptr<LockHold> hold, std::function<void(bool shared)> mode, std::string what)
        : hold_(std::move(hold)), mode_(std::move(mode)), what_(std::move(what)) {}

    /// Blocks until this thread holds the gate in that mode and the server
    /// hold is taken (true), or `deadline` (false); `once`: no waiting at
    /// all. Throws the hold's setup mistakes, CancelledError after cancel(),
    /// IllegalStateError if this thread already holds it.
    bool lock(SteadyClock::time_point deadline, bool shared, bool once) EXCLUDES(m_);
    void unlock(bool shared) EXCLUDES(m_);
    std::future<void> lock_async(bool shared) EXCLUDES(m_);
    /// The writer becomes the gate's only reader; whether the hold goes on.
    bool downgrade() EXCLUDES(m_);
    void cancel() EXCLUDES(m_);
    /// The hold now (if held and live), and whether it is the write hold.
    [[nodiscard]] std::optional<LockHold::View> view(bool* exclusive = nullptr) const EXCLUDES(m_);
    [[nodiscard]] LockHold& hold() const { return *hold_; }

private:
    enum class Mode { none, taking, read, write, releasing };

    bool holds(std::thread::id me) const REQUIRES(m_);
    bool joinable() const REQUIRES(m_);
    bool idle_for(bool shared) const REQUIRES(m_);
    void release() REQUIRES(m_);

    const std::shared_ptr<LockHold> hold_;
    const std::function<void(bool)> mode_;
    const std::string what_;

    mutable Mutex m_ ACQUIRED_AFTER(io_state);  // and before the hold's (LockHold::m_)
    CondVar cv_;  // the mode changed, or a cancel
    Mode mode_now_ GUARDED_BY(m_) = Mode::none;
    std::vector<std::thread::id> readers_ GUARDED_BY(m_);  // one per holding thread; {}: a lock_async() hold
    std::optional<std::thread::id> writer_ GUARDED_BY(m_);
    int writers_waiting_ GUARDED_BY(m_) = 0;
    std::uint64_t cancels_ GUARDED_BY(m_) = 0;
};

}  // namespace simba::pg::detail
