// simba client: the owner of a mutex as the server reported it.
//
// Times are server times (microseconds since the Unix epoch, read from
// simba's clock, simba_clock(), with the C extension, and from
// clock_timestamp() with the portable edition; docs/design.md, "Clock").
// They are never compared with the client's wall
// clock: each MutexOwner carries `anchor`, the client's SteadyClock (boot clock) time at
// which the request that produced it was SENT, paired with the server's
// decision time `current_at`. A server time t maps onto the steady clock as
// anchor + (t - current_at). Because the anchor is the send time, network
// latency can only make a lease look shorter, never longer (docs/design.md, "Safety rules", rule 3).
// MutexOwner and MutexState are plain values: callbacks get their own copy.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "simba/clock.hpp"

namespace simba {

/// A server timestamp: microseconds since the Unix epoch on the server's clock.
using ServerTime = std::chrono::microseconds;

struct MutexOwner {
    std::string mutex;
    std::string owner_id;  ///< empty = free
    ServerTime acquired_at{0};
    ServerTime ttl_at{0};
    ServerTime transition_at{0};
    std::int64_t version = 0;
    std::int64_t fence = 0;
    ServerTime current_at{0};       ///< server time of the decision
    SteadyClock::time_point anchor{};  ///< steady time the request was sent
    /// The lease is the holder's session's: where the server's lapse waker
    /// runs, its end is announced (NOTIFY), so a waiter need not poll for it.
    bool under_session = false;

    /// A free mutex (no owner), observed at `anchor`.
    [[nodiscard]] static MutexOwner none(std::string mutex,
                                         SteadyClock::time_point anchor = SteadyClock::now());

    [[nodiscard]] bool has_owner() const noexcept { return !owner_id.empty(); }
    [[nodiscard]] bool is_owner(const std::string& contender_id) const noexcept {
        return has_owner() && owner_id == contender_id;
    }

    /// Server time t carried onto the client's steady clock.
    [[nodiscard]] SteadyClock::time_point to_steady(ServerTime t) const noexcept {
        return anchor + std::chrono::duration_cast<SteadyClock::duration>(t - current_at);
    }
    [[nodiscard]] SteadyClock::time_point ttl_deadline() const noexcept { return to_steady(ttl_at); }
    [[nodiscard]] SteadyClock::time_point transition_deadline() const noexcept {
        return to_steady(transition_at);
    }
    /// transition_at - ttl_at: how long the owner may still renew after its ttl.
    [[nodiscard]] std::chrono::microseconds transition() const noexcept { return transition_at - ttl_at; }

    /// Owner exists and the ttl window has not ended (owner has exclusive rights).
    [[nodiscard]] bool in_ttl(SteadyClock::time_point now = SteadyClock::now()) const noexcept {
        return has_owner() && now < ttl_deadline();
    }
    /// Owner exists, ttl has ended, transition has not (owner may still renew,
    /// others must wait).
    [[nodiscard]] bool in_transition(SteadyClock::time_point now = SteadyClock::now()) const noexcept {
        return has_owner() && now >= ttl_deadline() && now < transition_deadline();
    }

    /// Same holder and same fence (the same tenure; renewals do not differ).
    [[nodiscard]] bool same_tenure(const MutexOwner& other) const noexcept {
        return owner_id == other.owner_id && (!has_owner() || fence == other.fence);
    }
};

/// What one contention step saw: the owner before and after it.
struct MutexState {
    MutexOwner before;
    MutexOwner after;

    /// The mutex changed hands (including the same id starting a new tenure
    /// with a new fence). A renewal by the same owner is not a change.
    [[nodiscard]] bool changed() const noexcept { return !before.same_tenure(after); }
    /// `contender_id` became owner in this step.
    [[nodiscard]] bool acquired(const std::string& contender_id) const noexcept {
        return changed() && after.is_owner(contender_id);
    }
    /// `contender_id` stopped being owner in this step.
    [[nodiscard]] bool released(const std::string& contender_id) const noexcept {
        return changed() && before.is_owner(contender_id);
    }
};

}  // namespace simba
