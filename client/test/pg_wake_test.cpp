// Wake-ups under simba.notify = registered (docs/design.md, "Wake-ups"),
// against the throwaway cluster (test/pg-run.sh): each test runs in a
// database of its own whose default the DBA set to registered. A waiter of
// the client is woken by the release at once (its poll is tens of seconds
// away, so only the NOTIFY can do it); an owner alone is not registered, so
// its release sends no NOTIFY at all.
#include <future>

#include "pg_support.hpp"

using namespace simba_test;

namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

/// A database of the test's own with simba.notify = registered for every
/// connection to it (as a DBA would set it).
struct RegisteredDatabase {
    std::unique_ptr<pqxx::connection> root = admin();
    ScratchDatabase scratch{*root, "wake"};
    std::unique_ptr<pqxx::connection> db;
    RegisteredDatabase() {
        set_database_setting(*root, scratch, "notify", "registered");
        db = admin(scratch.conninfo());
    }
    /// How many registrations (one per bucket and connection) the database holds now.
    int registrations() {
        pqxx::nontransaction tx(*db);
        return tx.exec1("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397312834 "
                        "AND mode = 'ShareLock' AND granted AND database = "
                        "(SELECT oid FROM pg_database WHERE datname = current_database())")[0]
            .as<int>();
    }
};

/// A plain `LISTEN simba` that does not register: hears a release's NOTIFY
/// only if the release sent one (it goes to every listener or to none).
/// NOTIFYs arrive in commit order.
struct PlainListener {
    std::unique_ptr<pqxx::connection> conn;
    std::vector<std::string> heard;
    struct Receiver : pqxx::notification_receiver {
        std::vector<std::string>& out;
        Receiver(pqxx::connection& c, std::vector<std::string>& o) : notification_receiver(c, "simba"), out(o) {}
        void operator()(const std::string& payload, int) override { out.push_back(payload); }
    };
    std::unique_ptr<Receiver> receiver;
    explicit PlainListener(const std::string& conninfo) : conn(admin(conninfo)) {
        receiver = std::make_unique<Receiver>(*conn, heard);
        conn->await_notification(0, 0);  // LISTEN in place
    }
    /// The first payload heard after `marker` was sent from `c` (the
    /// payloads before the marker, then the marker itself).
    std::vector<std::string> until_marker(pqxx::connection& c) {
        {
            pqxx::nontransaction tx(c);
            tx.exec0("NOTIFY simba, 'marker'");
        }
        eventually(
            [&] {
                conn->await_notification(0, 10000);
                return !heard.empty() && heard.back() == "marker";
            },
            10s);
        return heard;
    }
};

}  // namespace

TEST(Wake, AWaitingServiceIsWokenByAReleaseUnderRegistered) {
    RegisteredDatabase rd;
    {
        pqxx::nontransaction tx(*rd.db);
        ASSERT_EQ(tx.exec1(portable_edition() ? "SELECT notify FROM simba_settings" : "SHOW simba.notify")[0]
                      .as<std::string>(),
                  "registered");
    }
    const auto m = unique_name("wake-svc");
    // A holds from SQL with a long lease: B's poll is about 40 s away.
    {
        pqxx::nontransaction tx(*rd.db);
        tx.exec_params1("SELECT owner_id FROM simba_acquire($1, 'A', '30s', '10s')", m);
    }
    simba::pg::ContendServiceFactory factory(rd.scratch.conninfo(), test_options("wake-svc"));
    auto b = std::make_shared<Recorder>(m, "B");
    auto sb = factory.create(b, lease(30000ms, 10000ms));
    sb->start();
    ASSERT_TRUE(eventually([&] { return sb->state().after.owner_id == "A"; }, 10s));
    // B lost, so it registers its wait: only then is the release sure to notify.
    ASSERT_TRUE(eventually([&] { return rd.registrations() == 1; }, 10s));
    PlainListener listener(rd.scratch.conninfo());
    const auto t0 = SteadyClock::now();
    {
        pqxx::nontransaction tx(*rd.db);
        ASSERT_TRUE(tx.exec_params1("SELECT simba_release($1, 'A')", m)[0].as<bool>());
    }
    EXPECT_EQ(listener.until_marker(*rd.db), (std::vector<std::string>{m, "marker"}))
        << "the release notified, since B was registered";
    ASSERT_TRUE(b->wait([](auto& ev) { return !ev.empty(); }, 20s));
    const auto woken = b->events().front().at - t0;
    std::printf("release -> B.on_acquired under registered: %lld ms\n",
                static_cast<long long>(duration_cast<milliseconds>(woken).count()));
    EXPECT_LT(woken, 3s) << "woken by the NOTIFY, not by its poll";
    // B owns now: its registration is dropped.
    EXPECT_TRUE(eventually([&] { return rd.registrations() == 0; }, 10s));
    sb->stop();
}

TEST(Wake, AReleaseNobodyWaitsForSendsNoNotify) {
    RegisteredDatabase rd;
    const auto m = unique_name("wake-alone");
    simba::pg::ContendServiceFactory factory(rd.scratch.conninfo(), test_options("wake-alone"));
    auto a = std::make_shared<Recorder>(m, "A");
    auto sa = factory.create(a, lease(30000ms, 10000ms));
    sa->start();
    ASSERT_TRUE(a->wait([](auto& ev) { return ev.size() == 1; }, 10s));
    ASSERT_TRUE(sa->is_owner());
    EXPECT_EQ(rd.registrations(), 0) << "an owner does not register";
    PlainListener listener(rd.scratch.conninfo());
    sa->stop();
    {
        pqxx::nontransaction tx(*rd.db);
        EXPECT_TRUE(tx.exec_params1("SELECT owner_id FROM simba_owner($1)", m)[0].is_null()) << "released";
    }
    EXPECT_EQ(listener.until_marker(*rd.db), std::vector<std::string>{"marker"}) << "the release sent no NOTIFY";
}

TEST(Wake, ASemaphoreWaiterIsWokenByAReleaseUnderRegistered) {
    RegisteredDatabase rd;
    const auto key = unique_name("wake-sem");
    std::string token;
    {
        pqxx::nontransaction tx(*rd.db);
        token = tx.exec_params1("SELECT token FROM simba_semaphore_acquire($1, 'other', 1, '60s')", key)[0]
                    .as<std::string>();
    }
    simba::pg::ContendServiceFactory factory(rd.scratch.conninfo(), test_options("wake-sem"));
    simba::SemaphoreOptions options;
    options.poll_interval = 30000ms;  // only the NOTIFY can wake it in time
    simba::Semaphore sem(factory, "worker", options);
    auto got = std::async(std::launch::async, [&] { return sem.acquire(key, 1, 10000ms, 20000ms); });
    ASSERT_TRUE(eventually([&] { return rd.registrations() == 1; }, 10s));
    const auto t0 = SteadyClock::now();
    {
        pqxx::nontransaction tx(*rd.db);
        ASSERT_TRUE(tx.exec_params1("SELECT simba_semaphore_release($1, $2::uuid)", key, token)[0].as<bool>());
    }
    ASSERT_EQ(got.wait_for(20s), std::future_status::ready);
    auto permit = got.get();
    const auto woken = SteadyClock::now() - t0;
    EXPECT_LT(woken, 3s) << "woken by the NOTIFY, not by its poll";
    EXPECT_TRUE(eventually([&] { return rd.registrations() == 0; }, 10s)) << "no longer waiting: dropped";
}

TEST(Wake, ARegistrationRefusedWhileItsBucketIsHeldIsSentAgainUntilItHolds) {
    // A stranger holds the name's bucket exclusively (any role may take
    // advisory locks): registrations are refused, but releases of the
    // bucket notify (their try-lock fails too), so waiters are still woken.
    // Once the stranger lets go, the client's retry registers the waiter.
    RegisteredDatabase rd;
    const auto m = unique_name("wake-refused");
    auto stranger = admin(rd.scratch.conninfo());
    int bucket = -1;
    {
        pqxx::nontransaction tx(*stranger);
        tx.exec_params("SELECT simba_wait(ARRAY[$1])", m);
        bucket = tx.exec1("SELECT objid::int FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397312834 "
                          "AND pid = pg_backend_pid()")[0]
                     .as<int>();
        tx.exec_params("SELECT simba_wait(ARRAY[$1], false)", m);
        tx.exec_params("SELECT pg_advisory_lock(1397312834, $1)", bucket);
        tx.exec_params1("SELECT owner_id FROM simba_acquire($1, 'A', '30s', '10s')", m);
    }
    LogCapture logs;
    simba::pg::ContendServiceFactory factory(rd.scratch.conninfo(), test_options("wake-refused"));
    auto b = std::make_shared<Recorder>(m, "B");
    auto c = std::make_shared<Recorder>(m, "C");
    auto sb = factory.create(b, lease(30000ms, 10000ms));
    auto sc = factory.create(c, lease(30000ms, 10000ms));
    sb->start();
    ASSERT_TRUE(eventually([&] { return sb->state().after.owner_id == "A"; }, 10s));
    // Refused again and again (each try waits 20 ms on the server, then
    // backs off): never registered while the stranger holds the bucket.
    const auto t_refused = SteadyClock::now() + 300ms;
    while (SteadyClock::now() < t_refused) ASSERT_EQ(rd.registrations(), 0);
    // Unregistered, B is still woken: the release could not take the bucket.
    auto t0 = SteadyClock::now();
    {
        pqxx::nontransaction tx(*rd.db);
        ASSERT_TRUE(tx.exec_params1("SELECT simba_release($1, 'A')", m)[0].as<bool>());
    }
    ASSERT_TRUE(b->wait([](auto& ev) { return !ev.empty(); }, 20s));
    EXPECT_LT(b->events().front().at - t0, 3s) << "woken by the NOTIFY, not by its poll";
    // C waits on B now; the stranger lets go, and C's registration gets through.
    sc->start();
    ASSERT_TRUE(eventually([&] { return sc->state().after.owner_id == "B"; }, 10s));
    {
        pqxx::nontransaction tx(*stranger);
        tx.exec_params("SELECT pg_advisory_unlock(1397312834, $1)", bucket);
    }
    ASSERT_TRUE(eventually([&] { return rd.registrations() == 1; }, 5s)) << "the refused registration was sent again";
    t0 = SteadyClock::now();
    sb->stop();
    ASSERT_TRUE(c->wait([](auto& ev) { return !ev.empty(); }, 20s));
    EXPECT_LT(c->events().front().at - t0, 3s) << "woken by the NOTIFY, not by its poll";
    EXPECT_EQ(logs.count_containing("LISTEN"), 0) << "a refusal is not a failure of the LISTEN connection";
    sc->stop();
}
