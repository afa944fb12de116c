// The factory and the semaphore through a transaction-pooling PgBouncer
// (test/with-pgbouncer.sh, SIMBA_POOLER_DSN): statements go through the
// pooler unprepared, LISTEN over a direct connection or not at all.
#include <libpq-fe.h>

#include <algorithm>
#include <cstdlib>
#include <future>

#include "pg_support.hpp"

using namespace simba_test;

namespace {

std::string pooler() {
    const char* dsn = std::getenv("SIMBA_POOLER_DSN");
    return dsn ? dsn : "";
}

/// The server itself, bypassing the pooler (libpq's environment).
std::string direct() { return std::string("host=") + std::getenv("PGHOST") + " port=" + std::getenv("PGPORT"); }

/// Clients the pooler has with this application_name, from its admin console
/// (plain libpq: libpqxx refuses the console's own "server version").
int pooler_clients(const std::string& app) {
    PGconn* c = PQconnectdb((pooler() + " dbname=pgbouncer").c_str());
    int n = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult* r = PQexec(c, "SHOW CLIENTS");
        const int col = PQfnumber(r, "application_name");
        if (PQresultStatus(r) == PGRES_TUPLES_OK && col >= 0) {
            n = 0;
            for (int i = 0; i < PQntuples(r); ++i) n += app == PQgetvalue(r, i, col);
        }
        PQclear(r);
    }
    PQfinish(c);
    return n;
}

simba::pg::FactoryOptions pooled(const std::string& app, const std::string& listen) {
    auto o = test_options(app);
    o.pooled = true;
    o.listen_conninfo = listen;
    return o;
}

/// Waits for a Recorder's first on_acquired; returns when it ran.
SteadyClock::time_point acquired_at(Recorder& r, std::chrono::milliseconds timeout) {
    if (!r.wait([](auto& ev) { return !ev.empty() && ev.back().acquired; }, timeout)) return {};
    return r.events().back().at;
}

}  // namespace

TEST(Pooler, StatementsThroughThePoolerAndNotifyOverADirectConnection) {
    ASSERT_FALSE(pooler().empty()) << "run inside test/with-pgbouncer.sh";
    auto db = admin();
    const auto m = unique_name("pooled");
    const auto opts = pooled("pooled", direct());
    simba::pg::ContendServiceFactory fa(pooler(), opts), fb(pooler(), opts);
    ASSERT_TRUE(fa.wait_connected(5s));
    ASSERT_TRUE(fb.wait_connected(5s));
    EXPECT_EQ(fa.connection_count(), 2);
    EXPECT_EQ(pooler_clients(opts.application_name), 2) << "one statement connection per factory goes through the pooler";

    // Long leases: only the NOTIFY can hand over quickly.
    auto a = std::make_shared<Recorder>(m, "A");
    auto b = std::make_shared<Recorder>(m, "B");
    auto sa = fa.create(a, lease(5s, 2s));
    auto sb = fb.create(b, lease(5s, 2s));
    sa->start();
    ASSERT_NE(acquired_at(*a, 10s), SteadyClock::time_point{});
    sb->start();
    // Several rounds through the pool: no "prepared statement does not exist".
    for (int round = 0; round < 3; ++round) {
        Recorder& to = round % 2 == 0 ? *b : *a;
        simba::MutexContendService& sfrom = round % 2 == 0 ? *sa : *sb;
        const auto before = to.acquired_count();
        const auto released = SteadyClock::now();
        sfrom.stop();
        auto acquisitions = [](const std::vector<Recorder::Event>& ev) {
            return std::count_if(ev.begin(), ev.end(), [](auto& e) { return e.acquired; });
        };
        ASSERT_TRUE(to.wait([&](auto& ev) { return acquisitions(ev) > before; }, 10s)) << "round " << round;
        EXPECT_LT(to.events().back().at - released, 1000ms) << "handoff waited for the poll, not the NOTIFY";
        sfrom.start();
    }
    sa->stop();
    sb->stop();
    pqxx::nontransaction tx(*db);
    EXPECT_TRUE(tx.exec_params1("SELECT owner_id IS NULL FROM simba_mutex WHERE mutex = $1", m)[0].as<bool>());
}

TEST(Pooler, PollOnlyWithoutListenStillHandsOverAtThePoll) {
    auto db = admin();
    const auto m = unique_name("pollonly");
    const auto opts = pooled("pollonly", "none");
    simba::pg::ContendServiceFactory fa(pooler(), opts), fb(pooler(), opts);
    ASSERT_TRUE(fa.wait_connected(5s));
    EXPECT_EQ(fa.connection_count(), 1) << "no LISTEN connection";
    auto a = std::make_shared<Recorder>(m, "A");
    auto b = std::make_shared<Recorder>(m, "B");
    auto sa = fa.create(a, lease(300ms, 200ms));
    auto sb = fb.create(b, lease(300ms, 200ms));
    sa->start();
    ASSERT_NE(acquired_at(*a, 10s), SteadyClock::time_point{});
    sb->start();
    sa->stop();
    // B finds the mutex free at its next poll: transition_at + jitter at most.
    ASSERT_NE(acquired_at(*b, 5s), SteadyClock::time_point{});
    EXPECT_GT(sb->fence(), 0);
    sb->stop();
}

// pooled without listen_conninfo: a LISTEN through the pooler would hear
// nothing and leave simba_wait's registrations on a pooled server
// connection, so the factory opens none, says so, and waiters poll.
TEST(Pooler, PooledWithoutListenConninfoOpensNoListenConnection) {
    LogCapture logs;
    const auto opts = pooled("nolisten", "");
    simba::pg::ContendServiceFactory fa(pooler(), opts);
    ASSERT_TRUE(fa.wait_connected(5s));
    EXPECT_EQ(fa.connection_count(), 1) << "no LISTEN connection through the pooler";
    EXPECT_EQ(logs.count_containing("pooled without listen_conninfo"), 1);
    EXPECT_EQ(pooler_clients(opts.application_name), 1);
}

TEST(Pooler, SemaphoreThroughThePooler) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory(pooler(), pooled("poolsem", direct()));
    simba::Semaphore sem(factory);
    const auto key = unique_name("poolsem");
    // A ttl of 3 s rides out a client stalled for about 2 s: under TSan in CI
    // a 1 s permit once ran out on the server while its client still had it
    // live, and its release() rightly said false.
    auto p = sem.try_acquire(key, 1, 3s);
    ASSERT_TRUE(p);
    EXPECT_FALSE(sem.try_acquire(key, 1, 3s));
    // The permit's end on the server, in seconds (0 once it is not live).
    const auto server_end = [&] {
        pqxx::nontransaction tx(*db);
        const auto r = tx.exec_params("SELECT extract(epoch FROM expires_at)::float8 FROM simba_semaphore_status"
                                      " WHERE key = $1",
                                      key);
        return r.empty() ? 0.0 : r[0][0].as<double>();
    };
    const double granted_end = server_end();
    ASSERT_GT(granted_end, 0.0);
    // Kept alive through the pool: the server's end moves on by two keepalives.
    EXPECT_TRUE(eventually([&] { return server_end() >= granted_end + 1.5; }, 6s));
    EXPECT_FALSE(p->lost());
    EXPECT_TRUE(p->release());
    EXPECT_TRUE(sem.try_acquire(key, 1, 1s));
}
