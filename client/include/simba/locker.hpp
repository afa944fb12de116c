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
// Thread-safety: every member may be called from any thread. Within the
// process a Locker is a mutex too: lock() from another thread waits until
// the holding thread unlocks, try_lock() from it returns false at once, and
// lock() again by the holding thread is refused (IllegalStateError) unless
// max_hold_count allows it (a reentrant hold: the same lease and fence).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "simba/clock.hpp"
#include "simba/contender_id.hpp"
#include "simba/factory.hpp"

namespace simba {

class Locker {
public:
    /// `max_hold_count`: how often the holding thread may lock() again
    /// without unlock() (1, the default: not reentrant).
    Locker(ContendServiceFactory& factory, std::string mutex,
           std::string contender_id = ContenderId::host(), ContendOptions options = {}, int max_hold_count = 1);
    /// Releases the lock (stop()) if acquired or acquiring.
    ~Locker();
    Locker(const Locker&) = delete;
    Locker& operator=(const Locker&) = delete;

    /// Blocks until this locker owns the mutex. Throws IllegalStateError if
    /// this locker already acquired (or is acquiring): one locker, one hold.
    void acquire();
    /// Like acquire(), but throws TimeoutError (naming the holder) if not owner within `timeout`
    /// (measured on the steady clock from the call; spurious wake-ups do not
    /// shorten it). After a timeout the locker is idle and may acquire again.
    void acquire(std::chrono::milliseconds timeout);
    /// Releases now (idempotent); the destructor calls it. Called from
    /// another thread while acquire() is starting its service, it waits for
    /// that start (one round trip, bounded by the statement deadline), so
    /// the lock is never taken after release() returned; that acquire() then
    /// throws IllegalStateError.
    void release();
    /// Ends a hold or a wait for one, from any thread: a lock(),
    /// try_lock_for() or acquire() waiting in another thread throws
    /// CancelledError, and the lock is never taken after cancel() returned.
    /// The same as release().
    void cancel();

    // --- Lockable and TimedLockable ------------------------------------
    /// Blocks until this thread holds the lock (waits for another thread of
    /// this process holding it first). A setup mistake throws its
    /// simba::Error at once (extension missing or too old: ServerError 42883
    /// or 55000; no grant: PermissionDeniedError; no server, wrong
    /// database or role before the factory ever connected: ConnectionError);
    /// transient faults are retried.
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
    /// Ends one hold of the holding thread; the last one releases the lock.
    /// Throws IllegalStateError when this thread does not hold it.
    void unlock();
    /// Holds of the holding thread (0 when not held).
    [[nodiscard]] int hold_count() const;

    /// Still owner (false once the lease was lost or released).
    [[nodiscard]] bool is_owner() const;
    /// The fence of the hold; 0 before acquire() returned.
    [[nodiscard]] std::int64_t fence() const;
    [[nodiscard]] const std::string& mutex() const noexcept;
    [[nodiscard]] const std::string& contender_id() const noexcept;

private:
    struct Contender;
    bool acquire_until(SteadyClock::time_point deadline, bool bounded);
    bool lock_until(SteadyClock::time_point deadline);
    /// claim() by `claim_by`, then acquire by `acquire_by` (max(): no bound).
    bool claim_and_acquire(SteadyClock::time_point claim_by, SteadyClock::time_point acquire_by);
    /// Waits until no other thread of this process holds or takes the lock,
    /// then claims it for this one; false when `deadline` passed first. True
    /// with `reentered` when this thread already held it.
    bool claim(SteadyClock::time_point deadline, bool& reentered);
    void unclaim();
    static void log_release_failure(const std::exception& e);
    /// Stops the service (waiting out a start in progress): the hold ends.
    void stop_hold();
    std::string timeout_message(const MutexOwner& seen) const;

    std::shared_ptr<Contender> contender_;
    std::unique_ptr<MutexContendService> service_;
    mutable std::mutex call_mutex_;
    std::condition_variable started_;  // starting_ went false
    bool in_use_ = false;
    bool starting_ = false;  // acquire() is starting the service (Status::STARTING)
    std::int64_t fence_ = 0;
    // The thread that holds or takes the lock (lock(), try_lock*), and its holds.
    std::condition_variable claim_cv_;  // claimant_ went empty
    std::thread::id claimant_;
    int holds_ = 0;
    std::uint64_t cancels_ = 0;  // release()/cancel() calls: a lock in progress is cancelled
    int max_hold_count_ = 1;
};

}  // namespace simba
