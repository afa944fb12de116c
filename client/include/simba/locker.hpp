// simba client: Locker, a distributed lock that models the standard
// Lockable and TimedLockable requirements.
//
//   simba::Locker lock(factory, "orders");
//   {
//       std::unique_lock<simba::Locker> hold(lock);        // lock()
//       write_with_fence(lock.fence());
//   }                                                      // unlock()
//   std::unique_lock<simba::Locker> maybe(lock, 2s);       // try_lock_for: a timeout is false
//
// Loss is final: a hold is one tenure with one fence. Once it ends other
// than by unlock() (its lease or its session ran out, an operator's
// simba_force_release, a renewal refused), is_owner() stays false, lease() is empty, on_lost runs,
// and nothing takes the lock again until the caller asks (unlock(), then
// lock() again: a new tenure with a new fence).
//
// Thread-safety: every member may be called from any thread. Within the
// process a Locker is a mutex too: lock() from another thread waits until
// the holding thread unlocks, try_lock() from it returns false at once, and
// lock() again by the holding thread is refused (IllegalStateError) unless
// max_hold_count allows it (a reentrant hold: the same lease and fence). A
// hold taken by lock_async() belongs to no thread: any thread unlocks it.
// Callbacks (on_lost, on_suspended, on_resumed) run on the factory's handle thread; they may call
// lease(), is_owner(), fence() and release()/cancel(), not lock() or unlock().
//
// Movable: a moved-from Locker holds nothing; only destroying it or
// assigning to it is allowed (other members throw IllegalStateError).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>  // std::unique_lock, std::scoped_lock: the way to hold a Locker
#include <optional>
#include <string>

#include "simba/clock.hpp"
#include "simba/contender_id.hpp"
#include "simba/factory.hpp"
#include "simba/lease.hpp"

namespace simba {

class Locker {
public:
    /// `max_hold_count`: how often the holding thread may lock() again
    /// without unlock() (1, the default: not reentrant). Throws
    /// IllegalStateError if the factory already has a Locker or service for
    /// this (mutex, contender id): ids must be unique (client/README.md, "Ids").
    Locker(ContendServiceFactory& factory, std::string mutex,
           std::string contender_id = ContenderId::host(), ContendOptions options = {}, int max_hold_count = 1);
    /// Ends the hold or the wait for one here and hands the release to the
    /// factory, which sends it at once, in one statement with the others
    /// destroyed at the same moment, without this thread waiting for the
    /// reply. unlock() first to know it committed.
    ~Locker();
    Locker(Locker&& other) noexcept;
    /// Releases what this one holds, then takes over `other`'s.
    Locker& operator=(Locker&& other) noexcept;
    Locker(const Locker&) = delete;
    Locker& operator=(const Locker&) = delete;

    // --- Lockable and TimedLockable ------------------------------------
    /// Blocks until this thread holds the lock (waits for another thread of
    /// this process holding it first). A setup mistake throws its
    /// simba::Error at once (extension missing or too old: ServerError 42883
    /// or 55000; no grant: PermissionDeniedError; no server, wrong
    /// database or role before the factory ever connected: ConnectionError);
    /// transient faults are retried. Called again by the holding thread: a
    /// reentrant hold (up to max_hold_count), IllegalStateError past it or
    /// once the held lock was lost (unlock() it first).
    void lock();
    /// One attempt, one round trip: true if this thread now holds the lock.
    /// False at once when another thread of this process holds it, or when
    /// this thread already holds it max_hold_count times.
    [[nodiscard]] bool try_lock();
    /// Tries until `timeout` has passed; false on timeout (not an error).
    template <typename Rep, typename Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
        return try_lock_until(SteadyClock::now() + std::chrono::ceil<SteadyClock::duration>(timeout));
    }
    /// Tries until `deadline` (of any clock) passes; false on timeout.
    template <typename Clock, typename Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
        return lock_until(steady_deadline(deadline));
    }
    /// Ends one hold of the holding thread; the last one releases the lock
    /// (also when it was lost: the hold ends either way). Throws
    /// IllegalStateError when this thread does not hold it.
    void unlock();
    /// Holds of the holding thread (0 when not held).
    [[nodiscard]] int hold_count() const;

    // --- Asynchronous ---------------------------------------------------
    /// Starts taking the lock without blocking and without a thread per
    /// waiting lock: the future becomes ready when the lock is held (by no
    /// thread in particular: unlock() from any thread), or holds the setup
    /// mistake, or CancelledError after cancel()/release(). Throws
    /// IllegalStateError if the Locker is held or being taken.
    [[nodiscard]] std::future<void> lock_async();

    // --- The hold -------------------------------------------------------
    /// The tenure held now, read in one piece (fence, acquired_at, the local
    /// deadline after the margin), or nothing: not held, or lost.
    [[nodiscard]] std::optional<Lease> lease() const;
    /// lease().has_value(). Once false for a hold, false until the next one.
    [[nodiscard]] bool is_owner() const;
    /// lease()->fence, or 0 when not held (or lost). Read lease() once to use
    /// a fence together with its deadline.
    [[nodiscard]] std::int64_t fence() const;
    /// Runs `callback` on the factory's handle thread when a hold is lost
    /// (not when unlock(), release() or cancel() ends it): at most once per
    /// hold, no later than the lease deadline. Replaces an earlier callback.
    void on_lost(std::function<void()> callback);
    /// Runs `callback(deadline)` on the handle thread when the hold's
    /// renewals start failing: the lock is lost at `deadline` unless one
    /// succeeds (Curator's SUSPENDED). on_resumed or on_lost follows.
    void on_suspended(std::function<void(SteadyClock::time_point deadline)> callback);
    /// Runs `callback` when a renewal succeeds after on_suspended.
    void on_resumed(std::function<void()> callback);

    // --- The older names --------------------------------------------------
    /// Blocks until this locker owns the mutex. Throws IllegalStateError if
    /// this locker already acquired (or is acquiring): one locker, one hold.
    void acquire();
    /// Like acquire(), but throws TimeoutError (naming the holder) if not owner within `timeout`
    /// (measured on the steady clock from the call; spurious wake-ups do not
    /// shorten it). After a timeout the locker is idle and may acquire again.
    void acquire(std::chrono::milliseconds timeout);
    /// Releases now (idempotent): returns once the release has committed.
    /// The same as cancel().
    void release();
    /// Ends a hold or a wait for one, from any thread: a lock(),
    /// try_lock_for(), acquire() or lock_async() waiting in another thread
    /// ends with CancelledError, and the lock is never taken after cancel()
    /// returned.
    void cancel();

    [[nodiscard]] const std::string& mutex() const noexcept;
    [[nodiscard]] const std::string& contender_id() const noexcept;

    struct State;

private:
    bool lock_until(SteadyClock::time_point deadline);
    State& state() const;

    std::shared_ptr<State> s_;
};

}  // namespace simba
