#include "hold_gate.hpp"

#include <algorithm>

#include "simba/errors.hpp"

namespace simba::pg::detail {

bool HoldGate::holds(std::thread::id me) const {
    return writer_ == me || std::find(readers_.begin(), readers_.end(), me) != readers_.end();
}

/// A shared lock may join the read hold now: it is live and no thread of
/// the process waits to write.
bool HoldGate::joinable() const { return mode_now_ == Mode::read && writers_waiting_ == 0 && hold_->view(); }

/// The gate is free for a new take in that mode (a writer waiting keeps
/// readers out).
bool HoldGate::idle_for(bool shared) const { return mode_now_ == Mode::none && (!shared || writers_waiting_ == 0); }

bool HoldGate::lock(SteadyClock::time_point deadline, bool shared, bool once) {
    UniqueLock lock(m_);
    const auto me = std::this_thread::get_id();
    if (holds(me)) throw IllegalStateError(what_ + " is already held by this thread (it is not recursive)");
    const auto my_cancels = cancels_;
    struct Waiting {  // a writer waiting keeps new readers out (writer preference)
        int* n;
        ~Waiting() {
            if (n) --*n;
        }
    } waiting{shared ? nullptr : &writers_waiting_};
    if (!shared) ++writers_waiting_;
    for (;;) {
        if (cancels_ != my_cancels) throw CancelledError("lock of " + what_ + " was cancelled");
        if (shared && joinable()) {
            readers_.push_back(me);
            return true;
        }
        if (idle_for(shared)) break;
        if (once) return false;
        // Woken by every change of mode; the read hold's liveness is looked
        // at every 50 ms. One wait, then the loop looks again.
        cv_.wait_until(lock, std::min(deadline, SteadyClock::now() + std::chrono::milliseconds(50)));
        if (SteadyClock::now() >= deadline && !idle_for(shared) && !(shared && joinable())) return false;
    }
    if (waiting.n) {
        --writers_waiting_;
        waiting.n = nullptr;
    }
    mode_now_ = Mode::taking;
    lock.unlock();
    bool ok = false;
    try {
        mode_(shared);
        ok = hold_->take(deadline, once);
    } catch (...) {
        lock.lock();
        mode_now_ = Mode::none;
        cv_.notify_all();
        throw;
    }
    lock.lock();
    if (cancels_ != my_cancels) {
        // cancel() came as the take ended: its end() released the hold.
        mode_now_ = Mode::none;
        cv_.notify_all();
        throw CancelledError("lock of " + what_ + " was cancelled");
    }
    if (!ok) {
        mode_now_ = Mode::none;
        cv_.notify_all();
        return false;
    }
    if (shared) {
        mode_now_ = Mode::read;
        readers_.push_back(me);
    } else {
        mode_now_ = Mode::write;
        writer_ = me;
    }
    cv_.notify_all();
    return true;
}

/// The last holder gone: the server hold is released (without m held).
void HoldGate::release() {
    mode_now_ = Mode::releasing;
    {
        MutexUnlock unlocked(m_);
        hold_->end();
    }
    mode_now_ = Mode::none;
    cv_.notify_all();
}

void HoldGate::unlock(bool shared) {
    UniqueLock lock(m_);
    const auto me = std::this_thread::get_id();
    if (shared) {
        // This thread's hold, else one that lock_async() took for no thread.
        auto it = std::find(readers_.begin(), readers_.end(), me);
        if (it == readers_.end()) it = std::find(readers_.begin(), readers_.end(), std::thread::id{});
        if (mode_now_ != Mode::read || it == readers_.end())
            throw IllegalStateError(what_ + " is not held for reading by this thread");
        readers_.erase(it);
        if (!readers_.empty()) return;
    } else {
        if (mode_now_ != Mode::write || (writer_ != me && writer_ != std::thread::id{}))
            throw IllegalStateError(what_ + " is not held by this thread");
        writer_.reset();
    }
    release();
}

std::future<void> HoldGate::lock_async(bool shared) {
    auto done = std::make_shared<std::promise<void>>();
    auto future = done->get_future();
    UniqueLock lock(m_);
    if (shared && joinable()) {
        readers_.emplace_back();
        done->set_value();
        return future;
    }
    if (mode_now_ != Mode::none || (shared && writers_waiting_ > 0))
        throw IllegalStateError(what_ + " is held or being taken in this process: an asynchronous lock needs it idle");
    mode_now_ = Mode::taking;
    const auto my_cancels = cancels_;
    lock.unlock();
    mode_(shared);
    hold_->begin([this, done, shared, my_cancels](std::exception_ptr error) {
        // On the I/O thread (or a canceller's): the gate outlives the hold's
        // wait (the locker's destructor cancels it first).
        {
            MutexLock lock(m_);
            if (error || cancels_ != my_cancels) {
                mode_now_ = Mode::none;
            } else if (shared) {
                mode_now_ = Mode::read;
                readers_.emplace_back();
            } else {
                mode_now_ = Mode::write;
                writer_ = std::thread::id{};
            }
            cv_.notify_all();
        }
        if (!error) return done->set_value();
        done->set_exception(error);
    });
    return future;
}

bool HoldGate::downgrade() {
    UniqueLock lock(m_);
    const auto me = std::this_thread::get_id();
    if (mode_now_ != Mode::write || (writer_ != me && writer_ != std::thread::id{}))
        throw IllegalStateError(what_ + " is not held for writing by this thread");
    lock.unlock();
    const bool ok = hold_->regrant([this](HoldStatements&) { mode_(true); });
    lock.lock();
    mode_now_ = Mode::read;
    readers_.push_back(*writer_);
    writer_.reset();
    cv_.notify_all();
    return ok;
}

void HoldGate::cancel() {
    {
        MutexLock lock(m_);
        ++cancels_;
        cv_.notify_all();
    }
    hold_->end();
}

std::optional<LockHold::View> HoldGate::view(bool* exclusive) const {
    MutexLock lock(m_);
    if (exclusive) *exclusive = mode_now_ == Mode::write;
    if (mode_now_ != Mode::read && mode_now_ != Mode::write) return std::nullopt;
    return hold_->view();
}

}  // namespace simba::pg::detail
