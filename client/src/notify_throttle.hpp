// simba client (internal): how far a NOTIFY may bring the next attempt of a
// service or a lock hold (lock_hold.hpp) forward. NOTIFY channels have no
// privileges: any role that can connect may send `NOTIFY simba, '<name>'`, as
// often as it likes. So a NOTIFY is only a hint: it brings the next attempt
// forward to now, but never to less than `interval` after the last attempt a
// NOTIFY brought forward, and NOTIFYs that arrive while such an attempt is
// pending join it. A storm of them costs each service at most one attempt per
// interval; a real release or forced release, heard during one, waits at most
// that long. An attempt that saw the mutex change hands proves a release was
// news: the next NOTIFY may act at once again, so back-to-back releases of a
// busy mutex are not slowed (only granted roles can change hands). For a
// waiter, so may a second one within an interval: the attempt that saw the
// change (a poll, or one made when a registration took effect) may have run
// before that release's own NOTIFY was read, and that stale NOTIFY must not
// spend the slot of the next release.
// docs/design.md, "Client". Pure: the caller passes the time.
#pragma once

#include <algorithm>
#include <optional>

#include "simba/clock.hpp"

namespace simba::pg::detail {

class NotifyThrottle {
public:
    /// A NOTIFY at `now` for a service whose next attempt is due at
    /// `next_at` (time_point::max(): none pending). Returns when it should
    /// attempt instead, or nullopt if an attempt is due by then anyway.
    std::optional<SteadyClock::time_point> admit(SteadyClock::time_point now, SteadyClock::time_point next_at,
                                                 SteadyClock::duration interval) {
        const auto at = std::max(now, floor_);
        if (at >= next_at) return std::nullopt;
        if (at < spare_until_)
            spare_until_ = {};
        else
            floor_ = at + interval;
        return at;
    }
    /// An attempt saw the mutex change hands: the next NOTIFY may act at
    /// once. A waiter passes now + interval: a second one heard before then
    /// may too.
    void news(SteadyClock::time_point spare_until = {}) {
        floor_ = {};
        spare_until_ = spare_until;
    }
    /// No NOTIFY-brought attempt before this.
    [[nodiscard]] SteadyClock::time_point floor() const { return floor_; }

private:
    SteadyClock::time_point floor_{};
    SteadyClock::time_point spare_until_{};  // one admission before it leaves floor_ alone
};

}  // namespace simba::pg::detail
