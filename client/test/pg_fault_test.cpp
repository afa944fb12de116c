// The factory under the network faults production brings, injected by
// simba_fault_proxy (test/fault_proxy) between the factory and a real
// server: a blackholed statement connection, a blackholed LISTEN
// connection, a whole server that stops answering, and a two-host string
// whose first host hangs. Each test states the bound it holds the factory to
// (docs/design.md, "Deadlines"). Runs on a cluster of its own that also
// listens on TCP (SIMBA_CLUSTER_TCP=1), so the proxy's connections can be
// told apart by port in pg_stat_activity.
#include <cstdio>

#include "fault_proxy.hpp"

using namespace simba_test;
using simba::MutexState;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

long long ms(SteadyClock::duration d) { return duration_cast<milliseconds>(d).count(); }

/// The server-side client_ports of the factory's backends: the LISTEN ones
/// (`listen`) or the statement ones. A hung connection's backend stays
/// until the server hears of it, so there may be more than one.
std::vector<int> backend_ports(pqxx::connection& db, const std::string& app, bool listen) {
    pqxx::nontransaction tx(db);
    auto r = tx.exec_params("SELECT client_port FROM pg_stat_activity WHERE application_name = $1"
                            " AND (query LIKE 'LISTEN%') = $2 ORDER BY backend_start",
                            app, listen);
    std::vector<int> out;
    for (const auto& row : r) out.push_back(row[0].as<int>());
    return out;
}

}  // namespace

TEST(Faults, OwnersOwnAgainWithinALeaseOfAHungStatementConnection) {
    // The statement connection stops answering; new connections still go
    // through. The watchdog cuts the hung renewal at the lease deadline it
    // serves, the factory reconnects and its owners own again within
    // lease + 2 s of the hang.
    REQUIRE_TCP();
    LogCapture logs;
    FaultProxy proxy(tcp_port());
    auto db = admin();
    simba::pg::ContendServiceFactory factory(proxy.conninfo(), fault_options("hungstmt"));
    auto a = std::make_shared<Recorder>(unique_name("hungstmt-a"), "A");
    auto b = std::make_shared<Recorder>(unique_name("hungstmt-b"), "B");
    auto sa = factory.create(a, lease(1000ms, 1000ms));
    auto sb = factory.create(b, lease(1000ms, 1000ms));
    sa->start();
    sb->start();
    ASSERT_TRUE(eventually([&] { return sa->is_owner() && sb->is_owner() && factory.connected(); }, 10s));
    const auto ports = backend_ports(*db, factory.application_name(), false);
    ASSERT_EQ(ports.size(), 1u);
    ASSERT_EQ(proxy.command("hang " + std::to_string(ports[0])), "ok\n");
    const auto t0 = SteadyClock::now();
    // Both lose their lease (nothing renews it), then own again on a new connection.
    ASSERT_TRUE(a->wait([](auto& ev) { return ev.size() >= 3; }, 10s));
    ASSERT_TRUE(b->wait([](auto& ev) { return ev.size() >= 3; }, 10s));
    const auto back = std::max(a->events()[2].at, b->events()[2].at);
    EXPECT_TRUE(a->events()[2].acquired && b->events()[2].acquired);
    EXPECT_GE(factory.connects(), 2u);
    EXPECT_LE(ms(back - t0), ms(2000ms + 2000ms)) << "owners own again within lease + 2 s of the hang";
    // The hung renewal was cut at the lease deadline it served (about 1 s
    // after it was sent), not at the statement deadline (1.5 s).
    EXPECT_GE(logs.count_containing("got no answer within"), 1);
    EXPECT_EQ(logs.count_containing("got no answer within 1500 ms"), 0);
    std::printf("owners again %lld ms after the hang\n", static_cast<long long>(duration_cast<milliseconds>(back - t0).count()));
    sa->stop();
    sb->stop();
}

TEST(Faults, StopIsBoundedByTheStatementDeadlineWhenTheServerStopsAnswering) {
    // Every connection, and every new one, is blackholed: stop() of a
    // service and the destructor of a Locker return within the statement
    // deadline (statement_timeout and a half) + 100 ms, however long the
    // server stays silent; reconnects meanwhile do not hold callers.
    REQUIRE_TCP();
    FaultProxy proxy(tcp_port());
    auto db = admin();  // creates the extension
    auto opts = fault_options("blackholed");
    opts.statement_timeout = 1000ms;
    simba::pg::ContendServiceFactory factory(proxy.conninfo(), opts);
    auto a = std::make_shared<Recorder>(unique_name("blackholed-a"), "A");
    auto c = std::make_shared<Recorder>(unique_name("blackholed-c"), "C");
    auto sa = factory.create(a, lease(10000ms, 5000ms));
    auto sc = factory.create(c, lease(10000ms, 5000ms));
    sa->start();
    sc->start();
    ASSERT_TRUE(eventually([&] { return sa->is_owner() && sc->is_owner() && factory.connected(); }, 10s));
    const auto deadline = factory.statement_timeout() * 3 / 2 + 100ms;
    ASSERT_EQ(proxy.command("blackhole"), "ok\n");
    auto t = SteadyClock::now();
    sc->stop();  // its release hangs until the watchdog cuts it
    EXPECT_LE(ms(SteadyClock::now() - t), ms(deadline));
    // The factory now reconnects into the blackhole (connect_timeout 2 s per
    // attempt): stop() does not wait for that either.
    ASSERT_TRUE(eventually([&] { return !factory.connected(); }, 5s));
    t = SteadyClock::now();
    sa->stop();
    EXPECT_LE(ms(SteadyClock::now() - t), ms(deadline));
    {
        simba::Locker locker(factory, unique_name("blackholed-l"), "L", lease(1000ms, 500ms));
        t = SteadyClock::now();
        EXPECT_THROW(locker.acquire(200ms), simba::TimeoutError);
        EXPECT_LE(ms(SteadyClock::now() - t), ms(200ms + deadline));
        t = SteadyClock::now();
    }
    EXPECT_LE(ms(SteadyClock::now() - t), ms(deadline)) << "~Locker";
    EXPECT_EQ(proxy.command("pass"), "ok\n");
}

TEST(Faults, ALockerReleasedWhileStartingNeverTakesTheLockAfterwards) {
    // release() from another thread while acquire() is still starting its
    // service (its first round trip hangs here): release() waits for the
    // start and stops the service, so acquire() fails instead of taking the
    // lock once the server answers again.
    REQUIRE_TCP();
    FaultProxy proxy(tcp_port());
    auto db = admin();
    auto opts = fault_options("starting");
    opts.statement_timeout = 1000ms;
    simba::pg::ContendServiceFactory factory(proxy.conninfo(), opts);
    ASSERT_TRUE(factory.wait_connected(10s));
    const auto m = unique_name("starting");
    simba::Locker locker(factory, m, "L", lease(2000ms, 1000ms));
    ASSERT_EQ(proxy.command("blackhole"), "ok\n");
    // Statements sent so far: acquires, and the session's open or keepalive.
    auto statements = [&] {
        const auto m = factory.metrics();
        return m.acquire_statements + m.session_statements;
    };
    const auto sent = statements();
    std::atomic<int> outcome{0};  // 1: acquired, 2: IllegalStateError
    std::thread acquirer([&] {
        try {
            locker.acquire();
            outcome = 1;
        } catch (const simba::IllegalStateError&) {
            outcome = 2;
        }
    });
    // The first attempt is on the wire (and hangs): acquire() is starting.
    ASSERT_TRUE(eventually([&] { return statements() > sent; }, 5s));
    locker.release();
    EXPECT_EQ(proxy.command("pass"), "ok\n");
    ASSERT_TRUE(eventually([&] { return outcome.load() != 0; }, 10s));
    acquirer.join();
    EXPECT_EQ(outcome.load(), 2) << "acquire() gave up: released while acquiring";
    EXPECT_FALSE(locker.is_owner());
    // Nobody holds it: a contender on a healthy factory takes it at once.
    simba::pg::ContendServiceFactory other("", test_options("starting-other"));
    simba::Locker taker(other, m, "T", lease(2000ms, 1000ms));
    EXPECT_NO_THROW(taker.acquire(3000ms));
}

TEST(Faults, WithWaitForServerLockWaitsForAServerNotYetReachable) {
    // A service started before its database (FactoryOptions::wait_for_server):
    // every connect hangs until the proxy passes; lock() waits meanwhile
    // instead of throwing the setup mistake (pg.LockerErrors.NoServer), and
    // takes the lock once the server answers.
    REQUIRE_TCP();
    FaultProxy proxy(tcp_port(), true);
    LogCapture logs;
    auto opts = fault_options("wait-server");
    opts.wait_for_server = true;
    simba::pg::ContendServiceFactory factory(proxy.conninfo(), opts);
    simba::Locker locker(factory, unique_name("wait-server"), "L", lease(2000ms, 1000ms));
    std::atomic<int> outcome{0};  // 1: locked, 2: threw
    std::thread locking([&] {
        try {
            locker.lock();
            outcome = 1;
        } catch (const std::exception& e) {
            std::printf("lock() threw: %s\n", e.what());
            outcome = 2;
        }
    });
    // said once (a warning), each retry after at debug level
    ASSERT_TRUE(eventually([&] { return logs.count_containing("connect failed") >= 1; }, 15s));
    EXPECT_EQ(logs.count_containing("waiting for the server"), 1);
    EXPECT_EQ(logs.messages(simba::LogLevel::warning).size(), 1u);
    EXPECT_EQ(outcome.load(), 0) << "lock() gave up while the server could not be reached";
    EXPECT_EQ(proxy.command("pass"), "ok\n");
    EXPECT_TRUE(eventually([&] { return outcome.load() != 0; }, 15s));
    if (outcome.load() == 0) locker.cancel();
    locking.join();
    EXPECT_EQ(outcome.load(), 1);
    EXPECT_TRUE(locker.is_owner());
}

TEST(Faults, ABlackholedListenConnectionIsReplacedAndPushWakeUpsResume) {
    // LISTEN is idle by nature: nothing but the factory's ping notices it
    // hung. Within ping interval + statement deadline (+ reconnect) a new
    // LISTEN connection is in place, and a release reaches a waiter at once
    // again instead of at its next poll (a 20 s lease here).
    REQUIRE_TCP();
    FaultProxy proxy(tcp_port());
    auto db = admin();
    simba::pg::ContendServiceFactory owner_factory("", test_options("listen-owner"));
    auto opts = fault_options("listen-waiter");
    opts.statement_timeout = 1000ms;
    simba::pg::ContendServiceFactory waiter_factory(proxy.conninfo(), opts);
    const auto m = unique_name("hunglisten");
    auto o = std::make_shared<Recorder>(m, "O");
    auto w = std::make_shared<Recorder>(m, "W");
    auto so = owner_factory.create(o, lease(20000ms, 10000ms));
    auto sw = waiter_factory.create(w, lease(20000ms, 10000ms));
    so->start();
    ASSERT_TRUE(eventually([&] { return so->is_owner(); }, 10s));
    sw->start();
    ASSERT_TRUE(waiter_factory.wait_connected(10s));
    const auto listening = backend_ports(*db, waiter_factory.application_name(), true);
    ASSERT_EQ(listening.size(), 1u);
    const int hung = listening[0];
    ASSERT_EQ(proxy.command("hang " + std::to_string(hung)), "ok\n");
    const auto t0 = SteadyClock::now();
    // A LISTEN backend of the waiter's other than the hung one.
    ASSERT_TRUE(eventually(
        [&] {
            auto ports = backend_ports(*db, waiter_factory.application_name(), true);
            return !ports.empty() && ports.back() != hung && waiter_factory.connected();
        },
        10s));
    const auto replaced = SteadyClock::now() - t0;
    EXPECT_LE(ms(replaced), ms(opts.listen_ping_interval + 1500ms + 1000ms)) << "ping interval + deadline + reconnect";
    EXPECT_EQ(waiter_factory.connects(), 1u) << "the statement connection carried on";
    const auto t1 = SteadyClock::now();
    so->stop();
    ASSERT_TRUE(w->wait([](auto& ev) { return !ev.empty(); }, 15s));
    EXPECT_LE(ms(w->events()[0].at - t1), ms(2000ms)) << "push wake-up, not the next poll";
    std::printf("LISTEN replaced %lld ms after the hang; handoff %lld ms\n",
                static_cast<long long>(duration_cast<milliseconds>(replaced).count()),
                static_cast<long long>(duration_cast<milliseconds>(w->events()[0].at - t1).count()));
    sw->stop();
}

TEST(Faults, ATwoHostStringMovesPastAFirstHostThatHangs) {
    // The first host accepts and never answers; libpq gives it
    // connect_timeout and goes on to the second, which the factory reaches
    // within connect_timeout + 1 s, LISTEN included.
    REQUIRE_TCP();
    FaultProxy hanging(tcp_port(), true);
    auto db = admin();  // creates the extension
    auto opts = fault_options("twohost");
    const auto t0 = SteadyClock::now();
    simba::pg::ContendServiceFactory factory("host=127.0.0.1,127.0.0.1 port=" + std::to_string(hanging.port()) + "," +
                                                 std::to_string(tcp_port()),
                                             opts);
    ASSERT_TRUE(factory.wait_connected(10s));
    const auto took = SteadyClock::now() - t0;
    EXPECT_GE(ms(took), ms(opts.connect_timeout - 100ms)) << "the first host was tried";
    EXPECT_LE(ms(took), ms(opts.connect_timeout + 1000ms));
    std::printf("second host reached in %lld ms\n", static_cast<long long>(duration_cast<milliseconds>(took).count()));
    auto a = std::make_shared<Recorder>(unique_name("twohost"), "A");
    auto sa = factory.create(a, lease(1000ms, 500ms));
    sa->start();
    EXPECT_TRUE(eventually([&] { return sa->is_owner(); }, 5s));
    sa->stop();
}
