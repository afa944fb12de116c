// MultiLocker (issue 25): all of a set of mutexes or none, as a standard
// TimedLockable: each member its own fence, nothing taken when one is held
// elsewhere, woken by a member's release, no deadlock between overlapping
// sets in opposite orders, loss of any member is final for the hold (an
// operator's forced release included), setup mistakes and bad arguments.
#include <mutex>
#include <set>

#include "pg_support.hpp"

using namespace simba_test;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

std::int64_t fence_of(pqxx::connection& c, const std::string& mutex) {
    pqxx::nontransaction tx(c);
    auto r = tx.exec_params("SELECT fence FROM simba_mutex WHERE mutex = $1", mutex);
    return r.empty() ? 0 : r[0][0].as<std::int64_t>();
}

using MultiLockerModes = SessionModes;

}  // namespace

TEST_P(MultiLockerModes, TakesEveryMemberWithItsOwnFenceAndReleasesThemTogether) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("multi-all", GetParam()));
    const auto base = unique_name("multi-all");
    const std::vector<std::string> names{base + "-c", base + "-a", base + "-b"};
    simba::MultiLocker books(factory, names, "M", lease(2000ms, 1000ms));
    EXPECT_EQ(books.mutexes(), (std::vector<std::string>{base + "-a", base + "-b", base + "-c"})) << "byte order";
    {
        std::unique_lock<simba::MultiLocker> hold(books);
        const auto l = books.lease();
        ASSERT_TRUE(l);
        ASSERT_EQ(l->fences.size(), 3u);
        for (const auto& n : names) {
            EXPECT_EQ(owner_of(*db, n), "M") << n;
            EXPECT_EQ(l->fence(n), fence_of(*db, n)) << n << ": each member's own fence";
        }
        EXPECT_EQ(l->fence("not-a-member"), 0);
        EXPECT_GT(l->remaining(), 0ms);
    }
    for (const auto& n : names) EXPECT_EQ(owner_of(*db, n), "") << n << " released with the rest";
    EXPECT_FALSE(books.is_owner());
}

TEST_P(MultiLockerModes, NothingIsTakenWhileOneMemberIsHeldAndItsReleaseWakesTheWaiter) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("multi-none", GetParam()));
    const auto base = unique_name("multi-none");
    simba::Locker single(factory, base + "-b", "S", lease(30000ms, 10000ms));
    single.lock();
    simba::MultiLocker multi(factory, {base + "-a", base + "-b", base + "-c"}, "M", lease(30000ms, 10000ms));
    EXPECT_FALSE(multi.try_lock());
    EXPECT_FALSE(multi.try_lock_for(300ms));
    EXPECT_EQ(owner_of(*db, base + "-a"), "") << "all or nothing: the free members were not taken";
    EXPECT_EQ(owner_of(*db, base + "-c"), "");
    std::atomic<bool> got{false};
    std::atomic<bool> done{false};
    std::thread waiter([&] {
        std::unique_lock<simba::MultiLocker> hold(multi);
        got = true;
        while (!done) std::this_thread::sleep_for(5ms);
    });
    EXPECT_FALSE(eventually([&] { return got.load(); }, 300ms));
    const auto t0 = SteadyClock::now();
    single.unlock();
    ASSERT_TRUE(eventually([&] { return got.load(); }, 5s));
    const auto waited = SteadyClock::now() - t0;
    // The member's NOTIFY woke it: its lease (30 s) would have been much later.
    EXPECT_LT(waited, 1000ms) << duration_cast<milliseconds>(waited).count() << " ms";
    EXPECT_EQ(owner_of(*db, base + "-b"), "M");
    done = true;
    waiter.join();
    EXPECT_EQ(owner_of(*db, base + "-b"), "");
}

TEST(MultiLocker, OverlappingSetsInOppositeOrdersNeverDeadlockNorOverlap) {
    auto db = admin();
    simba::pg::ContendServiceFactory f1("", test_options("multi-order-1"));
    simba::pg::ContendServiceFactory f2("", test_options("multi-order-2"));
    const auto base = unique_name("multi-order");
    const std::string a = base + "-a", b = base + "-b", c = base + "-c";
    simba::MultiLocker one(f1, {a, b, c}, "one", lease(3000ms, 1000ms));
    simba::MultiLocker two(f2, {c, b}, "two", lease(3000ms, 1000ms));
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::atomic<int> rounds{0};
    auto run = [&](simba::MultiLocker& m) {
        for (int i = 0; i < 40; ++i) {
            std::unique_lock<simba::MultiLocker> hold(m);
            if (inside.fetch_add(1) != 0) ++overlaps;
            std::this_thread::sleep_for(1ms);
            inside.fetch_sub(1);
            ++rounds;
        }
    };
    std::thread t1([&] { run(one); });
    std::thread t2([&] { run(two); });
    const bool done = eventually([&] { return rounds.load() == 80; }, 60s);
    if (!done) {
        one.cancel();
        two.cancel();
    }
    t1.join();
    t2.join();
    EXPECT_TRUE(done) << rounds.load() << " of 80 rounds";
    EXPECT_EQ(overlaps.load(), 0) << "two holders of a shared member at once";
}

TEST_P(MultiLockerModes, AForcedReleaseOfOneMemberLosesTheHoldAndReleasesTheRest) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("multi-forced", GetParam()));
    const auto base = unique_name("multi-forced");
    simba::MultiLocker multi(factory, {base + "-a", base + "-b"}, "M", lease(10000ms, 5000ms));
    std::atomic<int> lost{0};
    multi.on_lost([&] { ++lost; });
    multi.lock();
    const auto t0 = SteadyClock::now();
    {
        pqxx::nontransaction tx(*db);
        tx.exec_params("SELECT simba_force_release($1)", base + "-b");
    }
    ASSERT_TRUE(eventually([&] { return lost.load() == 1; }, 5s)) << "on_lost";
    // Its NOTIFY: long before the 10 s lease's renewal or keepalive.
    EXPECT_LT(SteadyClock::now() - t0, 2000ms);
    EXPECT_FALSE(multi.is_owner());
    EXPECT_TRUE(eventually([&] { return owner_of(*db, base + "-a").empty(); }, 2s)) << "the rest given back";
    simba::Locker other(factory, base + "-b", "other", lease(10000ms, 5000ms));
    other.lock();
    EXPECT_FALSE(multi.is_owner());
    other.unlock();
    multi.unlock();
    multi.lock();
    EXPECT_TRUE(multi.is_owner());
    multi.unlock();
}

TEST(MultiLocker, BadArgumentsAndSharedIdentities) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("multi-args"));
    const auto m = unique_name("multi-args");
    EXPECT_THROW(simba::MultiLocker(factory, {}, "M"), simba::InvalidArgumentError);
    EXPECT_THROW(simba::MultiLocker(factory, {m, m}, "M"), simba::InvalidArgumentError);
    EXPECT_THROW(simba::MultiLocker(factory, {m, ""}, "M"), simba::InvalidArgumentError);
    EXPECT_THROW(simba::MultiLocker(factory, {m, std::string(257, 'x')}, "M"), simba::InvalidArgumentError);
    std::vector<std::string> many;
    for (std::size_t i = 0; i <= simba::MultiLocker::max_mutexes; ++i) many.push_back(m + std::to_string(i));
    try {
        simba::MultiLocker too_many(factory, many, "M");
        ADD_FAILURE() << "1001 names accepted";
    } catch (const simba::InvalidArgumentError& e) {
        EXPECT_EQ(e.sqlstate(), "22023");
    }
    simba::Locker single(factory, m, "same");
    EXPECT_THROW(simba::MultiLocker(factory, {m + "-x", m}, "same"), simba::IllegalStateError)
        << "a member held by a Locker of the same id in this factory";
    simba::MultiLocker multi(factory, {m + "-x", m + "-y"}, "other");
    EXPECT_THROW(simba::Locker(factory, m + "-y", "other"), simba::IllegalStateError);
    multi.lock();
    EXPECT_THROW(multi.lock(), simba::IllegalStateError) << "not recursive";
    multi.unlock();
    EXPECT_THROW(multi.unlock(), simba::IllegalStateError);
}

TEST(MultiLocker, SetupMistakesAreThrownAtOnce) {
    auto db = admin();
    expect_setup_mistakes_thrown(*db, [](const std::string& conninfo) {
        simba::pg::ContendServiceFactory factory(conninfo, test_options("multi-setup"));
        const auto m = unique_name("multi-setup");
        simba::MultiLocker multi(factory, {m + "-a", m + "-b"}, "A", lease(2000ms, 1000ms));
        return error_of([&] {
            if (multi.try_lock_for(10s)) multi.unlock();
        });
    });
}

INSTANTIATE_TEST_SUITE_P(MultiLocker, MultiLockerModes, ::testing::Bool(), session_mode_name);
