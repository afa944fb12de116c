// The ownership state machine (src/ownership.hpp) driven by a fake clock: every
// ordering of replies the I/O loop can produce, then thousands of random
// sequences checked against the rule "owner only before send time + lease -
// margin of a reply that proved it".
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <vector>

#include "ownership.hpp"

using namespace simba;
using simba::detail::Ownership;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

namespace {

const auto kMargin = 20ms;

/// A fake clock reading: `ms` milliseconds after an arbitrary origin.
SteadyClock::time_point at(std::int64_t ms) { return SteadyClock::time_point(milliseconds(ms)); }

/// A reply of the server, which runs on a clock of its own (`server_ms`
/// apart from ours, to show the two are never compared): `id` holds with
/// `fence` for `lease_ms` more from the decision; `sent_ms` is the anchor.
MutexOwner reply(const std::string& id, std::int64_t fence, std::int64_t sent_ms, std::int64_t lease_ms = 1000,
                 std::int64_t server_ms = 1'700'000'000'000) {
    MutexOwner o;
    o.mutex = "m";
    o.owner_id = id;
    o.fence = id.empty() ? 0 : fence;
    o.current_at = milliseconds(server_ms);
    o.acquired_at = o.current_at;
    o.ttl_at = o.current_at + milliseconds(lease_ms / 2);
    o.transition_at = o.current_at + milliseconds(lease_ms);
    o.anchor = at(sent_ms);
    return o;
}
MutexOwner free_reply(std::int64_t sent_ms) { return reply("", 0, sent_ms); }

Ownership started() {
    Ownership l("m", "me", kMargin);
    l.start();
    return l;
}

}  // namespace

TEST(Lease, GrantProvesOwnershipUntilSendTimePlusLeaseMinusMargin) {
    auto l = started();
    auto c = l.reply(reply("me", 7, 0), at(30));  // sent at 0, answered at 30
    ASSERT_TRUE(c.acquired);
    EXPECT_FALSE(c.released);
    EXPECT_TRUE(c.acquired->acquired("me"));
    EXPECT_EQ(l.deadline(), at(980));  // from the send time, not the receive time
    EXPECT_TRUE(l.owns(at(979)));
    EXPECT_FALSE(l.owns(at(980)));
    EXPECT_EQ(l.fence(at(500)), 7);
    EXPECT_EQ(l.fence(at(980)), 0);
}

TEST(Lease, AGrantArrivingAfterItsProofRanOutIsNotOwnership) {
    auto l = started();
    auto c = l.reply(reply("me", 7, 0), at(990));
    EXPECT_TRUE(c.too_late);
    EXPECT_FALSE(c.acquired);
    EXPECT_FALSE(l.owns(at(990)));
    EXPECT_FALSE(l.holding());
}

TEST(Lease, RenewalExtendsSilently) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    auto c = l.reply(reply("me", 7, 600), at(610));
    EXPECT_TRUE(c.renewed);
    EXPECT_FALSE(c.acquired);
    EXPECT_FALSE(c.released);
    EXPECT_EQ(l.deadline(), at(1580));
    EXPECT_FALSE(l.reported().changed());
}

TEST(Lease, RenewalLandingAfterTheDeadlineEndsTheTenureForGood) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));  // deadline 980
    // Sent at 900, answered at 1000: the gap 980..1000 was not proven. The
    // tenure ended at 980 and fence 7 is not claimed again, though the
    // server renewed it: the caller gives it back.
    auto c = l.reply(reply("me", 7, 900), at(1000));
    ASSERT_TRUE(c.released);
    EXPECT_EQ(c.lost_at, at(980));
    EXPECT_FALSE(c.acquired);
    EXPECT_TRUE(c.disowned);
    EXPECT_FALSE(l.owns(at(1000)));
    EXPECT_FALSE(l.lease(at(1000)));
    // The next tenure comes with a new fence, and is a change of hands.
    c = l.reply(reply("me", 9, 1010), at(1020));
    ASSERT_TRUE(c.acquired);
    EXPECT_FALSE(c.released);
    EXPECT_TRUE(c.acquired->acquired("me"));
    EXPECT_EQ(c.acquired->after.fence, 9);
    EXPECT_EQ(l.fence(at(1020)), 9);
}

TEST(Lease, AFenceWhoseTenureEndedIsNeverClaimedAgain) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    EXPECT_TRUE(l.expire(at(990)).released);  // the watchdog at the deadline
    // However often the server still proves it, and across a restart (a
    // release that never reached the server).
    for (std::int64_t t : {1000, 1100}) {
        auto c = l.reply(reply("me", 7, t), at(t + 10));
        EXPECT_TRUE(c.disowned);
        EXPECT_FALSE(c.acquired);
        EXPECT_FALSE(l.owns(at(t + 10)));
    }
    (void)l.stop(at(1200));
    l.start();
    auto c = l.reply(reply("me", 7, 1300), at(1310));
    EXPECT_TRUE(c.disowned);
    EXPECT_FALSE(l.owns(at(1310)));
    EXPECT_FALSE(l.reported().after.is_owner("me"));  // state() shows no tenure of ours
}

TEST(Lease, AGrantTooLateToBeProvenCanStillBeClaimedByItsRenewal) {
    // Never claimed, so not a tenure that ended: the renewal that proves it
    // in time begins it.
    auto l = started();
    EXPECT_TRUE(l.reply(reply("me", 7, 0), at(990)).too_late);
    auto c = l.reply(reply("me", 7, 1000), at(1010));
    ASSERT_TRUE(c.acquired);
    EXPECT_FALSE(c.disowned);
    EXPECT_EQ(l.fence(at(1010)), 7);
}

TEST(Lease, TheSnapshotHoldsFenceGrantAndDeadlineOfOneTenure) {
    auto l = started();
    EXPECT_FALSE(l.lease(at(0)));
    auto grant = reply("me", 7, 0);
    (void)l.reply(grant, at(10));
    auto s = l.lease(at(500));
    ASSERT_TRUE(s);
    EXPECT_EQ(s->fence, 7);
    EXPECT_EQ(s->acquired_at, grant.acquired_at);
    EXPECT_EQ(s->deadline, at(980));
    EXPECT_EQ(s->remaining(at(500)), 480ms);
    // A renewal moves the deadline, not the grant (the row's acquired_at
    // moves with every renewal).
    auto renewal = reply("me", 7, 600, 1000, 1'700'000'000'600);
    (void)l.reply(renewal, at(610));
    s = l.lease(at(700));
    ASSERT_TRUE(s);
    EXPECT_EQ(s->acquired_at, grant.acquired_at);
    EXPECT_EQ(s->deadline, at(1580));
    // owns() and fence() are read from it, at any instant.
    for (std::int64_t t = 1570; t < 1590; ++t) {
        const auto snap = l.lease(at(t));
        EXPECT_EQ(l.owns(at(t)), snap.has_value());
        EXPECT_EQ(l.fence(at(t)), snap ? snap->fence : 0);
    }
    EXPECT_FALSE(l.lease(at(1580)));
}

TEST(Lease, AStaleReplyNeverShortensTheLease) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0, 5000), at(10));  // deadline 4980
    auto c = l.reply(reply("me", 7, 100, 1000), at(110));  // proves only until 1080
    EXPECT_TRUE(c.renewed);
    EXPECT_EQ(l.deadline(), at(4980));
}

TEST(Lease, TheSameIdWithANewFenceIsANewTenure) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    auto c = l.reply(reply("me", 9, 500), at(510));
    ASSERT_TRUE(c.released);
    ASSERT_TRUE(c.acquired);
    EXPECT_EQ(c.released->before.fence, 7);
    EXPECT_EQ(c.acquired->after.fence, 9);
    EXPECT_EQ(l.fence(at(600)), 9);
}

TEST(Lease, AReplyAfterStopIsIgnored) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    auto c = l.stop(at(100));
    ASSERT_TRUE(c.released);
    EXPECT_EQ(c.lost_at, at(100));
    EXPECT_FALSE(l.owns(at(100)));
    // The renewal sent before stop() answers after it (release racing renewal).
    c = l.reply(reply("me", 7, 90), at(120));
    EXPECT_FALSE(c.acquired);
    EXPECT_FALSE(c.released);
    EXPECT_FALSE(c.renewed);
    EXPECT_FALSE(l.owns(at(120)));
}

TEST(Lease, StopWithoutATenureReportsNothing) {
    auto l = started();
    (void)l.reply(reply("other", 3, 0), at(10));
    EXPECT_FALSE(l.stop(at(20)).released);
}

TEST(Lease, TheWatchdogReleasesOnceAtTheDeadline) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    EXPECT_FALSE(l.expire(at(979)).released);
    auto c = l.expire(at(985));
    ASSERT_TRUE(c.released);
    EXPECT_EQ(c.lost_at, at(980));
    EXPECT_FALSE(l.expire(at(990)).released);
    EXPECT_FALSE(l.stop(at(995)).released);  // already reported
}

TEST(Lease, AForcedReleaseSeenInAReplyEndsTheTenureAtOnce) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    auto c = l.reply(free_reply(300), at(310));  // an admin ran simba_force_release
    ASSERT_TRUE(c.released);
    EXPECT_EQ(c.lost_at, at(310));
    EXPECT_FALSE(l.owns(at(310)));
}

// Single tenure (ContendOptions::single_tenure, Locker's): after any loss
// no reply begins a tenure again until start().
TEST(SingleTenure, AfterAnyLossNoReplyBeginsAnotherTenure) {
    enum Loss { deadline, forced, taken_over, renewal_refused, late_renewal };
    for (const auto loss : {deadline, forced, taken_over, renewal_refused, late_renewal}) {
        SCOPED_TRACE(loss);
        Ownership l("m", "me", kMargin, true);
        l.start();
        ASSERT_TRUE(l.reply(reply("me", 7, 0), at(10)).acquired);
        EXPECT_FALSE(l.finished());
        Ownership::Change c;
        switch (loss) {
            case deadline: c = l.expire(at(990)); break;
            case forced: c = l.reply(free_reply(300), at(310)); break;
            case taken_over: c = l.reply(reply("other", 8, 300), at(310)); break;
            case renewal_refused: c = l.reply(reply("me", 8, 300), at(310)); break;  // a new fence of ours
            case late_renewal: c = l.reply(reply("me", 7, 300), at(1300)); break;     // after the deadline
        }
        EXPECT_TRUE(c.released);
        EXPECT_FALSE(c.acquired);
        EXPECT_TRUE(l.finished());
        // Whatever the server grants now (a new fence, the old one), it is given back.
        for (std::int64_t fence : {7, 8, 9}) {
            auto again = l.reply(reply("me", fence, 2000), at(2010));
            EXPECT_FALSE(again.acquired);
            EXPECT_TRUE(again.disowned);
            EXPECT_FALSE(l.owns(at(2010)));
            EXPECT_FALSE(l.lease(at(2010)));
        }
        // A restart contends anew: a new fence is a new tenure.
        (void)l.stop(at(3000));
        l.start();
        EXPECT_FALSE(l.finished());
        EXPECT_TRUE(l.reply(reply("me", 10, 3100), at(3110)).acquired);
    }
}

TEST(SingleTenure, TheDefaultKeepsContendingAfterALoss) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    (void)l.reply(free_reply(300), at(310));
    EXPECT_FALSE(l.finished());
    EXPECT_TRUE(l.reply(reply("me", 8, 400), at(410)).acquired);
}

TEST(Lease, AnotherOwnerIsBusyAndNoChangeForUs) {
    auto l = started();
    auto c = l.reply(reply("other", 3, 0), at(10));
    EXPECT_TRUE(c.busy);
    EXPECT_FALSE(c.acquired);
    EXPECT_EQ(l.reported().after.owner_id, "other");
}

TEST(Lease, AReconnectMidRenewalKeepsOnlyWhatWasProven) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));  // deadline 980
    // The renewal sent at 500 never answers (connection lost); still owner
    // until 980 and not a moment longer.
    EXPECT_TRUE(l.owns(at(979)));
    EXPECT_TRUE(l.expire(at(981)).released);
    // After the reconnect, the attempt sent at 1200 finds the tenure alive
    // on the server: over here, so given back; the next one is new.
    auto c = l.reply(reply("me", 7, 1200), at(1250));
    EXPECT_FALSE(c.acquired);
    EXPECT_TRUE(c.disowned);
    EXPECT_FALSE(l.owns(at(1250)));
    c = l.reply(reply("me", 8, 1260), at(1270));
    ASSERT_TRUE(c.acquired);
    EXPECT_TRUE(l.owns(at(1270)));
}

TEST(Lease, AFailedRenewalSuspendsOnceAndARenewalResumes) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    auto c = l.suspend(at(600));
    ASSERT_TRUE(c.suspended);
    EXPECT_EQ(c.suspended->fence, 7);
    EXPECT_EQ(c.suspended->deadline, at(980));  // the deadline it will be lost at
    EXPECT_FALSE(c.released);
    EXPECT_TRUE(l.suspended());
    EXPECT_TRUE(l.owns(at(700))) << "suspended is still owner";
    EXPECT_FALSE(l.suspend(at(700)).suspended) << "once per suspension, not per failed retry";
    c = l.reply(reply("me", 7, 800), at(810));
    EXPECT_TRUE(c.renewed);
    ASSERT_TRUE(c.resumed);
    EXPECT_EQ(c.resumed->fence, 7);
    EXPECT_EQ(c.resumed->deadline, at(1780));
    EXPECT_FALSE(l.suspended());
    EXPECT_FALSE(l.reply(reply("me", 7, 1200), at(1210)).resumed) << "a renewal not suspended resumes nothing";
    EXPECT_TRUE(l.suspend(at(1300)).suspended) << "a new suspension";
}

TEST(Lease, ATenureEndingWhileSuspendedReportsOnlyItsEnd) {
    for (int how = 0; how < 3; ++how) {
        auto l = started();
        (void)l.reply(reply("me", 7, 0), at(10));
        ASSERT_TRUE(l.suspend(at(600)).suspended);
        Ownership::Change c;
        if (how == 0) c = l.expire(at(980));
        if (how == 1) c = l.stop(at(700));
        if (how == 2) c = l.reply(reply("other", 8, 700), at(710));
        EXPECT_TRUE(c.released) << how;
        EXPECT_FALSE(c.resumed) << how;
        EXPECT_FALSE(l.suspended()) << how;
        if (how == 1) continue;
        // The next tenure starts unsuspended; its first renewal resumes nothing.
        (void)l.reply(reply("me", 9, 2000), at(2010));
        EXPECT_FALSE(l.suspended()) << how;
        EXPECT_FALSE(l.reply(reply("me", 9, 2500), at(2510)).resumed) << how;
    }
}

TEST(Lease, NothingIsSuspendedWithoutALiveTenure) {
    auto l = started();
    EXPECT_FALSE(l.suspend(at(0)).suspended);
    (void)l.reply(reply("me", 7, 0), at(10));
    auto c = l.suspend(at(990));  // past the deadline: the tenure ends instead
    EXPECT_FALSE(c.suspended);
    EXPECT_TRUE(c.released);
    EXPECT_FALSE(l.suspended());
}

TEST(Lease, MarginHasAFixedPartAndAClockRatePart) {
    using simba::detail::lease_margin;
    EXPECT_EQ(lease_margin(10s, 20ms, 500), 25ms);
    EXPECT_EQ(lease_margin(300s, 20ms, 500), 170ms);  // a 5-minute lease: 150 ms of drift room
    EXPECT_EQ(lease_margin(100ms, 20ms, 0), 10ms);   // the fixed part is capped at a tenth
    EXPECT_EQ(lease_margin(100ms, 0ms, 0), 0ms);
    EXPECT_EQ(lease_margin(std::chrono::hours(24 * 365 * 100), 0ms, 100000),
              std::chrono::hours(24 * 365 * 10));  // no overflow for long leases
}

// ---------------------------------------------------------------- random

namespace {

/// What the rule says, written as a fold over the replies seen since start:
/// a tenure lives while replies for it keep arriving before the proof of the
/// previous one ran out, and a fence is held at most once.
struct Model {
    bool running = false, hold = false;
    std::int64_t fence = 0, claimed = 0;
    SteadyClock::time_point end{};
    void on_reply(const MutexOwner& r, SteadyClock::time_point now) {
        if (!running) return;
        if (hold && now >= end) hold = false;
        if (!r.is_owner("me")) {
            hold = false;
            return;
        }
        const auto e = r.transition_deadline() - kMargin;
        if (hold && r.fence == fence) {
            if (e > end) end = e;
        } else if (e > now && r.fence > claimed) {
            hold = true, fence = claimed = r.fence, end = e;
        } else {
            hold = false;
        }
    }
    bool owns(SteadyClock::time_point now) const { return running && hold && now < end; }
};

}  // namespace

// Sessions: a keepalive of the session the tenure lives by is its renewal.
TEST(SessionKeepalive, RenewsTheHeldTenureFromTheKeepalivesSendTime) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    // The session's lease: 1000 ms more from a decision on its own clock.
    auto c = l.keepalive(reply("session-id", 0, 800, 1000, 42'000), at(850));
    EXPECT_TRUE(c.renewed);
    EXPECT_FALSE(c.released);
    EXPECT_FALSE(c.acquired);
    EXPECT_EQ(l.deadline(), at(1780));
    EXPECT_EQ(l.fence(at(1700)), 7);
    EXPECT_EQ(l.tenure().owner_id, "me");  // the tenure, on the session's lease
    EXPECT_EQ(l.tenure().transition_deadline(), at(1800));
    EXPECT_FALSE(l.reported().changed()) << "a renewal, not a change of hands";
    // An older keepalive answered late never shortens it.
    EXPECT_TRUE(l.keepalive(reply("session-id", 0, 100, 1000, 42'000), at(900)).renewed);
    EXPECT_EQ(l.deadline(), at(1780));
}

TEST(SessionKeepalive, AKeepaliveAfterTheDeadlineEndsTheTenureInstead) {
    auto l = started();
    (void)l.reply(reply("me", 7, 0), at(10));
    auto c = l.keepalive(reply("session-id", 0, 900, 1000), at(985));  // sent in time, answered past 980
    EXPECT_TRUE(c.released);
    EXPECT_FALSE(c.renewed);
    EXPECT_FALSE(l.owns(at(985)));
    // Nothing bridges the gap: the server's renewed tenure is not claimed again.
    EXPECT_TRUE(l.reply(reply("me", 7, 990), at(995)).disowned);
}

TEST(SessionKeepalive, ResumesASuspendedTenureAndDoesNothingWithoutOne) {
    auto l = started();
    EXPECT_FALSE(l.keepalive(reply("session-id", 0, 0), at(5)).renewed) << "no tenure: nothing to renew";
    (void)l.reply(reply("me", 7, 0), at(10));
    ASSERT_TRUE(l.suspend(at(600)).suspended);
    auto c = l.keepalive(reply("session-id", 0, 700), at(710));
    ASSERT_TRUE(c.resumed);
    EXPECT_EQ(c.resumed->deadline, at(1680));
    EXPECT_FALSE(l.suspended());
    (void)l.stop(at(800));
    EXPECT_FALSE(l.keepalive(reply("session-id", 0, 900), at(910)).renewed) << "stopped: ignored";
}

TEST(Lease, RandomSequencesKeepTheRule) {
    const int runs = 5000, steps = 60;
    std::mt19937_64 rng(20261123);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
    std::int64_t callbacks = 0, acquisitions = 0;
    for (int run = 0; run < runs; ++run) {
        Ownership l("m", "me", kMargin);
        Model model;
        std::int64_t now_ms = 0, server_fence = 0, our_fence = 0, last_fence = 0;
        std::deque<std::int64_t> in_flight;  // send times; one connection answers in order
        std::vector<MutexOwner> proofs;      // every reply that said "me"
        enum { none, acquired, released } last_cb = released;
        bool was_owner = false;
        for (int step = 0; step < steps; ++step) {
            now_ms += pick(4) == 0 ? pick(1500) : pick(200);
            const auto now = at(now_ms);
            Ownership::Change c;
            switch (pick(9)) {
                case 0: l.start(), model.running = true; break;
                case 1: c = l.stop(now), model.running = false, model.hold = false; break;
                case 2: c = l.expire(now); break;
                case 3: case 4: in_flight.push_back(now_ms); break;
                default: {
                    if (in_flight.empty()) break;
                    const auto sent = in_flight.front();
                    in_flight.pop_front();
                    const std::int64_t lease_ms = pick(3) == 0 ? 100 : pick(2) ? 1000 : 5000;
                    const std::int64_t server_ms = 1'000'000 + pick(1'000'000);  // any server clock
                    MutexOwner r;
                    switch (pick(4)) {
                        case 0: r = reply("me", our_fence ? our_fence : (our_fence = ++server_fence), sent, lease_ms, server_ms); break;
                        case 1: r = reply("me", our_fence = ++server_fence, sent, lease_ms, server_ms); break;
                        case 2: r = reply("other", ++server_fence, sent, lease_ms, server_ms), our_fence = 0; break;
                        default: r = reply("", 0, sent, lease_ms, server_ms), our_fence = 0; break;
                    }
                    if (r.is_owner("me")) proofs.push_back(r);
                    c = l.reply(r, now);
                    model.on_reply(r, now);
                }
            }
            // Callbacks alternate, acquired first, and none while stopped.
            if (c.released) {
                ASSERT_EQ(last_cb, acquired) << "run " << run << " step " << step;
                last_cb = released, ++callbacks;
            }
            if (c.acquired) {
                ASSERT_TRUE(l.running());
                ASSERT_EQ(last_cb, released) << "run " << run << " step " << step;
                ASSERT_GT(c.acquired->after.fence, last_fence);  // each tenure its own fence
                last_fence = c.acquired->after.fence;
                last_cb = acquired, ++callbacks, ++acquisitions;
            }
            const bool owns = l.owns(now);
            ASSERT_EQ(owns, model.owns(now)) << "run " << run << " step " << step;
            // Ownership never appears without on_acquired.
            ASSERT_TRUE(!owns || was_owner || c.acquired) << "run " << run << " step " << step;
            ASSERT_EQ(owns, last_cb == acquired && l.holding() && now < l.deadline());
            const auto snap = l.lease(now);  // one snapshot, agreeing with both
            ASSERT_EQ(snap.has_value(), owns);
            ASSERT_EQ(snap ? snap->fence : 0, l.fence(now));
            if (snap) {
                ASSERT_EQ(snap->deadline, l.deadline());
            }
            if (c.disowned) {
                ASSERT_FALSE(owns);
            }
            if (owns) {
                // Some reply for this very tenure proves now: sent + lease - margin > now.
                bool proven = false;
                for (auto& p : proofs)
                    proven = proven || (p.fence == l.fence(now) && now < p.transition_deadline() - kMargin);
                ASSERT_TRUE(proven) << "run " << run << " step " << step;
            }
            // Probe between steps too: the deadline is exact.
            const auto probe = at(now_ms + pick(300));
            ASSERT_EQ(l.owns(probe), model.owns(probe));
            was_owner = owns;
        }
    }
    EXPECT_GT(acquisitions, runs);  // the sequences did exercise ownership
    EXPECT_GT(callbacks, 2 * runs);
}
