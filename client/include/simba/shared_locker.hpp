// simba client: SharedLocker, a fenced read-write lock (simba_rwlock_*) that
// models the standard SharedTimedLockable and TimedLockable requirements.
//
//   simba::SharedLocker catalog(factory, "catalog");
//   {
//       std::shared_lock<simba::SharedLocker> read(catalog);   // lock_shared(): readers share it
//       serve(catalog.fence());                               // the write epoch it reads under
//   }
//   {
//       std::unique_lock<simba::SharedLocker> write(catalog);  // lock(): one writer, nobody reading
//       publish(catalog.fence());                              // the writer's own fence
//   }
//
// Across processes: many readers or one writer; once a writer waits, new
// readers wait for it (writer preference). A writer's fence is new for each
// write hold and never reused; a reader's is the write epoch (the fence of
// the latest writer), for simba_rwlock_fence_check. downgrade() turns a
// write hold into a read hold without a gap (its fence kept); there is no
// upgrade (release, then lock(): a new fence).
//
// Within the process it is a std::shared_mutex: any number of threads share
// one read hold on the server (the first lock_shared() takes it, the last
// unlock_shared() releases it); lock() waits until no thread of the process
// holds it, and while it waits new lock_shared() calls wait too. Not
// recursive: a thread that holds it and locks it again in any mode gets
// IllegalStateError.
//
// Loss is final, as for Locker: once a hold ends other than by unlock (its
// lease or session ran out, a renewal answered with another hold),
// is_owner() stays false, lease() is empty and on_lost runs once; the
// holding threads still unlock, and the next lock takes a new hold.
// Setup mistakes (no extension, no grant, wrong database, no server before
// the first connect) are thrown at once as Locker throws them.
//
// Leases: ContendOptions' ttl, transition, release_margin and
// clock_drift_ppm (jitter and single_tenure do not apply). With
// FactoryOptions::sessions (the default) the hold is taken under the
// factory's session of that lease length and kept by its keepalives; else
// it is renewed on its own as its ttl ends. A waiting writer asks again at
// least every half ttl (its place in the queue lapses after ttl +
// transition without one); waiting readers and writers are woken by the
// release's NOTIFY, and ask at least every second without one.
//
// Thread-safety: every member may be called from any thread. Callbacks
// (on_lost, on_suspended, on_resumed) run on the factory's handle thread;
// they may call lease(), is_owner(), fence() and cancel(), not the lock or
// unlock functions. Movable: a moved-from SharedLocker may only be
// destroyed or assigned to.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>          // std::unique_lock
#include <optional>
#include <shared_mutex>   // std::shared_lock
#include <string>

#include "simba/clock.hpp"
#include "simba/contender_id.hpp"
#include "simba/factory.hpp"
#include "simba/lease.hpp"

namespace simba {

/// A read-write hold, read in one piece: Lease's fence (the writer's own,
/// or the write epoch a reader reads under), acquired_at and deadline, and
/// whether it is the write hold.
struct SharedLease : Lease {
    bool exclusive = false;
};

class SharedLocker {
public:
    /// Throws IllegalStateError if the factory already has a SharedLocker
    /// for this (rwlock, contender id), InvalidArgumentError (22023) for a
    /// bad name, id or lease.
    SharedLocker(pg::ContendServiceFactory& factory, std::string rwlock,
                 std::string contender_id = ContenderId::host(), ContendOptions options = {});
    /// Releases the hold, if any (as cancel()).
    ~SharedLocker();
    SharedLocker(SharedLocker&& other) noexcept;
    SharedLocker& operator=(SharedLocker&& other) noexcept;
    SharedLocker(const SharedLocker&) = delete;
    SharedLocker& operator=(const SharedLocker&) = delete;

    // --- Lockable, TimedLockable: the write hold -------------------------
    /// Blocks until this thread holds it for writing.
    void lock();
    /// One attempt: false at once if another thread of the process holds or
    /// takes it, or if a reader or writer holds it on the server.
    [[nodiscard]] bool try_lock();
    template <typename Rep, typename Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
        return lock_until(SteadyClock::now() + std::chrono::ceil<SteadyClock::duration>(timeout), false);
    }
    template <typename Clock, typename Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
        return lock_until(steady_deadline(deadline), false);
    }
    /// Ends this thread's write hold (releasing it on the server, also when
    /// it was lost). IllegalStateError unless this thread holds it.
    void unlock();

    // --- SharedLockable, SharedTimedLockable: a read hold ----------------
    /// Blocks until this thread holds it for reading (joining the process's
    /// read hold if there is a live one and no thread of it waits to write).
    void lock_shared();
    [[nodiscard]] bool try_lock_shared();
    template <typename Rep, typename Period>
    [[nodiscard]] bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
        return lock_until(SteadyClock::now() + std::chrono::ceil<SteadyClock::duration>(timeout), true);
    }
    template <typename Clock, typename Duration>
    [[nodiscard]] bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& deadline) {
        return lock_until(steady_deadline(deadline), true);
    }
    /// Ends this thread's read hold; the process's last one releases it on
    /// the server. IllegalStateError unless this thread holds it for reading.
    void unlock_shared();

    /// This thread's write hold becomes a read hold without a gap (the same
    /// fence; readers of the process may join it at once). The thread then
    /// holds it shared (unlock_shared()). True if the hold goes on; false if
    /// it was lost before or on the way, also when the connection took the
    /// answer (on_lost runs; the hold is not claimed again). IllegalStateError
    /// unless this thread holds it for writing.
    bool downgrade();

    // --- Asynchronous ---------------------------------------------------
    /// Starts taking it without blocking and without a thread per waiting
    /// lock; the future becomes ready once held (by no thread in
    /// particular: unlock() or unlock_shared() from any thread), or holds
    /// the setup mistake, or CancelledError after cancel(). A shared take
    /// joins a live read hold of the process at once. IllegalStateError if
    /// it would have to wait for another thread of the process.
    [[nodiscard]] std::future<void> lock_async();
    [[nodiscard]] std::future<void> lock_shared_async();

    // --- The hold -------------------------------------------------------
    [[nodiscard]] std::optional<SharedLease> lease() const;
    [[nodiscard]] bool is_owner() const;
    /// lease()->fence, or 0.
    [[nodiscard]] std::int64_t fence() const;
    /// As Locker's: on the handle thread, once per hold, not for an unlock.
    void on_lost(std::function<void()> callback);
    void on_suspended(std::function<void(SteadyClock::time_point deadline)> callback);
    void on_resumed(std::function<void()> callback);
    /// Ends every wait (CancelledError, also for threads waiting on other
    /// threads of the process) and releases the hold on the server; threads
    /// that held it still unlock. Nothing is taken after cancel() returned
    /// by the waits it ended.
    void cancel();

    [[nodiscard]] const std::string& rwlock() const noexcept;
    [[nodiscard]] const std::string& contender_id() const noexcept;

    struct State;

private:
    bool lock_until(SteadyClock::time_point deadline, bool shared);
    State& state() const;

    std::shared_ptr<State> s_;
};

}  // namespace simba
