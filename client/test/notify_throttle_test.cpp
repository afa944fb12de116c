// How far a NOTIFY may bring a service's next attempt forward (src/
// notify_throttle.hpp), on a fake clock: the first acts at once, a storm costs at
// most one attempt per interval, and no NOTIFY waits longer than an interval
// for an attempt that follows it.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "notify_throttle.hpp"

using simba::SteadyClock;
using simba::pg::detail::NotifyThrottle;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

namespace {

const auto kInterval = 100ms;
const auto kNone = SteadyClock::time_point::max();

SteadyClock::time_point at(std::int64_t ms) { return SteadyClock::time_point(milliseconds(ms)); }

}  // namespace

TEST(NotifyThrottle, TheFirstNotifyActsAtOnce) {
    NotifyThrottle g;
    EXPECT_EQ(g.admit(at(5000), at(9000), kInterval), at(5000));
    EXPECT_EQ(g.floor(), at(5100));
}

TEST(NotifyThrottle, NotifiesWhileOneIsPendingJoinIt) {
    NotifyThrottle g;
    ASSERT_EQ(g.admit(at(0), at(9000), kInterval), at(0));
    EXPECT_FALSE(g.admit(at(0), at(0), kInterval)) << "due now already";
    // That attempt was sent; the next poll is at 9 s.
    ASSERT_EQ(g.admit(at(10), at(9000), kInterval), at(100));
    for (int t = 11; t < 100; ++t) EXPECT_FALSE(g.admit(at(t), at(100), kInterval)) << t;
    EXPECT_EQ(g.floor(), at(200));
}

TEST(NotifyThrottle, AnAttemptDueSoonerAbsorbsIt) {
    NotifyThrottle g;
    ASSERT_EQ(g.admit(at(0), at(9000), kInterval), at(0));
    // A renewal due at 50 ms comes before the 100 ms floor: nothing to add.
    EXPECT_FALSE(g.admit(at(20), at(50), kInterval));
    EXPECT_EQ(g.floor(), at(100)) << "no slot used";
    // A timer taken by the I/O thread (max()) does not absorb it.
    EXPECT_EQ(g.admit(at(60), kNone, kInterval), at(100));
}

TEST(NotifyThrottle, NewsLetsTheNextNotifyActAtOnceAndAWaitersSecondWithinAnInterval) {
    NotifyThrottle owner, waiter, late;
    for (auto* g : {&owner, &waiter, &late}) ASSERT_EQ(g->admit(at(0), at(9000), kInterval), at(0));
    owner.news();                             // that attempt saw the mutex change hands, to it
    waiter.news(at(2) + kInterval);           // to someone else, at 2 ms
    late.news(at(2) + kInterval);             // the same, but no NOTIFY comes for a while
    EXPECT_EQ(owner.admit(at(3), at(9000), kInterval), at(3));
    EXPECT_EQ(owner.admit(at(6), at(9000), kInterval), at(103)) << "no news: rate-limited again";
    EXPECT_EQ(waiter.admit(at(3), at(9000), kInterval), at(3));
    EXPECT_EQ(waiter.admit(at(6), at(9000), kInterval), at(6));
    EXPECT_EQ(waiter.admit(at(9), at(9000), kInterval), at(106)) << "no news: rate-limited again";
    // A storm that starts an interval after the news gets one attempt at once, not two.
    EXPECT_EQ(late.admit(at(500), at(9000), kInterval), at(500));
    EXPECT_EQ(late.admit(at(501), at(9000), kInterval), at(600));
}

TEST(NotifyThrottle, AReleaseSeenBeforeItsNotifyDoesNotSlowTheNext) {
    // A poll (or a registration's attempt) saw the change of hands first;
    // that release's own NOTIFY, read after it, was stale news. The next
    // release's NOTIFY still acts at once.
    NotifyThrottle g;
    ASSERT_EQ(g.admit(at(0), at(9000), kInterval), at(0));    // an earlier release
    g.news(at(20) + kInterval);                               // the poll at 20 ms, still waiting
    ASSERT_EQ(g.admit(at(25), at(9000), kInterval), at(25));  // its stale NOTIFY: nothing new
    EXPECT_EQ(g.admit(at(40), at(9000), kInterval), at(40)) << "the next release";
    EXPECT_EQ(g.floor(), at(140));
}

TEST(NotifyThrottle, RandomStormsCostOneAttemptPerIntervalAndNoNotifyWaitsLonger) {
    // An I/O loop of one waiter polling every 10 s: its attempts and random
    // bursts of NOTIFYs, in time order.
    std::mt19937_64 rng(12);
    for (int run = 0; run < 200; ++run) {
        NotifyThrottle g;
        std::uniform_int_distribution<std::int64_t> gap(0, run % 2 ? 3 : 150);  // dense or sparse
        auto next_at = at(10'000);
        std::vector<SteadyClock::time_point> attempts;
        std::vector<std::pair<SteadyClock::time_point, std::size_t>> notifies;  // and the attempt after it
        auto t = at(0);
        while (t < at(20'000)) {
            t += milliseconds(gap(rng));
            while (next_at <= t) {  // attempts due before this NOTIFY is read
                attempts.push_back(next_at);
                next_at = next_at + 10s;  // the reply: poll again in 10 s
            }
            notifies.emplace_back(t, attempts.size());
            if (auto a = g.admit(t, next_at, kInterval)) next_at = *a;
        }
        attempts.push_back(next_at);
        // NOTIFY-brought attempts at least an interval apart (the 10 s polls
        // come on top: at most 3 in 20 s).
        int close = 0;
        for (std::size_t i = 1; i < attempts.size(); ++i) close += attempts[i] - attempts[i - 1] < kInterval;
        EXPECT_LE(close, 3) << run;
        EXPECT_LE(attempts.size(), 20'000u / 100 + 1 + 3) << run;
        // Every NOTIFY is followed by an attempt within an interval: a real
        // release heard during a storm waits at most that long.
        for (auto [n, next] : notifies) ASSERT_LE(attempts[next] - n, kInterval) << run;
    }
}
