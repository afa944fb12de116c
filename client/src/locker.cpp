#include "simba/locker.hpp"

#include <cstdio>

#include "simba/errors.hpp"
#include "simba/log.hpp"

namespace simba {

// Locker reads ownership from its service (start_and_wait, is_owner,
// fence): no callbacks, so nothing is handed to the handle thread.
struct Locker::Contender final : MutexContender {
    using MutexContender::MutexContender;
    bool has_callbacks() const noexcept override { return false; }
};

Locker::Locker(ContendServiceFactory& factory, std::string mutex, std::string contender_id, ContendOptions options,
               int max_hold_count)
    : contender_(std::make_shared<Contender>(std::move(mutex), std::move(contender_id))),
      service_(factory.create(contender_, options)),
      max_hold_count_(max_hold_count) {
    if (max_hold_count < 1) throw InvalidArgumentError("max_hold_count must be at least 1", "22023");
}

Locker::~Locker() {
    try {
        release();
    } catch (const std::exception& e) {
        log_release_failure(e);
    }
}

/// "timed out acquiring mutex m: held by "B" for another 2.4 s", as the CLI says it.
std::string Locker::timeout_message(const MutexOwner& seen) const {
    std::string msg = "timed out acquiring mutex " + mutex();
    if (!seen.has_owner()) return msg + ": it was free at the last attempt";
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(seen.transition_at - seen.current_at);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(left.count()) / 1000.0);
    return msg + ": held by \"" + seen.owner_id + "\" for another " + buf + " s at the last attempt";
}

void Locker::log_release_failure(const std::exception& e) {
    // Kept out of line so the destructor stays noexcept-friendly.
    log(LogLevel::error, std::string("Locker release failed: ") + e.what());
}

void Locker::acquire() { acquire_until(SteadyClock::time_point::max(), false); }

void Locker::acquire(std::chrono::milliseconds timeout) {
    acquire_until(SteadyClock::now() + timeout, true);
}

bool Locker::acquire_until(SteadyClock::time_point deadline, bool bounded) {
    std::uint64_t cancels;
    {
        std::lock_guard<std::mutex> lock(call_mutex_);
        if (in_use_) throw IllegalStateError("Locker for mutex " + mutex() + " already acquired: release it first");
        in_use_ = true;
        starting_ = true;
        cancels = cancels_;
    }
    auto cancelled = [&] {
        std::lock_guard<std::mutex> lock(call_mutex_);
        return cancels_ != cancels;
    };
    const auto until = bounded ? deadline : SteadyClock::time_point::max();
    bool ok;
    std::int64_t fence = 0;
    // The start is over (release() may stop it now); `failed`: so is the hold.
    auto started = [this](bool failed) {
        std::lock_guard<std::mutex> lock(call_mutex_);
        starting_ = false;
        if (failed) in_use_ = false;
        started_.notify_all();
    };
    try {
        // Start (an attempt's round trip, no waiting for the lock), then wait.
        ok = service_->start_and_wait(SteadyClock::time_point{});
        started(false);
        if (!ok) ok = service_->wait_owner(until);
        // Owner when the wait ended, but a lease can end before fence() reads
        // it: never return with fence 0, wait for the next tenure instead.
        while (ok && (fence = service_->fence()) == 0) ok = service_->wait_owner(until);
    } catch (...) {
        // A setup mistake (no extension, no grant, no server): stop contending.
        started(true);
        try {
            stop_hold();
        } catch (const std::exception& e) {
            log_release_failure(e);
        }
        throw;
    }
    // cancel() or release() from another thread stopped the service: the
    // lock is not taken (and, stopped, not taken after they returned).
    if (cancelled()) {
        stop_hold();
        throw CancelledError("lock of mutex " + mutex() + " was cancelled");
    }
    if (!ok) {
        const auto seen = service_->state().after;
        stop_hold();
        if (!bounded) throw IllegalStateError("Locker for mutex " + mutex() + " was released while acquiring");
        throw TimeoutError(timeout_message(seen));
    }
    std::lock_guard<std::mutex> lock(call_mutex_);
    fence_ = fence;
    return true;
}

void Locker::release() { cancel(); }

void Locker::cancel() {
    {
        std::lock_guard<std::mutex> lock(call_mutex_);
        ++cancels_;
    }
    stop_hold();
}

void Locker::stop_hold() {
    {
        // A start in progress (STARTING) cannot be stopped: wait for it, so
        // its lock is released below instead of taken after we return.
        std::unique_lock<std::mutex> lock(call_mutex_);
        started_.wait(lock, [this] { return !starting_; });
    }
    if (service_->status() == Status::RUNNING) service_->stop();
    std::lock_guard<std::mutex> lock(call_mutex_);
    in_use_ = false;
}

bool Locker::claim(SteadyClock::time_point deadline, bool& reentered) {
    std::unique_lock<std::mutex> lock(call_mutex_);
    const auto me = std::this_thread::get_id();
    reentered = claimant_ == me;
    if (reentered) {
        if (holds_ == 0) throw IllegalStateError("Locker for mutex " + mutex() + " is being taken by this thread");
        if (holds_ >= max_hold_count_)
            throw IllegalStateError("Locker for mutex " + mutex() + " already held " + std::to_string(holds_) +
                                    " times by this thread (max_hold_count " + std::to_string(max_hold_count_) + ")");
        ++holds_;
        return true;
    }
    if (!wait_until(claim_cv_, lock, deadline, [this] { return claimant_ == std::thread::id(); })) return false;
    claimant_ = me;
    return true;
}

void Locker::unclaim() {
    std::lock_guard<std::mutex> lock(call_mutex_);
    claimant_ = std::thread::id();
    holds_ = 0;
    claim_cv_.notify_all();
}

bool Locker::lock_until(SteadyClock::time_point deadline) { return claim_and_acquire(deadline, deadline); }

void Locker::lock() { lock_until(SteadyClock::time_point::max()); }

bool Locker::try_lock() {
    {
        // As std::recursive_mutex: past the hold limit, false rather than an error.
        std::lock_guard<std::mutex> lock(call_mutex_);
        if (claimant_ == std::this_thread::get_id() && holds_ >= max_hold_count_) return false;
    }
    // No waiting for another thread; one round trip (the first attempt runs on this thread).
    return claim_and_acquire(SteadyClock::now(), SteadyClock::time_point{});
}

bool Locker::claim_and_acquire(SteadyClock::time_point claim_by, SteadyClock::time_point acquire_by) {
    bool reentered = false;
    if (!claim(claim_by, reentered)) return false;
    if (reentered) return true;
    bool ok = false;
    try {
        ok = acquire_by == SteadyClock::time_point::max() ? (acquire(), true) : acquire_until(acquire_by, true);
    } catch (const TimeoutError&) {
        ok = false;
    } catch (...) {
        unclaim();
        throw;
    }
    if (!ok) {
        unclaim();
        return false;
    }
    std::lock_guard<std::mutex> lock(call_mutex_);
    holds_ = 1;
    return true;
}

void Locker::unlock() {
    {
        std::lock_guard<std::mutex> lock(call_mutex_);
        if (claimant_ != std::this_thread::get_id() || holds_ == 0)
            throw IllegalStateError("Locker for mutex " + mutex() + " is not held by this thread");
        if (--holds_ > 0) return;
    }
    stop_hold();
    unclaim();
}

int Locker::hold_count() const {
    std::lock_guard<std::mutex> lock(call_mutex_);
    return holds_;
}

bool Locker::is_owner() const { return service_->is_owner(); }

std::int64_t Locker::fence() const {
    std::lock_guard<std::mutex> lock(call_mutex_);
    return fence_;
}

const std::string& Locker::mutex() const noexcept { return contender_->mutex(); }
const std::string& Locker::contender_id() const noexcept { return contender_->contender_id(); }

}  // namespace simba
