// simba client: MultiLocker, all of a set of mutexes or none
// (simba_acquire_all), modelling the standard Lockable and TimedLockable
// requirements.
//
//   simba::MultiLocker books(factory, {"ledger", "payouts", "refunds"});
//   {
//       std::unique_lock<simba::MultiLocker> hold(books);    // every mutex, or wait
//       const auto lease = books.lease();                     // each member's own fence
//       settle(lease->fence("ledger"), lease->fence("payouts"));
//   }                                                         // all released together
//
// Each attempt is one statement that takes every mutex or changes nothing,
// the rows locked in byte order of the names, so two MultiLockers over
// overlapping sets never deadlock whatever order their names were given
// in. Each member keeps its own fence (simba_fence_check checks each). A
// waiting MultiLocker tries again when a member's release is NOTIFYed, or
// when the lease of the member it last found held by someone else ends.
//
// Loss is final, as for Locker: the hold is every member; once any member's
// tenure ends other than by unlock() (its lease or session ran out, an
// operator's simba_force_release, a renewal refused), is_owner() stays
// false, lease() is empty, on_lost runs once and the rest are released
// together; the holding thread still unlocks. A forced release is noticed
// at once through its NOTIFY, else at the next renewal or keepalive.
//
// Within the process it is a mutex (not recursive): lock() from another
// thread waits, lock() again by the holding thread is IllegalStateError.
// Leases, sessions, setup mistakes, callbacks, thread-safety and moves: as
// SharedLocker (shared_locker.hpp). Its mutexes are reserved in the factory
// like a Locker's: no other Locker, service or MultiLocker there may hold
// one of them with the same contender id.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>  // std::unique_lock, std::scoped_lock
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "simba/clock.hpp"
#include "simba/contender_id.hpp"
#include "simba/factory.hpp"
#include "simba/lease.hpp"

namespace simba {

/// A multi-lock hold, read in one piece: every member's fence, the grant
/// of the hold and its local deadline (the earliest of its members').
struct MultiLease {
    /// (mutex, fence), in byte order of the names.
    std::vector<std::pair<std::string, std::int64_t>> fences;
    ServerTime acquired_at{0};
    SteadyClock::time_point deadline{};

    /// The fence of member `mutex`, or 0 if it is not one.
    [[nodiscard]] std::int64_t fence(const std::string& mutex) const noexcept {
        for (const auto& [m, f] : fences)
            if (m == mutex) return f;
        return 0;
    }
    [[nodiscard]] SteadyClock::duration remaining(SteadyClock::time_point now = SteadyClock::now()) const noexcept {
        return now < deadline ? deadline - now : SteadyClock::duration::zero();
    }
};

class MultiLocker {
public:
    /// At most max_mutexes names, none empty or repeated
    /// (InvalidArgumentError 22023, as the server); IllegalStateError if
    /// the factory already has a holder of one of them with this id.
    MultiLocker(pg::ContendServiceFactory& factory, std::vector<std::string> mutexes,
                std::string contender_id = ContenderId::host(), ContendOptions options = {});
    ~MultiLocker();
    MultiLocker(MultiLocker&& other) noexcept;
    MultiLocker& operator=(MultiLocker&& other) noexcept;
    MultiLocker(const MultiLocker&) = delete;
    MultiLocker& operator=(const MultiLocker&) = delete;

    /// The server's limit on one multi-lock (simba_acquire_all).
    static constexpr std::size_t max_mutexes = 1000;

    void lock();
    [[nodiscard]] bool try_lock();
    template <typename Rep, typename Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
        return lock_until(SteadyClock::now() + std::chrono::ceil<SteadyClock::duration>(timeout));
    }
    template <typename Clock, typename Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
        return lock_until(steady_deadline(deadline));
    }
    void unlock();
    /// As Locker::lock_async().
    [[nodiscard]] std::future<void> lock_async();

    [[nodiscard]] std::optional<MultiLease> lease() const;
    [[nodiscard]] bool is_owner() const;
    void on_lost(std::function<void()> callback);
    void on_suspended(std::function<void(SteadyClock::time_point deadline)> callback);
    void on_resumed(std::function<void()> callback);
    /// As SharedLocker::cancel().
    void cancel();

    /// The members, in byte order.
    [[nodiscard]] const std::vector<std::string>& mutexes() const noexcept;
    [[nodiscard]] const std::string& contender_id() const noexcept;

    struct State;

private:
    bool lock_until(SteadyClock::time_point deadline);
    State& state() const;

    std::shared_ptr<State> s_;
};

}  // namespace simba
