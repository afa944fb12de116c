// pg.Reconnect: issue 39. An administrator's pg_terminate_backend of a
// factory's two backends is what a PgBouncer or HAProxy restart, a failover
// or idle_session_timeout does to it. The factory must find both dead at
// once (not the statement connection at its next keepalive, a ttl later),
// reconnect both, and send what its holders owe as soon as it is back; and
// a holder that releases and exits right after must hand the lock over at
// once, not after its lease ran out as if it had crashed (the factory's
// destructor makes a bounded effort: FactoryOptions::shutdown_timeout).
//
// Before the fix: only the LISTEN connection reconnected; the release on
// the dead statement connection failed, was owed, and the destructor did
// not send it: the waiter got the lock 16 s (a default lease) later.

#include <future>
#include <optional>

#include "pg_support.hpp"

using namespace simba_test;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

long long ms(SteadyClock::duration d) { return duration_cast<milliseconds>(d).count(); }

/// pg_terminate_backend of every backend of `app` (only the statement
/// connection's with `statements_only`: the LISTEN one's last query is
/// LISTEN); returns once they are gone.
void terminate_backends(pqxx::connection& db, const std::string& app, bool statements_only = false) {
    std::vector<int> pids;
    {
        pqxx::nontransaction tx(db);
        for (const auto& r :
             tx.exec_params("SELECT pid FROM pg_stat_activity WHERE application_name = $1" +
                                std::string(statements_only ? " AND query NOT LIKE 'LISTEN%'" : ""),
                            app))
            pids.push_back(r[0].as<int>());
        for (int pid : pids) tx.exec_params("SELECT pg_terminate_backend($1)", pid);
    }
    ASSERT_EQ(pids.size(), statements_only ? 1u : 2u) << "the factory's backends";
    ASSERT_TRUE(eventually(
        [&] {
            pqxx::nontransaction tx(db);
            int left = 0;
            for (int pid : pids)
                left += tx.exec_params1("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)[0].as<int>();
            return left == 0;
        },
        5s));
}

/// What a holder of each kind does: take the lock, give it back.
struct Holder {
    std::function<void()> take;
    std::function<void()> give_back;  // unlock(), stop(), release()
    std::function<void()> destroy;
};

enum class Kind { locker, service, shared_locker, multi_locker, permit };

std::string kind_name(const ::testing::TestParamInfo<Kind>& p) {
    switch (p.param) {
    case Kind::locker: return "Locker";
    case Kind::service: return "Service";
    case Kind::shared_locker: return "SharedLocker";
    case Kind::multi_locker: return "MultiLocker";
    case Kind::permit: return "Permit";
    }
    return "?";
}

class ReleaseAndExit : public ::testing::TestWithParam<Kind> {};

}  // namespace

// A holder (default lease 10 s + 6 s) whose two backends were terminated
// releases and its factory is destroyed right after: another factory
// waiting for the lock gets it within about a second, not after 16 s.
TEST_P(ReleaseAndExit, AfterItsBackendsWereTerminatedHandsTheLockOverAtOnce) {
    const Kind kind = GetParam();
    auto db = admin();
    const auto m = unique_name("gone");
    auto opts = test_options("gone");
    // Its I/O thread would not reconnect before the process exits: what the
    // holder owes goes out only by the destructor's own effort.
    opts.reconnect_initial = 10s;
    opts.reconnect_max = 10s;
    auto holder_factory = std::make_unique<simba::pg::ContendServiceFactory>("", opts);
    simba::pg::ContendServiceFactory waiter_factory("", test_options("gone-waiter"));
    ASSERT_TRUE(holder_factory->wait_connected(10s));

    // The holder, and the waiter of the same kind in the other factory.
    Holder h;
    std::function<void()> wait_for_it;
    std::unique_ptr<simba::Locker> locker, waiter_locker;
    std::unique_ptr<simba::MutexContendService> service;
    std::shared_ptr<Recorder> rec;
    std::unique_ptr<simba::SharedLocker> shared, waiter_shared;
    std::unique_ptr<simba::MultiLocker> multi;
    std::unique_ptr<simba::Semaphore> sem, waiter_sem;
    std::optional<simba::Permit> permit;
    switch (kind) {
    case Kind::locker:
    case Kind::multi_locker:
    case Kind::service:
        if (kind == Kind::locker) {
            locker = std::make_unique<simba::Locker>(*holder_factory, m, "A");
            h = {[&] { locker->lock(); }, [&] { locker->unlock(); }, [&] { locker.reset(); }};
        } else if (kind == Kind::multi_locker) {
            multi = std::make_unique<simba::MultiLocker>(*holder_factory, std::vector<std::string>{m, m + "-b"}, "A");
            h = {[&] { multi->lock(); }, [&] { multi->unlock(); }, [&] { multi.reset(); }};
        } else {
            rec = std::make_shared<Recorder>(m, "A");
            service = holder_factory->create(rec, simba::ContendOptions{});
            h = {[&] {
                     service->start();
                     ASSERT_TRUE(service->wait_owner(SteadyClock::now() + 10s));
                 },
                 [&] { service->stop(); }, [&] { service.reset(); }};
        }
        waiter_locker = std::make_unique<simba::Locker>(waiter_factory, m, "B");
        wait_for_it = [&] { ASSERT_TRUE(waiter_locker->try_lock_for(30s)); };
        break;
    case Kind::shared_locker:
        shared = std::make_unique<simba::SharedLocker>(*holder_factory, m, "A");
        waiter_shared = std::make_unique<simba::SharedLocker>(waiter_factory, m, "B");
        h = {[&] { shared->lock(); }, [&] { shared->unlock(); }, [&] { shared.reset(); }};
        wait_for_it = [&] { ASSERT_TRUE(waiter_shared->try_lock_for(30s)); };
        break;
    case Kind::permit:
        sem = std::make_unique<simba::Semaphore>(*holder_factory, "A");
        waiter_sem = std::make_unique<simba::Semaphore>(waiter_factory, "B");
        h = {[&] {
                 permit = sem->try_acquire(m, 1, 16000ms);
                 ASSERT_TRUE(permit);
             },
             [&] { permit->release(); },
             [&] {
                 permit.reset();
                 sem.reset();
             }};
        wait_for_it = [&] { (void)waiter_sem->acquire(m, 1, 16000ms, 30000ms); };
        break;
    }
    h.take();
    ASSERT_FALSE(HasFatalFailure());

    std::atomic<bool> waiting{true};
    SteadyClock::time_point got{};
    std::thread waiter([&] {
        wait_for_it();
        got = SteadyClock::now();
        waiting = false;
    });
    terminate_backends(*db, opts.application_name);

    const auto t0 = SteadyClock::now();
    h.give_back();
    h.destroy();
    holder_factory.reset();  // the process exits
    const auto exited = SteadyClock::now() - t0;
    waiter.join();
    ASSERT_FALSE(waiting.load());
    const auto handover = got - t0;
    std::printf("%s: release and exit took %lld ms; the waiter had the lock %lld ms after the release\n",
                kind_name({kind, 0}).c_str(), ms(exited), ms(handover));
    EXPECT_LT(ms(handover), 2000) << "the lock was handed over as if its holder had crashed";
    EXPECT_LT(ms(exited), ms(opts.shutdown_timeout + 1500ms)) << "the shutdown's effort is bounded";
}

INSTANTIATE_TEST_SUITE_P(Kinds, ReleaseAndExit,
                         ::testing::Values(Kind::locker, Kind::service, Kind::shared_locker, Kind::multi_locker,
                                           Kind::permit),
                         kind_name);

// The factory lives on: losing the LISTEN connection to the server's
// pg_terminate_backend takes the statement connection with it at once
// (client/README.md, "Failures": either one drops both), so the release the holder
// owes goes out right after the reconnect, not at the next keepalive.
TEST(Reconnect, ALostListenConnectionTakesTheStatementConnectionWithIt) {
    auto db = admin();
    const auto m = unique_name("both");
    auto opts = test_options("both");
    simba::pg::ContendServiceFactory factory("", opts);
    simba::Locker a(factory, m, "A");  // default lease: the next keepalive is 7 s away
    a.lock();
    ASSERT_TRUE(factory.wait_connected(10s));
    ASSERT_EQ(factory.connects(), 1u);
    terminate_backends(*db, opts.application_name);
    const auto t0 = SteadyClock::now();
    EXPECT_TRUE(eventually([&] { return factory.connects() == 2 && factory.connected(); }, 1500ms))
        << "the statement connection was not reconnected with LISTEN";
    std::printf("both connections back %lld ms after the kill\n", ms(SteadyClock::now() - t0));
    EXPECT_TRUE(a.is_owner()) << "the session's keepalive after the reconnect kept the tenure";
    a.unlock();
    EXPECT_EQ(owner_of(*db, m), "") << "released by unlock() itself";
}

// Only the idle statement connection is terminated (idle_session_timeout,
// or a pooler dropping it): it is found dead on its socket, not at its next
// statement, and reconnected; the holder keeps its lock.
TEST(Reconnect, AnIdleStatementConnectionTheServerClosedIsFoundAtOnce) {
    auto db = admin();
    const auto m = unique_name("idle");
    auto opts = test_options("idle");
    simba::pg::ContendServiceFactory factory("", opts);
    simba::Locker a(factory, m, "A");
    a.lock();
    ASSERT_TRUE(factory.wait_connected(10s));
    ASSERT_EQ(factory.connects(), 1u);
    terminate_backends(*db, opts.application_name, true);
    const auto t0 = SteadyClock::now();
    EXPECT_TRUE(eventually([&] { return factory.connects() == 2 && factory.connected(); }, 1500ms))
        << "the dead statement connection was left for its next statement";
    std::printf("statement connection back %lld ms after the kill\n", ms(SteadyClock::now() - t0));
    EXPECT_TRUE(a.is_owner());
    const auto t1 = SteadyClock::now();
    a.unlock();
    EXPECT_LT(ms(SteadyClock::now() - t1), 1000);
    EXPECT_EQ(owner_of(*db, m), "") << "released by unlock() itself, on the new connection";
}

// idle_session_timeout on the server (1 s here, shorter than any renewal
// interval of a 10 s lease) closes both idle connections again and again:
// routine, not a fault. The holder keeps its lock, and the factory says
// nothing above info level, on its log or on stderr (libpq prints what the
// server says outside a reply there unless told otherwise).
TEST(Reconnect, IdleSessionTimeoutIsRoutine) {
    auto db = admin();
    ScratchDatabase scratch(*db, "idletimeout");
    {
        pqxx::nontransaction tx(*db);
        tx.exec0("ALTER DATABASE " + tx.quote_name(scratch.conninfo().substr(7)) + " SET idle_session_timeout = '1s'");
    }
    auto opts = test_options("idletimeout");
    LogCapture logs;
    ::testing::internal::CaptureStderr();
    {
        simba::pg::ContendServiceFactory factory(scratch.conninfo(), opts);
        simba::Locker a(factory, unique_name("idletimeout"), "A");
        a.lock();
        EXPECT_TRUE(eventually([&] { return factory.connects() >= 4; }, 10s)) << "closed 3 times";
        EXPECT_TRUE(a.is_owner());
        a.unlock();
    }
    const auto err = ::testing::internal::GetCapturedStderr();  // LogCapture echoes the log there as "[simba ..."
    EXPECT_EQ(err.find("\nFATAL:"), std::string::npos) << err;
    EXPECT_NE(err.rfind("FATAL:", 0), 0u) << err;
    EXPECT_EQ(logs.messages(simba::LogLevel::warning), std::vector<std::string>{});
    EXPECT_GE(logs.count_containing("idle-session timeout"), 3) << "the reason, at info level";
}

// The server cannot be reached when the factory is destroyed with a
// release owed and its session open: the destructor tries once, gives up
// within FactoryOptions::shutdown_timeout and says what it left undone
// (the session's lease then runs out on the server).
TEST(Reconnect, ShutdownGivesUpWithinItsLimitAndSaysWhatItCouldNotSend) {
    auto db = admin();
    ScratchDatabase scratch(*db, "unreachable");
    auto opts = test_options("unreachable");
    opts.reconnect_initial = 10s;  // only the destructor's own reconnect
    opts.reconnect_max = 10s;
    opts.shutdown_timeout = 1000ms;
    auto factory = std::make_unique<simba::pg::ContendServiceFactory>(scratch.conninfo(), opts);
    const auto m = unique_name("unreachable");
    auto locker = std::make_unique<simba::Locker>(*factory, m, "A");
    locker->lock();
    ASSERT_TRUE(factory->wait_connected(10s));
    LogCapture logs;
    ASSERT_EQ(scratch.cut_off(opts.application_name), 2);  // and no new connections
    locker->unlock();
    locker.reset();
    const auto t0 = SteadyClock::now();
    factory.reset();
    const auto took = SteadyClock::now() - t0;
    std::printf("shutdown gave up after %lld ms\n", ms(took));
    EXPECT_LT(ms(took), ms(opts.shutdown_timeout + 1000ms));
    EXPECT_GE(logs.count_containing("not sent before the factory shut down"), 1);
    EXPECT_GE(logs.count_containing("not closed at shutdown"), 1);
    scratch.refuse_connections(false);
}

TEST(Reconnect, ANegativeShutdownTimeoutIsRefused) {
    auto opts = test_options("negative");
    opts.shutdown_timeout = -1ms;
    EXPECT_THROW(simba::pg::ContendServiceFactory("", opts), simba::InvalidArgumentError);
}
