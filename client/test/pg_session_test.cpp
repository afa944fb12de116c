// Sessions in the client (FactoryOptions::sessions, the default) against a
// real PostgreSQL: one session per lease length, one keepalive per period
// renews every tenure under it, an admin's forced release is noticed by the
// keepalive even without LISTEN, a session that ended on the server ends its
// tenures and they are taken again under a new one, and a factory's shutdown
// releases everything with one statement per session. Semaphore permits
// ride the same sessions.

#include <future>
#include <optional>

#include "pg_support.hpp"

using namespace simba_test;
using simba::MutexContendService;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

struct SessionRow {
    int sessions = 0;
    int mutexes = 0;
};

/// The live sessions of the role and the mutexes they hold, for mutexes named prefix%.
SessionRow sessions_of(pqxx::connection& c, const std::string& prefix) {
    pqxx::nontransaction tx(c);
    auto r = tx.exec_params1(
        "SELECT count(DISTINCT m.session_id), count(*) FROM simba_mutex_status m"
        " JOIN simba_session_status s USING (session_id) WHERE starts_with(m.mutex, $1) AND s.state <> 'ended'",
        prefix);
    return {r[0].as<int>(), r[1].as<int>()};
}

/// Has session `id` ended on the server (simba_session_status)?
bool session_ended(pqxx::connection& c, const std::string& id) {
    pqxx::nontransaction tx(c);
    return tx.exec_params1("SELECT state = 'ended' FROM simba_session_status WHERE session_id = $1::uuid", id)[0]
        .as<bool>();
}

std::vector<std::unique_ptr<MutexContendService>> start_owners(simba::pg::ContendServiceFactory& f,
                                                                const std::string& prefix, int n,
                                                                std::vector<std::shared_ptr<Recorder>>& recs,
                                                                simba::ContendOptions lease_opts) {
    std::vector<std::unique_ptr<MutexContendService>> out;
    for (int i = 0; i < n; ++i) {
        recs.push_back(std::make_shared<Recorder>(prefix + "-" + std::to_string(i), "owner"));
        out.push_back(f.create(recs.back(), lease_opts));
        out.back()->start();
    }
    return out;
}

}  // namespace

TEST(Sessions, OneKeepalivePerPeriodRenewsEveryTenure) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("sess-renew"));
    const auto prefix = unique_name("sess-renew");
    const int n = 300;
    std::vector<std::shared_ptr<Recorder>> recs;
    auto services = start_owners(factory, prefix, n, recs, lease(1000ms, 1000ms));
    for (auto& r : recs) ASSERT_TRUE(r->wait([](auto& ev) { return ev.size() == 1; }, 20s));
    // One session holds them all.
    const auto held = sessions_of(*db, prefix);
    EXPECT_EQ(held.sessions, 1);
    EXPECT_EQ(held.mutexes, n);

    // Four lease periods: every tenure renewed (its lease end moved on with
    // the session's), none lost, and the renewals cost a few keepalives, not
    // an attempt per tenure per period (without sessions: 300 calls a period).
    const auto m0 = factory.metrics();
    ASSERT_TRUE(renewed_on_server(*db, prefix + "-0", 3, 10s));
    const auto m1 = factory.metrics();
    const auto keepalives = m1.session_statements - m0.session_statements;
    const auto calls = m1.acquire_calls - m0.acquire_calls;
    std::printf("%d tenures, 3 renewals: %llu session statements, %llu simba_acquire calls\n", n,
                static_cast<unsigned long long>(keepalives), static_cast<unsigned long long>(calls));
    EXPECT_GE(keepalives, 3u);
    EXPECT_LE(keepalives, 8u);
    EXPECT_EQ(calls, 0u) << "an owner attempted on its own under a session";
    for (int i = 0; i < n; ++i) {
        EXPECT_TRUE(services[static_cast<std::size_t>(i)]->is_owner()) << i;
        EXPECT_EQ(recs[static_cast<std::size_t>(i)]->released_count(), 0) << i;
    }
    EXPECT_EQ(sessions_of(*db, prefix).mutexes, n);
    for (auto& s : services) s->stop();
    EXPECT_EQ(sessions_of(*db, prefix).mutexes, 0);
}

TEST(Sessions, ALeaseLengthOfItsOwnGetsASessionOfItsOwn) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("sess-two"));
    const auto prefix = unique_name("sess-two");
    std::vector<std::shared_ptr<Recorder>> recs;
    auto a = start_owners(factory, prefix + "-a", 3, recs, lease(2000ms, 1000ms));
    auto b = start_owners(factory, prefix + "-b", 3, recs, lease(3000ms, 1000ms));
    for (auto& r : recs) ASSERT_TRUE(r->wait([](auto& ev) { return ev.size() == 1; }, 10s));
    EXPECT_EQ(sessions_of(*db, prefix).sessions, 2);
    EXPECT_EQ(sessions_of(*db, prefix + "-a").sessions, 1);
    EXPECT_EQ(sessions_of(*db, prefix + "-b").mutexes, 3);
}

TEST(Sessions, AForcedReleaseIsNoticedByTheKeepaliveWithoutListen) {
    // Polling only: no NOTIFY reaches the holder. The forced release counts
    // in the session's `revoked`; the next keepalive sees it and the holder
    // checks its tenure: the Locker's hold is lost (loss is final), the
    // other tenures under the session stay held.
    auto db = admin();
    auto opts = test_options("sess-revoke");
    opts.listen_conninfo = "none";
    simba::pg::ContendServiceFactory factory("", opts);
    const auto m = unique_name("sess-revoke");
    simba::Locker a(factory, m, "A", lease(1000ms, 1000ms));
    simba::Locker other(factory, m + "-other", "A", lease(1000ms, 1000ms));
    std::atomic<bool> lost{false};
    a.on_lost([&] { lost = true; });
    a.lock();
    other.lock();
    const auto fence = a.fence();
    {
        pqxx::nontransaction tx(*db);
        ASSERT_TRUE(tx.exec_params1("SELECT simba_force_release($1)", m)[0].as<bool>());
    }
    const auto t0 = SteadyClock::now();
    ASSERT_TRUE(eventually([&] { return !a.is_owner(); }, 5s)) << "the holder never noticed";
    const auto took = duration_cast<milliseconds>(SteadyClock::now() - t0);
    std::printf("forced release noticed after %lld ms (keepalive every ttl = 1000 ms)\n",
                static_cast<long long>(took.count()));
    EXPECT_LE(took, 2500ms) << "more than a keepalive period and its check";
    EXPECT_TRUE(eventually([&] { return lost.load(); }, 2s));
    EXPECT_EQ(owner_of(*db, m), "") << "the lost hold was taken again";
    EXPECT_FALSE(holds_later_tenure(*db, m, "A", fence));
    EXPECT_TRUE(other.is_owner());
    a.unlock();
    other.unlock();
}

TEST(Sessions, ASessionThatEndedOnTheServerEndsItsTenuresAndANewOneTakesOver) {
    // Keepalives blocked (the session row locked) past the session's end:
    // the tenure ends here at its deadline; once the row is free the next
    // keepalive finds the session ended (SB004), and the service contends
    // again under a new session, with a new fence.
    LogCapture logs;
    auto db = admin();
    auto blocker = admin();
    simba::pg::ContendServiceFactory factory("", test_options("sess-ended"));
    const auto m = unique_name("sess-ended");
    auto rec = std::make_shared<Recorder>(m, "A");
    auto svc = factory.create(rec, lease(600ms, 400ms));
    svc->start();
    ASSERT_TRUE(rec->wait([](auto& ev) { return ev.size() == 1; }, 10s));
    const auto fence = svc->fence();
    std::string first_session;
    {
        pqxx::work tx(*blocker);
        first_session = tx.exec_params1("SELECT session_id::text FROM simba_mutex WHERE mutex = $1", m)[0]
                            .as<std::string>();
        tx.exec_params("SELECT 1 FROM simba_session_lease WHERE session_id = $1::uuid FOR UPDATE", first_session);
        ASSERT_TRUE(rec->wait([](auto& ev) { return ev.size() == 2; }, 10s)) << "never released at the deadline";
        EXPECT_FALSE(svc->is_owner());
        // Past the session's end on the server too.
        ASSERT_TRUE(eventually([&] { return session_ended(*db, first_session); }, 5s));
        tx.abort();
    }
    ASSERT_TRUE(rec->wait([](auto& ev) { return ev.size() == 3; }, 10s)) << "never owned again";
    EXPECT_TRUE(rec->events()[2].acquired);
    EXPECT_GT(svc->fence(), fence);
    EXPECT_TRUE(eventually([&] { return logs.count_containing("has ended on the server") >= 1; }, 2s));
    pqxx::nontransaction tx(*db);
    EXPECT_NE(tx.exec_params1("SELECT session_id::text FROM simba_mutex WHERE mutex = $1", m)[0].as<std::string>(),
              first_session);
}

TEST(Sessions, ShutdownClosesTheSessionReleasingEveryTenureAtOnce) {
    // The factory goes while its services still run: its shutdown closes
    // the session (one statement: the session row goes, each mutex is
    // released and NOTIFYed) instead of a release per service.
    auto db = admin();
    const auto prefix = unique_name("sess-close");
    const int n = 50;
    simba::pg::ContendServiceFactory waiters_f("", test_options("sess-close-w"));
    std::vector<std::shared_ptr<Recorder>> waiters;
    std::vector<std::unique_ptr<MutexContendService>> waiting;
    std::vector<std::unique_ptr<MutexContendService>> services;  // outlive their factory
    std::string session;
    {
        simba::pg::ContendServiceFactory factory("", test_options("sess-close"));
        std::vector<std::shared_ptr<Recorder>> recs;
        services = start_owners(factory, prefix, n, recs, lease(10000ms, 6000ms));
        for (auto& r : recs) ASSERT_TRUE(r->wait([](auto& ev) { return ev.size() == 1; }, 10s));
        {
            pqxx::nontransaction tx(*db);
            session = tx.exec_params1("SELECT session_id::text FROM simba_mutex WHERE mutex = $1", prefix + "-0")[0]
                          .as<std::string>();
        }
        for (int i = 0; i < n; ++i) {
            waiters.push_back(std::make_shared<Recorder>(prefix + "-" + std::to_string(i), "waiter"));
            waiting.push_back(waiters_f.create(waiters.back(), lease(10000ms, 6000ms)));
            waiting.back()->start();
        }
        // Every waiter has seen the holder: its next poll is ~16 s away.
        for (auto& w : waiting)
            ASSERT_TRUE(eventually([&] { return w->state().after.owner_id == "owner"; }, 10s));
    }  // ~ContendServiceFactory
    {
        pqxx::nontransaction tx(*db);
        EXPECT_EQ(tx.exec_params1("SELECT count(*) FROM simba_session_lease WHERE session_id = $1::uuid", session)[0]
                      .as<int>(),
                  0)
            << "the session was not closed";
    }
    // Only the close's NOTIFYs can have woken the waiters this soon.
    for (auto& w : waiters) EXPECT_TRUE(w->wait([](auto& ev) { return ev.size() == 1; }, 5s));
    EXPECT_EQ(sessions_of(*db, prefix).mutexes, n);  // under the waiters' session now
    services.clear();  // their factory is gone: nothing more to release
    EXPECT_EQ(sessions_of(*db, prefix).mutexes, n);
}

TEST(Sessions, PermitsAreKeptByTheKeepaliveWithoutStatementsOfTheirOwn) {
    // 100 permits of ttl 900 ms, one session (300 ms, 600 ms) keeps them:
    // after three keepalive periods every one is live here and on the
    // server, and no statement touched a permit row (their xmin is the
    // grant's; a refresh, even under a session, would write a new version).
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("sess-permit"));
    simba::Semaphore sem(factory, "worker");
    const auto prefix = unique_name("sess-permit");
    std::vector<simba::Permit> held;
    for (int k = 0; k < 10; ++k)
        for (int i = 0; i < 10; ++i) {
            auto p = sem.try_acquire(prefix + "-" + std::to_string(k), 10, 900ms);
            ASSERT_TRUE(p) << k << "/" << i;
            held.push_back(std::move(*p));
        }
    const std::string rows =
        "SELECT count(DISTINCT session_id), count(session_id), string_agg(xmin::text, ',' ORDER BY key, slot)"
        " FROM simba_semaphore_permit WHERE starts_with(key, $1)";
    std::string versions;
    {
        pqxx::nontransaction tx(*db);
        auto r = tx.exec_params1(rows, prefix);
        EXPECT_EQ(r[0].as<int>(), 1) << "one session for one lease length";
        EXPECT_EQ(r[1].as<int>(), 100) << "every permit under it";
        versions = r[2].as<std::string>();
    }
    const auto m0 = factory.metrics();
    ASSERT_TRUE(eventually([&] { return factory.metrics().session_statements - m0.session_statements >= 9; }, 10s));
    for (auto& p : held) {
        EXPECT_FALSE(p.lost()) << p.key() << " " << p.slot();
    }
    pqxx::nontransaction tx(*db);
    EXPECT_EQ(tx.exec_params1("SELECT count(*) FROM simba_semaphore_status WHERE starts_with(key, $1)", prefix)[0]
                  .as<int>(),
              100)
        << "live on the server by the session's end";
    EXPECT_EQ(tx.exec_params1(rows, prefix)[2].as<std::string>(), versions) << "a permit row was written";
    held.clear();  // released, one statement each
    EXPECT_EQ(tx.exec_params1("SELECT count(*) FROM simba_semaphore_status WHERE starts_with(key, $1)", prefix)[0]
                  .as<int>(),
              0);
}

TEST(Sessions, APermitEndsWithItsSessionAndTheNextIsGrantedUnderANewOne) {
    // Keepalives blocked past the session's end: the permit is suspended,
    // then lost by its deadline; once the row is free the keepalive finds
    // the session ended, and the next grant comes under a new session.
    LogCapture logs;
    auto db = admin();
    auto blocker = admin();
    simba::pg::ContendServiceFactory factory("", test_options("sess-permit-end"));
    simba::Semaphore sem(factory, "worker");
    const auto key = unique_name("sess-permit-end");
    auto p = sem.try_acquire(key, 1, 900ms);
    ASSERT_TRUE(p);
    std::atomic<bool> suspended{false};
    std::promise<SteadyClock::time_point> lost;
    auto lost_at = lost.get_future();
    p->on_suspended([&](SteadyClock::time_point) { suspended = true; });
    p->on_lost([&] { lost.set_value(SteadyClock::now()); });
    const std::string session_of = "SELECT session_id::text FROM simba_semaphore_permit WHERE key = $1";
    std::string first_session;
    {
        pqxx::work tx(*blocker);
        first_session = tx.exec_params1(session_of, key)[0].as<std::string>();
        tx.exec_params("SELECT 1 FROM simba_session_lease WHERE session_id = $1::uuid FOR UPDATE", first_session);
        ASSERT_EQ(lost_at.wait_for(10s), std::future_status::ready) << "never lost at the deadline";
        EXPECT_TRUE(suspended.load()) << "no on_suspended before the loss";
        EXPECT_TRUE(p->lost());
        ASSERT_TRUE(eventually([&] { return session_ended(*db, first_session); }, 5s));
        tx.abort();
    }
    std::optional<simba::Permit> next;
    // One attempt each; the blocked keepalives made the watchdog cut the
    // connection, so an attempt may meet it going down (ConnectionError:
    // one attempt, its outcome unknown) before the reconnect.
    ASSERT_TRUE(eventually(
        [&] {
            try {
                return (next = sem.try_acquire(key, 1, 900ms)).has_value();
            } catch (const simba::ConnectionError&) {
                return false;
            }
        },
        5s));
    EXPECT_GT(next->fence(), p->fence());
    EXPECT_FALSE(p->release()) << "a lost permit is not released";
    pqxx::nontransaction tx(*db);
    EXPECT_NE(tx.exec_params1(session_of, key)[0].as<std::string>(), first_session);
    // The factory lets the dead session go: a keepalive hears it ended, or,
    // its permit lost first, the session is closed as unused (which one
    // depends on timing: under ctest -j3 the close came first).
    EXPECT_TRUE(eventually(
        [&] {
            return logs.count_containing("has ended on the server") >= 1 ||
                   logs.count_containing("closed session " + first_session) >= 1;
        },
        2s));
}

TEST(Sessions, WhatAStopCouldNotReleaseIsReleasedOnceTheConnectionIsBack) {
    // A session's keepalives would keep it for good (other tenures keep the
    // session in use): the release is owed and sent after the reconnect.
    auto db = admin();
    ScratchDatabase scratch(*db, "owed");
    auto options = test_options("owed");
    simba::pg::ContendServiceFactory factory(scratch.conninfo(), options);
    pqxx::connection c(scratch.conninfo());
    const auto base = unique_name("owed");
    simba::Locker stays(factory, base + "-stays", "S", lease(2000ms, 1000ms));
    simba::Locker goes(factory, base + "-goes", "G", lease(2000ms, 1000ms));
    simba::SharedLocker rw(factory, base + "-rw", "R", lease(2000ms, 1000ms));
    simba::Semaphore pool(factory, "P");
    stays.lock();
    goes.lock();
    rw.lock();
    auto permit = pool.try_acquire(base + "-pool", 1, 3000ms);
    ASSERT_TRUE(permit);
    std::thread cut([&] {
        scratch.cut_off(options.application_name);
        std::this_thread::sleep_for(800ms);  // the outage
        scratch.refuse_connections(false);
    });
    ASSERT_TRUE(eventually([&] { return !factory.connected(); }, 2s));
    goes.unlock();  // their releases fail: no connection
    rw.unlock();
    EXPECT_FALSE(permit->release());
    cut.join();
    EXPECT_TRUE(eventually([&] {
        pqxx::nontransaction tx(c);
        return tx.exec_params1("SELECT (SELECT owner_id IS NULL FROM simba_mutex_status WHERE mutex = $1)"
                               " AND (SELECT mode = 'free' FROM simba_rwlock_status WHERE rwlock = $2)"
                               " AND NOT EXISTS (SELECT FROM simba_semaphore_status WHERE key = $3)",
                               base + "-goes", base + "-rw", base + "-pool")[0]
            .as<bool>();
    }, 10s)) << "released after the reconnect, though the session lives on";
    EXPECT_TRUE(stays.is_owner());
    EXPECT_EQ(owner_of(c, base + "-stays"), "S");
    goes.lock();  // taken again at once: nothing of the old tenure is left
    EXPECT_TRUE(goes.is_owner());
}
