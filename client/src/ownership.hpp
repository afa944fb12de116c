// simba client: the ownership state machine of one contender (docs/design.md,
// "Client", ownership). Pure and deterministic: every call takes `now`, so
// unit tests drive it with a fake clock; the factory calls it under the
// service's mutex with SteadyClock::now().
//
// The one rule: the contender owns the mutex only while now < deadline, where
// deadline = send time of the request that proved the lease
//          + (transition_at - current_at) from its reply - margin.
// A reply that arrives after the deadline first ends the old tenure (expire):
// ownership never bridges a gap the client could not prove.
//
// Loss is final: a tenure is one fence, from the reply that first proved it
// to its end (deadline, stop, a reply naming another owner or another fence
// of ours), and a fence whose tenure ended is never claimed again. A reply
// that still proves it (a renewal answered after the deadline, a release
// that never reached the server) is `disowned`: the caller gives it back on
// the server and contends for a new tenure, which gets a new fence.
//
// Sessions: a tenure under a session is renewed by the session's keepalive
// (keepalive()), with the same deadline rule.
//
// Suspension: a held tenure whose renewal failed (or whose connection was
// lost) is suspended until a renewal of it succeeds (resumed) or it ends;
// reported once per suspension, and cleared with the tenure.
#pragma once

#include <algorithm>
#include <optional>
#include <string>

#include "simba/lease.hpp"
#include "simba/owner.hpp"

namespace simba::detail {

/// How much before the proven lease end an owner gives up: a fixed part
/// (capped at a tenth of the lease) plus a clock-rate bound of `ppm` parts
/// per million of the lease, so a long lease is as safe as a short one.
/// Inline so that simba run (client/cli, run_plan.cpp) compiles the same
/// rule into its kill margin without calling into the library's ABI, where
/// detail:: is no promise. The drift part is split so that lease * ppm
/// cannot overflow.
inline SteadyClock::duration lease_margin(SteadyClock::duration lease, SteadyClock::duration fixed, int ppm) {
    return std::min(fixed, lease / 10) + lease / 1000000 * ppm + lease % 1000000 * ppm / 1000000;
}

class Ownership {
public:
    /// What a step changed; the caller turns it into callbacks and metrics.
    struct Change {
        std::optional<MutexState> released;  ///< on_released to report
        std::optional<MutexState> acquired;  ///< on_acquired to report (after released, if both)
        bool renewed = false;                ///< the current tenure was extended
        bool too_late = false;               ///< a grant whose proof had already run out on arrival
        bool busy = false;                   ///< another contender holds it
        /// The server still counts a tenure of ours that ended here: not
        /// ownership; the caller releases it on the server and attempts again.
        bool disowned = false;
        SteadyClock::time_point lost_at{};   ///< when the released tenure's ownership ended
        std::optional<Lease> suspended;      ///< on_suspended to report: the held tenure, its deadline
        std::optional<Lease> resumed;        ///< on_resumed to report: the tenure, its new deadline
    };

    /// `single_tenure`: once a tenure ended, no later reply begins another
    /// (ContendOptions::single_tenure); start() allows one again.
    Ownership(std::string mutex, std::string id, SteadyClock::duration margin, bool single_tenure = false);

    /// Contention begins: replies count from now on.
    void start();
    /// The server's answer to an attempt sent at after.anchor, received at `now`.
    Change reply(const MutexOwner& after, SteadyClock::time_point now);
    /// The lease watchdog: ends the tenure if `now` is past its deadline.
    Change expire(SteadyClock::time_point now);
    /// Contention ends: a held tenure is released; later replies are ignored.
    Change stop(SteadyClock::time_point now);
    /// A renewal failed or the connection was lost: a held, unexpired
    /// tenure is suspended (once, until a renewal resumes it).
    Change suspend(SteadyClock::time_point now);
    /// A keepalive of the session the held tenure lives by, received at
    /// `now`: `session` is its lease as an owner row (ttl_at, transition_at,
    /// current_at, anchor = the keepalive's send time). A renewal of the
    /// tenure onto that lease, by the same rule as reply(): a tenure past
    /// its deadline has ended first.
    Change keepalive(const MutexOwner& session, SteadyClock::time_point now);

    /// The tenure held at `now`, in one piece; owns() and fence() are read from it.
    [[nodiscard]] std::optional<Lease> lease(SteadyClock::time_point now) const {
        if (!holding_ || now >= deadline_) return std::nullopt;
        return Lease{tenure_.fence, acquired_at_, deadline_};
    }
    [[nodiscard]] bool owns(SteadyClock::time_point now) const { return lease(now).has_value(); }
    [[nodiscard]] std::int64_t fence(SteadyClock::time_point now) const {
        const auto l = lease(now);
        return l ? l->fence : 0;
    }
    /// A tenure is held and not yet expired by expire() (its deadline may
    /// have passed: owns() says whether it still proves anything).
    [[nodiscard]] bool holding() const { return holding_; }
    [[nodiscard]] SteadyClock::time_point deadline() const { return deadline_; }
    [[nodiscard]] const MutexOwner& tenure() const { return tenure_; }
    /// The last step reported or observed (MutexContendService::state()).
    [[nodiscard]] const MutexState& reported() const { return reported_; }
    [[nodiscard]] bool running() const { return running_; }
    /// Single tenure: a tenure ended since start(); nothing more to attempt.
    [[nodiscard]] bool finished() const { return single_tenure_ && ended_; }
    [[nodiscard]] bool suspended() const { return suspended_; }

private:
    /// The held tenure renewed onto `after`'s lease (never shortened); resumes it.
    void renew(Change& c, const MutexOwner& after, SteadyClock::time_point now);
    /// Ends the held tenure: `after` is what replaced it.
    void end_tenure(Change& c, MutexOwner after, SteadyClock::time_point lost_at);

    std::string mutex_;
    std::string id_;
    SteadyClock::duration margin_;
    bool single_tenure_;
    bool running_ = false;
    bool holding_ = false;
    bool ended_ = false;  // a tenure ended since start()
    bool suspended_ = false;        // the held tenure's renewals are failing
    SteadyClock::time_point deadline_{};
    MutexOwner tenure_;             // the last reply that proved the held tenure
    ServerTime acquired_at_{0};     // the held tenure's grant (renewals move the row's acquired_at)
    std::int64_t claimed_fence_ = 0;  // the highest fence ever claimed: claimed once, never again
    MutexState reported_;
};

}  // namespace simba::detail
