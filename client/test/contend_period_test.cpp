#include <gtest/gtest.h>

#include "simba/contend_period.hpp"

using namespace simba;
using namespace std::chrono_literals;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

// An owner row decided at server time 1'000'000 s, observed at steady `anchor`.
MutexOwner owner_row(const std::string& id, milliseconds ttl, milliseconds transition, SteadyClock::time_point anchor) {
    MutexOwner o;
    o.mutex = "m";
    o.owner_id = id;
    o.current_at = ServerTime(1'000'000'000'000);
    o.acquired_at = o.current_at;
    o.ttl_at = o.acquired_at + ttl;
    o.transition_at = o.ttl_at + transition;
    o.version = 1;
    o.fence = 1;
    o.anchor = anchor;
    return o;
}

}  // namespace

TEST(ContendPeriod, OwnerDelayIsTtlAtMinusNow) {
    auto t0 = SteadyClock::now();
    ContendPeriod p("me");
    auto o = owner_row("me", 5000ms, 2000ms, t0);
    EXPECT_EQ(duration_cast<milliseconds>(p.next_delay(o, t0)), 5000ms);
    EXPECT_EQ(duration_cast<milliseconds>(p.next_delay(o, t0 + 1500ms)), 3500ms);
    // Owner delay has no jitter: always the same.
    for (int i = 0; i < 100; ++i) EXPECT_EQ(duration_cast<milliseconds>(p.ensure_next_delay(o, t0)), 5000ms);
}

TEST(ContendPeriod, OwnerRenewsWithAQuarterOfTheLeaseLeftWhenTransitionIsShort) {
    auto t0 = SteadyClock::now();
    ContendPeriod p("me");
    // No transition: ttl_at is the lease's end; renew at 3/4 of it instead.
    EXPECT_EQ(duration_cast<milliseconds>(p.next_delay(owner_row("me", 1000ms, 0ms, t0), t0)), 750ms);
    // A transition shorter than a quarter of the lease: transition_at - lease/4.
    EXPECT_EQ(duration_cast<milliseconds>(p.next_delay(owner_row("me", 1000ms, 100ms, t0), t0)), 825ms);
    // Long enough (>= a third of ttl): exactly ttl_at, as in Simba.
    EXPECT_EQ(duration_cast<milliseconds>(p.next_delay(owner_row("me", 900ms, 300ms, t0), t0)), 900ms);
}

TEST(ContendPeriod, ServerTimesAreCarriedOntoTheSteadyClock) {
    // The decision time (current_at) may be far from any client clock: only
    // differences between server times matter.
    auto t0 = SteadyClock::now();
    ContendPeriod p("me");
    auto o = owner_row("me", 5000ms, 2000ms, t0);
    o.current_at += 1000ms;  // decided 1 s after acquired_at: 4 s of ttl left
    EXPECT_EQ(duration_cast<milliseconds>(p.next_delay(o, t0)), 4000ms);
    EXPECT_EQ(o.transition_deadline() - o.ttl_deadline(), 2000ms);
}

TEST(ContendPeriod, NegativeDelaysClampToZero) {
    auto t0 = SteadyClock::now();
    ContendPeriod p("me");
    auto mine = owner_row("me", 1000ms, 0ms, t0);
    EXPECT_LT(p.next_delay(mine, t0 + 3000ms), SteadyClock::duration::zero());
    EXPECT_EQ(p.ensure_next_delay(mine, t0 + 3000ms), SteadyClock::duration::zero());
    auto theirs = owner_row("other", 1000ms, 1000ms, t0);
    for (int i = 0; i < 200; ++i) EXPECT_EQ(p.ensure_next_delay(theirs, t0 + 10s), SteadyClock::duration::zero());
}

TEST(ContendPeriod, ContenderDelayIsTransitionAtPlusJitterInDefaultRange) {
    auto t0 = SteadyClock::now();
    ContendPeriod p("me", Jitter{}, 42);
    auto o = owner_row("other", 5000ms, 2000ms, t0);
    auto lo = milliseconds::max(), hi = milliseconds::min();
    for (int i = 0; i < 5000; ++i) {
        auto d = duration_cast<milliseconds>(p.next_delay(o, t0));
        ASSERT_GE(d, 7000ms - 200ms);
        ASSERT_LT(d, 7000ms + 1000ms);
        lo = std::min(lo, d);
        hi = std::max(hi, d);
    }
    // Uniform over 1200 values: 5000 samples cover both ends closely.
    EXPECT_LT(lo, 7000ms - 150ms);
    EXPECT_GT(hi, 7000ms + 950ms);
}

TEST(ContendPeriod, ZeroTransitionUsesNonNegativeJitter) {
    auto t0 = SteadyClock::now();
    ContendPeriod p("me", Jitter{}, 7);
    auto o = owner_row("other", 5000ms, 0ms, t0);
    bool saw_low = false;
    for (int i = 0; i < 5000; ++i) {
        auto d = duration_cast<milliseconds>(p.next_delay(o, t0));
        ASSERT_GE(d, 5000ms);
        ASSERT_LT(d, 6000ms);
        saw_low = saw_low || d < 5050ms;
    }
    EXPECT_TRUE(saw_low);
}

TEST(ContendPeriod, CustomJitter) {
    auto t0 = SteadyClock::now();
    Jitter j;
    j.normal = {10ms, 20ms};
    j.zero_transition = {30ms, 31ms};
    ContendPeriod p("me", j, 1);
    auto o = owner_row("other", 1000ms, 500ms, t0);
    for (int i = 0; i < 1000; ++i) {
        auto d = duration_cast<milliseconds>(p.next_delay(o, t0));
        ASSERT_GE(d, 1510ms);
        ASSERT_LT(d, 1520ms);
    }
    auto z = owner_row("other", 1000ms, 0ms, t0);
    for (int i = 0; i < 100; ++i) ASSERT_EQ(duration_cast<milliseconds>(p.next_delay(z, t0)), 1030ms);
    // An empty range means a fixed offset.
    Jitter none;
    none.normal = {0ms, 0ms};
    ContendPeriod q("me", none);
    EXPECT_EQ(duration_cast<milliseconds>(q.next_delay(o, t0)), 1500ms);
}

TEST(ContendPeriod, FreeMutexMeansAttemptNow) {
    ContendPeriod p("me");
    auto free = MutexOwner::none("m");
    EXPECT_EQ(p.ensure_next_delay(free), SteadyClock::duration::zero());
}

TEST(MutexOwner, WindowsFollowTheSteadyClock) {
    auto t0 = SteadyClock::now();
    auto o = owner_row("a", 1000ms, 500ms, t0);
    EXPECT_TRUE(o.has_owner());
    EXPECT_TRUE(o.is_owner("a"));
    EXPECT_FALSE(o.is_owner("b"));
    EXPECT_TRUE(o.in_ttl(t0));
    EXPECT_FALSE(o.in_transition(t0));
    EXPECT_FALSE(o.in_ttl(t0 + 1000ms));
    EXPECT_TRUE(o.in_transition(t0 + 1000ms));
    EXPECT_TRUE(o.in_transition(t0 + 1499ms));
    EXPECT_FALSE(o.in_transition(t0 + 1500ms));
    auto none = MutexOwner::none("m", t0);
    EXPECT_FALSE(none.has_owner());
    EXPECT_FALSE(none.is_owner(""));
    EXPECT_FALSE(none.in_ttl(t0));
    EXPECT_FALSE(none.in_transition(t0));
}
