// SharedLocker (issue 25): a fenced read-write lock as a standard
// SharedTimedLockable and TimedLockable: readers share, a writer excludes,
// writers are preferred, threads of one process share one read hold, a
// downgrade keeps the fence, loss is final, setup mistakes surface, waits
// are cancelled and taken asynchronously; with sessions and without.
#include <mutex>
#include <shared_mutex>

#include "pg_support.hpp"
#include "simba/pg/fence_check.hpp"

using namespace simba_test;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

/// simba_rwlock_status: the mode and the live holders, "mode:a,b".
std::string status_of(pqxx::connection& c, const std::string& rwlock) {
    pqxx::nontransaction tx(c);
    auto r = tx.exec_params(
        "SELECT mode || ':' || coalesce(array_to_string(holders, ','), '') FROM simba_rwlock_status WHERE rwlock = $1",
        rwlock);
    return r.empty() ? "free:" : r[0][0].as<std::string>();
}

std::int64_t write_fence_of(pqxx::connection& c, const std::string& rwlock) {
    pqxx::nontransaction tx(c);
    return tx.exec_params1("SELECT write_fence FROM simba_rwlock WHERE rwlock = $1", rwlock)[0].as<std::int64_t>();
}

using SharedLockerModes = SessionModes;

}  // namespace

TEST_P(SharedLockerModes, ReadersShareAWriterExcludesAndFencesAreTheWriteEpoch) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("rw-share", GetParam()));
    const auto rw = unique_name("rw-share");
    simba::SharedLocker a(factory, rw, "A", lease(2000ms, 1000ms));
    simba::SharedLocker b(factory, rw, "B", lease(2000ms, 1000ms));
    simba::SharedLocker w(factory, rw, "W", lease(2000ms, 1000ms));
    {
        std::shared_lock<simba::SharedLocker> ra(a);
        std::shared_lock<simba::SharedLocker> rb(b);
        EXPECT_EQ(status_of(*db, rw), "read:A,B");
        EXPECT_EQ(a.fence(), 0) << "no writer yet: epoch 0";
        ASSERT_TRUE(a.lease());
        EXPECT_FALSE(a.lease()->exclusive);
        EXPECT_FALSE(w.try_lock()) << "readers hold it";
        EXPECT_FALSE(w.try_lock_for(200ms));
    }
    EXPECT_EQ(status_of(*db, rw), "free:");
    {
        std::unique_lock<simba::SharedLocker> hold(w);
        EXPECT_EQ(status_of(*db, rw), "write:W");
        ASSERT_TRUE(w.lease());
        EXPECT_TRUE(w.lease()->exclusive);
        EXPECT_GT(w.fence(), 0);
        EXPECT_EQ(w.fence(), write_fence_of(*db, rw));
        EXPECT_FALSE(a.try_lock_shared()) << "a writer holds it";
        EXPECT_FALSE(b.try_lock()) << "a writer holds it";
    }
    const auto epoch = write_fence_of(*db, rw);
    std::shared_lock<simba::SharedLocker> ra(a);
    EXPECT_EQ(a.fence(), epoch) << "a reader's fence names the write epoch it reads under";
    ra.unlock();
    std::unique_lock<simba::SharedLocker> again(w);
    EXPECT_GT(w.fence(), epoch) << "each write hold has a new fence";
}

TEST_P(SharedLockerModes, AWaitingWriterKeepsNewReadersOutAndGetsItWhenTheReadersLeave) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("rw-prefer", GetParam()));
    const auto rw = unique_name("rw-prefer");
    simba::SharedLocker a(factory, rw, "A", lease(3000ms, 1000ms));
    simba::SharedLocker late(factory, rw, "late", lease(3000ms, 1000ms));
    simba::SharedLocker w(factory, rw, "W", lease(3000ms, 1000ms));
    a.lock_shared();
    std::atomic<bool> writing{false};
    std::thread writer([&] {
        w.lock();
        writing = true;
        w.unlock();
    });
    ASSERT_TRUE(eventually([&] {
        pqxx::nontransaction tx(*db);
        return tx.exec_params1("SELECT waiting_writers FROM simba_rwlock_status WHERE rwlock = $1", rw)[0]
                   .as<int>() == 1;
    }, 5s)) << "the writer queued";
    EXPECT_FALSE(late.try_lock_shared_for(300ms)) << "a writer waits: new readers wait for it";
    EXPECT_FALSE(writing.load());
    const auto t0 = SteadyClock::now();
    a.unlock_shared();
    ASSERT_TRUE(eventually([&] { return writing.load(); }, 5s));
    const auto waited = SteadyClock::now() - t0;
    writer.join();
    // Woken by the release's NOTIFY, not its one-second poll.
    EXPECT_LT(waited, 900ms) << duration_cast<milliseconds>(waited).count() << " ms";
    EXPECT_TRUE(late.try_lock_shared());
    late.unlock_shared();
}

TEST_P(SharedLockerModes, ThreadsOfOneProcessShareOneReadHoldAndAWriterThreadWaitsForAllOfThem) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("rw-threads", GetParam()));
    const auto rw = unique_name("rw-threads");
    simba::SharedLocker s(factory, rw, "S", lease(3000ms, 1000ms));
    constexpr int kReaders = 4;
    std::atomic<int> reading{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> readers;
    for (int i = 0; i < kReaders; ++i)
        readers.emplace_back([&] {
            std::shared_lock<simba::SharedLocker> r(s);
            ++reading;
            while (!stop) std::this_thread::sleep_for(5ms);
            --reading;
        });
    ASSERT_TRUE(eventually([&] { return reading.load() == kReaders; }, 5s));
    EXPECT_EQ(status_of(*db, rw), "read:S") << "one holder on the server for every thread";
    s.lock_shared();  // this thread too joins the same hold
    EXPECT_EQ(status_of(*db, rw), "read:S");
    s.unlock_shared();
    std::atomic<bool> wrote{false};
    std::thread writer([&] {
        std::unique_lock<simba::SharedLocker> w(s);
        EXPECT_EQ(reading.load(), 0) << "no thread reads while one writes";
        EXPECT_EQ(status_of(*db, rw), "write:S");
        wrote = true;
    });
    EXPECT_FALSE(eventually([&] { return wrote.load(); }, 300ms)) << "the readers still hold it";
    stop = true;
    for (auto& t : readers) t.join();
    writer.join();
    EXPECT_TRUE(wrote.load());
    EXPECT_EQ(status_of(*db, rw), "free:");
}

TEST_P(SharedLockerModes, ADowngradeKeepsTheFenceAndLetsReadersInWithoutAGap) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("rw-down", GetParam()));
    const auto rw = unique_name("rw-down");
    simba::SharedLocker w(factory, rw, "W", lease(3000ms, 1000ms));
    simba::SharedLocker r(factory, rw, "R", lease(3000ms, 1000ms));
    w.lock();
    const auto fence = w.fence();
    const auto since = w.lease()->acquired_at;
    EXPECT_THROW(r.downgrade(), simba::IllegalStateError) << "not its writer";
    EXPECT_TRUE(w.downgrade());
    ASSERT_TRUE(w.lease());
    EXPECT_FALSE(w.lease()->exclusive);
    EXPECT_EQ(w.fence(), fence) << "the same fence: no other writer came between";
    EXPECT_EQ(w.lease()->acquired_at, since) << "the same hold";
    EXPECT_EQ(status_of(*db, rw), "read:W");
    EXPECT_THROW(w.unlock(), simba::IllegalStateError) << "it is held for reading now";
    EXPECT_TRUE(r.try_lock_shared()) << "readers join at once";
    EXPECT_EQ(r.fence(), fence);
    r.unlock_shared();
    w.unlock_shared();
    EXPECT_EQ(status_of(*db, rw), "free:");
}

TEST(SharedLocker, IsNotRecursiveAndChecksItsArguments) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("rw-args"));
    const auto rw = unique_name("rw-args");
    simba::SharedLocker s(factory, rw, "S", lease(2000ms, 1000ms));
    s.lock_shared();
    EXPECT_THROW(s.lock_shared(), simba::IllegalStateError);
    EXPECT_THROW(s.lock(), simba::IllegalStateError);
    EXPECT_THROW((void)s.try_lock(), simba::IllegalStateError);
    EXPECT_THROW(s.unlock(), simba::IllegalStateError) << "held for reading, not writing";
    s.unlock_shared();
    EXPECT_THROW(s.unlock_shared(), simba::IllegalStateError);
    EXPECT_THROW(simba::SharedLocker(factory, rw, "S"), simba::IllegalStateError) << "one holder per (rwlock, id)";
    EXPECT_THROW(simba::SharedLocker(factory, "", "S"), simba::InvalidArgumentError);
    EXPECT_THROW(simba::SharedLocker(factory, rw, std::string(257, 'x')), simba::InvalidArgumentError);
    EXPECT_THROW(simba::SharedLocker(factory, rw, "T", lease(0ms, 1000ms)), simba::InvalidArgumentError);
    simba::SharedLocker moved(std::move(s));
    EXPECT_THROW(s.lock(), simba::IllegalStateError) << "moved from";
    EXPECT_FALSE(s.is_owner());
    moved.lock();
    EXPECT_EQ(status_of(*db, rw), "write:S");
}

TEST(SharedLocker, SetupMistakesAreThrownAtOnce) {
    auto db = admin();
    expect_setup_mistakes_thrown(*db, [](const std::string& conninfo) {
        simba::pg::ContendServiceFactory factory(conninfo, test_options("rw-setup"));
        simba::SharedLocker s(factory, unique_name("rw-setup"), "A", lease(2000ms, 1000ms));
        return error_of([&] {
            if (s.try_lock_shared_for(10s)) s.unlock_shared();
        });
    });
}

TEST_P(SharedLockerModes, ALostHoldStaysLostUntilUnlocked) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("rw-lost", GetParam()));
    const auto rw = unique_name("rw-lost");
    simba::SharedLocker w(factory, rw, "W", lease(1000ms, 500ms));
    std::atomic<int> lost{0};
    w.on_lost([&] { ++lost; });
    w.lock();
    const auto fence = w.fence();
    {
        // What the hold lives by ends on the server: its session, or (a lease
        // of its own) its row.
        pqxx::nontransaction tx(*db);
        if (GetParam())
            tx.exec_params0("UPDATE simba_session_lease SET ttl_at = now() - interval '2s', transition_at = now() - interval '1s'"
                            " WHERE session_id = (SELECT session_id FROM simba_rwlock_holder WHERE rwlock = $1)", rw);
        else
            tx.exec_params0("DELETE FROM simba_rwlock_holder WHERE rwlock = $1", rw);
    }
    ASSERT_TRUE(eventually([&] { return lost.load() == 1; }, 5s)) << "on_lost within the lease";
    EXPECT_FALSE(w.is_owner());
    EXPECT_FALSE(w.lease());
    EXPECT_EQ(w.fence(), 0);
    std::this_thread::sleep_for(1500ms);  // past a lease: nothing takes it back meanwhile
    EXPECT_FALSE(w.is_owner());
    EXPECT_NE(status_of(*db, rw), "write:W") << "not taken again on the server either";
    EXPECT_EQ(lost.load(), 1) << "once";
    w.unlock();
    w.lock();
    EXPECT_GT(w.fence(), fence) << "the next hold is a new one";
    w.unlock();
}

TEST(SharedLocker, AnAsynchronousLockAndACancelledOne) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("rw-async"));
    const auto rw = unique_name("rw-async");
    simba::SharedLocker w(factory, rw, "W", lease(3000ms, 1000ms));
    simba::SharedLocker r(factory, rw, "R", lease(3000ms, 1000ms));
    w.lock();
    auto reading = r.lock_shared_async();
    EXPECT_EQ(reading.wait_for(300ms), std::future_status::timeout) << "a writer holds it";
    w.unlock();
    ASSERT_EQ(reading.wait_for(5s), std::future_status::ready);
    reading.get();
    EXPECT_EQ(status_of(*db, rw), "read:R");
    auto joined = r.lock_shared_async();
    EXPECT_EQ(joined.wait_for(0ms), std::future_status::ready) << "joins the process's read hold";
    joined.get();
    auto writing = w.lock_async();
    EXPECT_EQ(writing.wait_for(300ms), std::future_status::timeout);
    w.cancel();
    ASSERT_EQ(writing.wait_for(2s), std::future_status::ready);
    EXPECT_THROW(writing.get(), simba::CancelledError);
    r.unlock_shared();
    r.unlock_shared();  // held twice by no thread in particular: any thread unlocks
    EXPECT_EQ(status_of(*db, rw), "free:");
    EXPECT_FALSE(eventually([&] { return status_of(*db, rw) != "free:"; }, 500ms)) << "the cancelled writer never takes it";
}

TEST(SharedLocker, UnderASessionTheHoldIsKeptByKeepalivesAlone) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("rw-session", true));
    const auto rw = unique_name("rw-session");
    simba::SharedLocker r(factory, rw, "R", lease(1000ms, 1000ms));
    r.lock_shared();
    auto renewed_at = [&] {
        pqxx::nontransaction tx(*db);
        return tx.exec_params1("SELECT renewed_at::text || session_id::text FROM simba_rwlock_holder WHERE rwlock = $1",
                               rw)[0]
            .as<std::string>();
    };
    const auto before = renewed_at();
    const auto t0 = SteadyClock::now();
    while (SteadyClock::now() - t0 < 3500ms) {  // past three of its own leases
        ASSERT_TRUE(r.is_owner());
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_EQ(renewed_at(), before) << "no statement of its own: the session's keepalives keep it";
    EXPECT_EQ(status_of(*db, rw), "read:R");
    r.unlock_shared();
}

INSTANTIATE_TEST_SUITE_P(SharedLocker, SharedLockerModes, ::testing::Bool(), session_mode_name);

TEST(SharedLocker, ItsHoldPassesTheFenceCheckInTheCallersTransaction) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("rw-fence"));
    const auto rw = unique_name("rw-fence");
    simba::SharedLocker w(factory, rw, "W", lease(3000ms, 1000ms));
    simba::SharedLocker r(factory, rw, "R", lease(3000ms, 1000ms));
    std::unique_lock<simba::SharedLocker> hold(w);
    {
        pqxx::work tx(*db);
        EXPECT_NO_THROW(simba::pg::rwlock_fence_check(tx, w.rwlock(), w.contender_id(), w.fence()));
        tx.commit();
    }
    {
        pqxx::work tx(*db);
        EXPECT_THROW(simba::pg::rwlock_fence_check(tx, w.rwlock(), w.contender_id(), w.fence() + 1),
                     simba::StaleFenceError);
    }
    {
        pqxx::work tx(*db);
        EXPECT_THROW(simba::pg::rwlock_fence_check(tx, r.rwlock(), r.contender_id(), w.fence()), simba::NotOwnerError);
    }
}

TEST(SharedLocker, AWaitGoesOnAcrossAnOutageWhoseRetryFellDue) {
    // A waiter's retry that comes due while its factory is disconnected is
    // tried again once it reconnects, and a release after that wakes it.
    auto db = admin();
    ScratchDatabase scratch(*db, "rw-outage");
    auto waiting_options = test_options("rw-outage-waiter");
    simba::pg::ContendServiceFactory holder_factory(scratch.conninfo(), test_options("rw-outage-holder"));
    simba::pg::ContendServiceFactory waiter_factory(scratch.conninfo(), waiting_options);
    const auto rw = unique_name("rw-outage");
    simba::SharedLocker w(holder_factory, rw, "W", lease(30000ms, 10000ms));
    simba::SharedLocker r(waiter_factory, rw, "R", lease(30000ms, 10000ms));
    w.lock();
    std::atomic<bool> got{false};
    std::thread t([&] {
        try {
            r.lock_shared();
        } catch (const simba::CancelledError&) {
            return;  // the test gave up on it
        }
        got = true;
        r.unlock_shared();
    });
    ASSERT_FALSE(eventually([&] { return got.load(); }, 300ms));
    // Its connections go and stay away past its next retry (every second).
    scratch.cut_off(waiting_options.application_name);
    std::this_thread::sleep_for(1500ms);  // the outage: longer than the retry interval
    scratch.refuse_connections(false);
    ASSERT_TRUE(eventually([&] { return waiter_factory.connected(); }, 5s));
    w.unlock();
    EXPECT_TRUE(eventually([&] { return got.load(); }, 5s)) << "woken after the outage";
    if (!got) r.cancel();
    t.join();
}
