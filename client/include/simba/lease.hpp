// simba client: Lease, the tenure a contend service holds, read in one piece.
//
// MutexContendService::lease() returns one while the service owns its mutex
// and nothing otherwise; is_owner() and fence() are read from it, so the
// three never disagree. Each tenure is its own: it begins with a fence the
// server granted to this service (on_acquired), keeps that fence through its
// renewals, and ends once (on_released). A fence whose tenure ended is never
// claimed again, even if the server still counts it (a renewal answered
// after the local deadline): the service gives it back and contends for a
// new one (docs/design.md, "Client").
// Lease is a plain value (a snapshot): not updated after lease() returned.
#pragma once

#include <cstdint>

#include "simba/clock.hpp"
#include "simba/owner.hpp"

namespace simba {

struct Lease {
    /// The tenure's fence, for simba_fence_check and fenced stores.
    std::int64_t fence = 0;
    /// Server time (simba's clock) of the grant that began the tenure, as
    /// this client saw it: the first reply that proved this fence to it.
    ServerTime acquired_at{0};
    /// Local end of the proven lease, on the boot clock: the send time of the
    /// request that proved it + (transition_at - current_at) - the release
    /// margin. The service owns the mutex only before it; a renewal moves it
    /// later (a later lease() shows the new one), nothing moves it earlier.
    SteadyClock::time_point deadline{};

    /// Time left before the deadline at `now` (zero past it).
    [[nodiscard]] SteadyClock::duration remaining(SteadyClock::time_point now = SteadyClock::now()) const noexcept {
        return now < deadline ? deadline - now : SteadyClock::duration::zero();
    }
};

}  // namespace simba
