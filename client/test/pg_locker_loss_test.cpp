// Locker: loss is final (a lost hold stays lost, is told once through
// on_lost, and is never taken back on the server), lock_async() without a
// thread per waiter, cancellation of it, and moving a Locker (issue 23,
// bullets 1, 3 and 6).
#include <algorithm>
#include <cstdlib>
#include <future>
#include <mutex>
#include <set>

#include "pg_support.hpp"

using namespace simba_test;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

/// Tenures the server granted `id` on `mutex` with a fence above `fence`
/// (simba.history logs every change of hands).
long tenures_after(pqxx::connection& c, const std::string& mutex, const std::string& id, std::int64_t fence) {
    pqxx::nontransaction tx(c);
    return tx.exec_params1("SELECT count(*) FROM simba_mutex_history WHERE mutex = $1 AND owner_id = $2"
                           " AND fence > $3 AND event IN ('acquired', 'taken_over', 'reacquired')",
                           mutex, id, fence)[0]
        .as<long>();
}

}  // namespace

// The report's scenario, many times: A holds, B waits (lock_async), an
// operator runs simba_force_release. A learns it within one NOTIFY or
// renewal, never says is_owner() again once it said false, tells on_lost
// once, and never holds the mutex on the server again; B gets a later fence.
TEST(LockerLoss, AForcedReleaseIsFinal) {
    const int runs = env_int("SIMBA_LOCKER_LOSS_RUNS", 200);
    auto root = admin();
    // The history is the server's own record of every grant: the extension's
    // simba.history as A's connection option (superuser: the option is
    // honoured); the portable edition's owner setting, in a database of the
    // test's own (it has no such option).
    std::string dsn_a = "options='-c simba.history=on'", dsn_b;
    std::unique_ptr<ScratchDatabase> scratch;
    if (portable_edition()) {
        scratch = std::make_unique<ScratchDatabase>(*root, "loss");
        set_database_setting(*root, *scratch, "history", "on");
        dsn_a = dsn_b = scratch->conninfo();
    }
    auto db = admin(dsn_b);
    auto options = test_options("loss");
    simba::pg::ContendServiceFactory fa(dsn_a, options);
    simba::pg::ContendServiceFactory fb(dsn_b, options);
    std::vector<long> learned_us;
    for (int run = 0; run < runs; ++run) {
        SCOPED_TRACE("run " + std::to_string(run));
        const auto m = unique_name("loss");
        simba::Locker a(fa, m, "A", lease(2000ms, 1000ms));
        simba::Locker b(fb, m, "B", lease(2000ms, 1000ms));
        std::atomic<int> lost_calls{0};
        a.on_lost([&] { ++lost_calls; });
        a.lock();
        const auto held = a.lease();
        ASSERT_TRUE(held);
        auto b_holds = b.lock_async();

        std::atomic<bool> stop{false}, said_false{false}, owner_again{false}, other_fence{false};
        std::thread sampler([&] {
            while (!stop) {
                const auto l = a.lease();
                if (l && l->fence != held->fence) other_fence = true;
                if (!l) said_false = true;
                if (said_false && (l || a.is_owner() || a.fence() != 0)) owner_again = true;
            }
        });
        const auto t0 = SteadyClock::now();
        {
            pqxx::nontransaction tx(*db);
            ASSERT_TRUE(tx.exec_params1("SELECT simba_force_release($1)", m)[0].as<bool>());
        }
        ASSERT_TRUE(eventually([&] { return !a.is_owner(); }, 2500ms)) << "A never learned of the forced release";
        learned_us.push_back(duration_cast<std::chrono::microseconds>(SteadyClock::now() - t0).count());
        ASSERT_EQ(b_holds.wait_for(5s), std::future_status::ready) << "B never got the lock";
        b_holds.get();
        EXPECT_TRUE(b.is_owner());
        EXPECT_GT(b.fence(), held->fence);
        EXPECT_TRUE(eventually([&] { return lost_calls.load() == 1; }, 2s)) << "on_lost runs once";
        stop = true;
        sampler.join();
        EXPECT_FALSE(owner_again) << "A said is_owner() again after saying false";
        EXPECT_FALSE(other_fence) << "A reported another fence than its hold's";
        EXPECT_FALSE(a.is_owner());
        EXPECT_EQ(a.fence(), 0);
        EXPECT_EQ(a.hold_count(), 1) << "the hold is the caller's until unlock()";
        EXPECT_THROW(a.lock(), simba::IllegalStateError) << "reentry into a lost hold";
        a.unlock();  // ends the lost hold; releases nothing of B's
        EXPECT_EQ(owner_of(*db, m), "B");
        b.unlock();
        EXPECT_EQ(lost_calls.load(), 1);
        EXPECT_EQ(tenures_after(*db, m, "A", held->fence), 0) << "A held the mutex on the server again";
        if (HasFailure()) break;
    }
    std::sort(learned_us.begin(), learned_us.end());
    if (!learned_us.empty())
        std::printf("forced release learned in %ld us (median), %ld us (max) over %zu runs\n",
                    learned_us[learned_us.size() / 2], learned_us.back(), learned_us.size());
}

TEST(LockerLoss, AnUnlockIsNoLossAndANewHoldGetsANewFence) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("loss-unlock"));
    const auto m = unique_name("loss-unlock");
    simba::Locker a(factory, m, "A", lease(2000ms, 1000ms));
    std::atomic<int> lost_calls{0};
    a.on_lost([&] { ++lost_calls; });
    a.lock();
    const auto first = a.fence();
    a.unlock();
    EXPECT_FALSE(a.lease());
    a.lock();
    EXPECT_GT(a.fence(), first);
    a.release();
    EXPECT_EQ(owner_of(*db, m), "");
    EXPECT_EQ(lost_calls.load(), 0) << "unlock() and release() are no loss";
}

TEST(LockerLoss, ALeaseThatRunsOutIsFinalToo) {
    // The server's lease ends while A's renewals cannot reach it: A's
    // statement connection is terminated and the server refuses new ones
    // (ALLOW_CONNECTIONS false), so A gives up at its deadline, and does not
    // take the mutex back once the database is reachable again.
    auto db = admin();
    ScratchDatabase scratch(*db, "loss-lease");
    auto options = test_options("loss-lease");
    simba::pg::ContendServiceFactory factory(scratch.conninfo(), options);
    const auto m = unique_name("loss-lease");
    simba::Locker a(factory, m, "A", lease(600ms, 300ms));
    std::atomic<int> lost_calls{0};
    a.on_lost([&] { ++lost_calls; });
    a.lock();
    const auto held = a.lease();
    ASSERT_TRUE(held);
    scratch.refuse_connections();
    {
        pqxx::nontransaction tx(*db);
        tx.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = " +
                 tx.quote(scratch.conninfo().substr(7)) + " AND pid <> pg_backend_pid()");
    }
    ASSERT_TRUE(eventually([&] { return !a.is_owner(); }, 2s));
    EXPECT_LE(SteadyClock::now(), held->deadline + 200ms) << "given up at the deadline";
    EXPECT_TRUE(eventually([&] { return lost_calls.load() == 1; }, 2s));
    scratch.refuse_connections(false);
    ASSERT_TRUE(factory.wait_connected(5000ms));
    auto other = admin(scratch.conninfo());
    EXPECT_FALSE(eventually([&] { return holds_later_tenure(*other, m, "A", held->fence) || a.is_owner(); }, 1500ms))
        << "A took the mutex back after reconnecting";
    a.unlock();
}

TEST(LockerAsync, ManyWaitersParkNoThreadAndEachGetsItsTurn) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("async"));
    const auto m = unique_name("async");
    simba::Locker holder(factory, m, "holder", lease(3000ms, 1000ms));
    holder.lock();
    const int n = 40;
    std::vector<std::unique_ptr<simba::Locker>> waiters;
    std::vector<std::future<void>> futures;
    const int threads_before = thread_count();
    for (int i = 0; i < n; ++i) {
        waiters.push_back(
            std::make_unique<simba::Locker>(factory, m, "w" + std::to_string(i), lease(3000ms, 1000ms)));
        futures.push_back(waiters.back()->lock_async());
    }
    EXPECT_LE(thread_count(), threads_before) << "lock_async() parked a thread per waiting lock";
    for (auto& f : futures) EXPECT_EQ(f.wait_for(0ms), std::future_status::timeout);
    holder.unlock();
    // One at a time: whoever holds unlocks (from this thread: an async hold
    // belongs to none), and the next gets its turn.
    std::set<std::int64_t> fences;
    for (int done = 0; done < n; ++done) {
        int ready = -1;
        ASSERT_TRUE(eventually([&] {
            for (int i = 0; i < n; ++i)
                if (futures[i].valid() && futures[i].wait_for(0ms) == std::future_status::ready) ready = i;
            return ready >= 0;
        }, 10s)) << done << " of " << n << " got the lock";
        futures[ready].get();
        EXPECT_TRUE(waiters[ready]->is_owner());
        EXPECT_EQ(owner_of(*db, m), "w" + std::to_string(ready));
        EXPECT_TRUE(fences.insert(waiters[ready]->fence()).second);
        waiters[ready]->unlock();
    }
}

TEST(LockerAsync, CancelCompletesTheFutureWithCancelledAndNeverTakesIt) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("async-cancel"));
    const auto m = unique_name("async-cancel");
    simba::Locker holder(factory, m, "holder", lease(3000ms, 1000ms));
    holder.lock();
    simba::Locker waiter(factory, m, "waiter", lease(3000ms, 1000ms));
    auto f = waiter.lock_async();
    EXPECT_THROW((void)waiter.lock_async(), simba::IllegalStateError) << "one lock at a time";
    waiter.cancel();
    ASSERT_EQ(f.wait_for(0ms), std::future_status::ready) << "cancel() completes the future before it returns";
    EXPECT_THROW(f.get(), simba::CancelledError);
    holder.unlock();
    EXPECT_FALSE(eventually([&] { return owner_of(*db, m) == "waiter"; }, 300ms));
    // and the Locker is idle again
    auto again = waiter.lock_async();
    ASSERT_EQ(again.wait_for(5s), std::future_status::ready);
    again.get();
    EXPECT_EQ(owner_of(*db, m), "waiter");
    waiter.unlock();
}

TEST(LockerAsync, ASetupMistakeReachesTheFutureAtOnce) {
    auto db = admin();
    const auto name = unique_name("async-noext");
    {
        pqxx::nontransaction tx(*db);
        tx.exec0("CREATE DATABASE " + tx.quote_name(name));
    }
    {
        simba::pg::ContendServiceFactory factory("dbname=" + name, test_options("async-noext"));
        simba::Locker lock(factory, unique_name("async-noext"), "A", lease(2000ms, 1000ms));
        auto f = lock.lock_async();
        ASSERT_EQ(f.wait_for(1s), std::future_status::ready);
        try {
            f.get();
            ADD_FAILURE() << "no error";
        } catch (const simba::ServerError& e) {
            EXPECT_EQ(e.sqlstate(), "42883") << e.what();
        }
        EXPECT_EQ(lock.hold_count(), 0);
    }
    {
        simba::pg::ContendServiceFactory factory("host=127.0.0.1 port=1 connect_timeout=2", test_options("async-noserver"));
        simba::Locker lock(factory, unique_name("async-noserver"), "A", lease(2000ms, 1000ms));
        auto f = lock.lock_async();
        ASSERT_EQ(f.wait_for(1s), std::future_status::ready);
        EXPECT_THROW(f.get(), simba::ConnectionError);
    }
    pqxx::nontransaction tx(*db);
    tx.exec0("DROP DATABASE " + tx.quote_name(name) + " WITH (FORCE)");
}

TEST(LockerMove, AMovedLockerKeepsItsHoldAndTheMovedFromOneHoldsNothing) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("move"));
    const auto m = unique_name("move");
    simba::Locker a(factory, m, "A", lease(2000ms, 1000ms));
    a.lock();
    const auto fence = a.fence();
    simba::Locker b(std::move(a));
    EXPECT_TRUE(b.is_owner());
    EXPECT_EQ(b.fence(), fence);
    EXPECT_FALSE(a.is_owner());  // NOLINT(bugprone-use-after-move): the documented moved-from state
    EXPECT_THROW(a.lock(), simba::IllegalStateError);
    b.unlock();
    EXPECT_EQ(owner_of(*db, m), "");
    simba::Locker c(factory, m + "-other", "C", lease(2000ms, 1000ms));
    c.lock();
    b.lock();
    c = std::move(b);  // releases what c held, takes over b's hold
    EXPECT_EQ(owner_of(*db, m + "-other"), "");
    EXPECT_EQ(owner_of(*db, m), "A");
    c.unlock();
    EXPECT_EQ(owner_of(*db, m), "");
}
