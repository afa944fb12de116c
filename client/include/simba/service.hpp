// simba client: MutexContendService, one contender contending for one mutex.
//
// Status machine: INITIAL -> STARTING -> RUNNING -> STOPPING -> INITIAL.
// start() is legal only from INITIAL, stop() only from RUNNING; anything else
// throws IllegalStateError. Both are safe to call concurrently from any
// number of threads: exactly one caller wins each transition.
//
// Thread-safety: every member may be called from any thread at any time;
// destroying a service (it stops it) must not overlap another call on it.
// Callbacks (MutexContender's on_acquired / on_released) run on the
// factory's handle thread. A callback may call its service's stop(): it
// does no I/O there, ends the tenure at once and runs the service's
// remaining callbacks nested in it; lease(), is_owner(), fence(), state()
// and status() are fine anywhere. A callback must not wait for another
// callback (the handle thread runs them one at a time); a blocking call in
// one (start_and_wait(), wait_owner(), Semaphore::acquire()) works, but
// holds up every callback of the factory while it waits.
//
// A service is owned through the std::unique_ptr the factory returns: move
// that pointer to move the service (its contender and callbacks stay put).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include "simba/contend_period.hpp"
#include "simba/contender.hpp"
#include "simba/lease.hpp"
#include "simba/owner.hpp"

namespace simba {

enum class Status { INITIAL, STARTING, RUNNING, STOPPING };
const char* to_string(Status status) noexcept;

/// Lease parameters of one service.
struct ContendOptions {
    /// Exclusive window; the owner renews as it ends.
    std::chrono::microseconds ttl = std::chrono::seconds(10);
    /// Grace window after ttl: the owner may still renew, others wait.
    std::chrono::microseconds transition = std::chrono::seconds(6);
    /// Contenders' jitter around transition_at.
    Jitter jitter{};
    /// The owner gives up (is_owner() turns false, on_released fires) this
    /// much before its lease deadline when renewals fail: room for the
    /// callback to reach the application. Capped at a tenth of ttl +
    /// transition.
    std::chrono::microseconds release_margin = std::chrono::milliseconds(20);
    /// Plus this many parts per million of ttl + transition: a bound on how
    /// much faster the server's clock may run than this machine's (the
    /// margin grows with the lease; 500 ppm = 150 ms of a 5-minute lease).
    int clock_drift_ppm = 500;
    /// Contend for one tenure only (Locker's: loss is final). Once the
    /// tenure ends other than by stop() (lease end, forced release, a
    /// renewal refused), the service stays RUNNING but attempts nothing
    /// more: is_owner() stays false and wait_owner() returns false at once,
    /// until stop() and start(). Its renewals are by fence (simba_renew),
    /// so a lost tenure is never replaced by a new one on the server.
    /// Off (the default): the service keeps contending after a loss, each
    /// tenure reported as its own (leader election).
    bool single_tenure = false;
    /// Fair (FIFO) contention (simba_fair_acquire, extension 1.4): among the
    /// contenders of the mutex that are fair too, the mutex goes in the
    /// order they started waiting; a release (simba_fair_release) wakes only
    /// the next one, on a channel of its own, not the herd. A waiter keeps
    /// its place by asking again at least every half ttl (it lapses after
    /// ttl + transition without one: a dead waiter holds the queue up that
    /// long at most). Its attempts are not batched. Plain contenders of the
    /// same mutex do not queue: mix them and the order is lost.
    bool fair = false;
    /// Throws InvalidArgumentError (22023) unless ttl > 0, transition >= 0,
    /// release_margin >= 0 and clock_drift_ppm is in 0..100000.
    void validate() const;
};

class MutexContendService {
public:
    virtual ~MutexContendService() = default;
    MutexContendService(const MutexContendService&) = delete;
    MutexContendService& operator=(const MutexContendService&) = delete;

    /// INITIAL -> STARTING -> RUNNING. Contention begins on the I/O thread.
    void start();
    /// start(), then blocks until is_owner() or `until` passes; returns
    /// is_owner(). The service stays RUNNING either way (stop() it). Where
    /// the backend can, the first attempt runs on the calling thread
    /// (PostgreSQL: one round trip, no hand-off to the I/O thread); Locker
    /// is built on it.
    [[nodiscard]] bool start_and_wait(SteadyClock::time_point until);
    /// The same with a deadline of any clock (std::chrono::steady_clock,
    /// system_clock, ...), as std::condition_variable::wait_until.
    template <typename Clock, typename Duration>
    [[nodiscard]] bool start_and_wait(const std::chrono::time_point<Clock, Duration>& until) {
        return start_and_wait(steady_deadline(until));
    }
    /// Blocks until is_owner(), `until` passes, the service stops or (single
    /// tenure) its tenure ended; returns is_owner(). Throws a setup mistake
    /// (simba::Error with its SQLSTATE) at once.
    [[nodiscard]] virtual bool wait_owner(SteadyClock::time_point until) const = 0;
    template <typename Clock, typename Duration>
    [[nodiscard]] bool wait_owner(const std::chrono::time_point<Clock, Duration>& until) const {
        return wait_owner(steady_deadline(until));
    }
    /// wait_owner() without a thread: calls `done` once, on the factory's
    /// handle thread, when wait_owner() with no deadline would return —
    /// done(nullptr) when this service owns, stopped or (single tenure) its
    /// tenure ended (read lease() to tell), done(error) for a setup mistake.
    /// A second call before the first callback ran replaces it. `done` must
    /// not block; it may call start() and stop(). Locker::lock_async() is
    /// built on it. Throws IllegalStateError unless RUNNING, or where the
    /// backend has no handle thread (the default).
    virtual void when_owner(std::function<void(std::exception_ptr)> done);
    /// RUNNING -> STOPPING -> INITIAL. Releases the mutex if held (the
    /// server NOTIFYs waiters), fires on_released for an owner, and returns
    /// only after every callback of this service has run.
    void stop();
    [[nodiscard]] Status status() const noexcept { return status_.load(); }
    [[nodiscard]] bool running() const noexcept { return status() == Status::RUNNING; }

    [[nodiscard]] const std::shared_ptr<MutexContender>& contender() const noexcept { return contender_; }
    [[nodiscard]] const std::string& mutex() const noexcept { return contender_->mutex(); }
    [[nodiscard]] const std::string& contender_id() const noexcept { return contender_->contender_id(); }

    /// The tenure this contender holds now, read in one piece (its fence,
    /// when the server granted it, its local deadline), or nothing. Held
    /// only while the client can prove it: the steady clock is compared with
    /// the deadline on every call, so it is never returned past the
    /// deadline, whatever the I/O thread is doing.
    [[nodiscard]] virtual std::optional<Lease> lease() const = 0;
    /// lease().has_value(): owner now.
    [[nodiscard]] bool is_owner() const { return lease().has_value(); }
    /// lease()->fence when owner, else 0. To use a fence with what you know
    /// of its tenure (its deadline), read lease() once instead of calling
    /// is_owner() and fence() apart: a tenure can end, and another begin,
    /// between two calls.
    [[nodiscard]] std::int64_t fence() const {
        const auto l = lease();
        return l ? l->fence : 0;
    }
    /// The last contention step: the owner before and after it (a renewal
    /// is a step with changed() == false).
    [[nodiscard]] virtual MutexState state() const = 0;

protected:
    explicit MutexContendService(std::shared_ptr<MutexContender> contender);
    virtual void start_contend() = 0;
    /// start_contend() with the first attempt on the calling thread, where
    /// the backend can; start_and_wait() calls it.
    virtual void start_contend_now() { start_contend(); }
    virtual void stop_contend() = 0;
    /// stop()'s status steps, for a backend that stops many services at
    /// once (pg::ContendServiceFactory::stop): RUNNING -> STOPPING (else
    /// IllegalStateError, as stop() throws), STOPPING -> INITIAL, and back
    /// to RUNNING for a stop that did not happen.
    void enter_stopping();
    void leave_stopping() noexcept { status_.store(Status::INITIAL); }
    void resume_running() noexcept { status_.store(Status::RUNNING); }

private:
    void start_with(void (MutexContendService::*how)());
    std::shared_ptr<MutexContender> contender_;
    std::atomic<Status> status_{Status::INITIAL};
};

}  // namespace simba
