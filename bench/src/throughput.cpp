// Benchmark 1: acquire throughput, ops/s at 1, 2 and 8 clients over 1,000 mutexes.
//
// Every variant runs the same closed loop on one connection per client
// thread: pick a mutex uniformly at random, try to acquire it, release it if
// won ("pair"); or renew one of the client's own leases ("renew"). Variants
// alternate within each round (the order rotates between rounds) and the
// result is the median over rounds, so machine noise hits all alike.
//
//   simba       SELECT * FROM simba_acquire(...)   + SELECT simba_release(...)
//   portable    the same two calls of the portable edition (portable/,
//               --portable PATH installs its script in schema simba_portable)
//   simba_always  the same under SET simba.notify = always (pair only; a
//               superuser's connection): every release sends its NOTIFY, as
//               until 1.4 made registered the default (docs/reference.md, "Wake-ups")
//   floor       the extension's conditional UPDATE ... RETURNING as plain SQL
//               (+ its release UPDATE with pg_notify), clock_timestamp() as t
//   floor_trig  the same statements on simba_mutex itself (its triggers fire):
//               simba / floor_trig is the function path alone, same table
//   jdbc        Simba's JDBC protocol as pgjdbc puts it on the wire:
//               [BEGIN + UPDATE] in one round trip; SELECT owner (+ server
//               time); COMMIT (+ release UPDATE in autocommit). See jdbc_* below.
//   shedlock    ShedLock's PostgreSQL server-time statements: INSERT ... ON
//               CONFLICT DO UPDATE ... WHERE lock_until <= now; UPDATE unlock;
//               renew = its extend UPDATE
//   advisory    pg_try_advisory_lock + pg_advisory_unlock (no lease)
//   redis       SET NX PX + Lua compare-and-delete (EVALSHA); renew = Lua
//               compare-and-pexpire
//   simba_batch (renew only) one statement renews up to 100 of the client's
//               leases: unnest(names) x LATERAL simba_acquire; ops = leases
//   simba_call  (diagnostic) SELECT simba_acquire(...) without FROM
// Further diagnostics, run only when named in --only (pair mode unless noted):
//   simba_client     the client library's own statement (kAcquireSql of
//                    client/src/statements.cpp: every column, times as
//                    extract(epoch ...) microseconds); pair and renew
//   simba_nonotify   simba_acquire + the extension's release UPDATE as plain
//                    SQL on simba_mutex, no pg_notify (simba / this = the
//                    release function path + NOTIFY at commit)
//   floor_nonotify   floor without the pg_notify (floor / this = NOTIFY alone)
//   jdbc_notify      jdbc whose release also does pg_notify
//   jdbc_begin_rt    jdbc with BEGIN in a round trip of its own (4 round trips
//                    per acquire, the replay before it was made faithful)
//
// --host H [--port P] connects every PostgreSQL variant there instead of
// libpq's environment (PGHOST...): e.g. --host 127.0.0.1 for TCP loopback,
// the transport pgjdbc is limited to (test/with-cluster.sh listens on TCP with
// SIMBA_CLUSTER_TCP=1 and exports the port as SIMBA_PG_TCP_PORT).
// --ops N makes every client do exactly N ops per run instead of a timed run
// (for instruction counts under valgrind; ops/s then include the set-up).
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <random>

#include "common.hpp"
#include "redis_conn.hpp"

using namespace bench;

namespace {

const int kMaxBatch = 100;

struct Ctx {
    int thread = 0;
    int threads = 1;
    int mutexes = 1000;
    std::string id;                   // contender id of this thread
    std::vector<std::string> names;   // "bm<i>"
    std::vector<int> own;             // renew mode: mutex indexes owned by this thread
    std::mt19937_64 rng;
    std::unique_ptr<Conn> pg;
    std::unique_ptr<Redis> redis;
    std::string del_sha, renew_sha;
    std::string batch_array;          // renew batch: '{bm1,bm2,...}' chunks
    std::vector<std::string> batches;
    std::size_t next = 0;
    long wins = 0;
};

struct Variant {
    std::string name;
    std::string mode;  // pair | renew
    bool needs_redis = false;
    std::function<void(Ctx&)> prepare;            // statements
    std::function<bool(Ctx&, int)> acquire;       // mutex index -> won
    std::function<void(Ctx&, int)> release;
    std::function<long(Ctx&)> op;                 // optional custom op (returns ops done)

    Variant(std::string n, std::string m, bool r, std::function<void(Ctx&)> p, std::function<bool(Ctx&, int)> a,
            std::function<void(Ctx&, int)> rel, std::function<long(Ctx&)> o)
        : name(std::move(n)), mode(std::move(m)), needs_redis(r), prepare(std::move(p)), acquire(std::move(a)),
          release(std::move(rel)), op(std::move(o)) {}
};

std::string g_conninfo;  // --host/--port; "" = libpq's environment
long g_ops = 0;          // --ops: fixed ops per client instead of --seconds

const char* kTtl = "10 s";
const char* kTransition = "6 s";

bool simba_acq(Ctx& c, int i) {
    const char* p[] = {c.names[i].c_str(), c.id.c_str(), kTtl, kTransition};
    std::string owner;
    c.pg->run("acq", 4, p, &owner);
    return owner == c.id;
}

/// The extension's release UPDATE on `table`, as plain SQL.
std::string release_update_on(const std::string& table) {
    return "UPDATE " + table + " AS m SET owner_id = NULL, acquired_at = NULL, ttl_at = NULL,"
           "       transition_at = NULL, version = m.version + 1"
           " WHERE m.mutex = $1 AND m.owner_id = $2 AND m.transition_at > pg_catalog.clock_timestamp()";
}

std::vector<Variant> variants() {
    std::vector<Variant> v;
    // ---------------------------------------------------------- simba
    auto simba_prepare = [](Ctx& c) {
        c.pg->prepare("acq", "SELECT o.owner_id FROM simba_acquire($1, $2, $3::interval, $4::interval) AS o");
        c.pg->prepare("rel", "SELECT simba_release($1, $2)");
    };
    auto simba_rel = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str()};
        c.pg->run("rel", 2, p);
    };
    v.push_back({"simba", "pair", false, simba_prepare, simba_acq, simba_rel, nullptr});
    v.push_back({"simba", "renew", false, simba_prepare, simba_acq, simba_rel, nullptr});
    // ---------------------------------------------------------- the portable edition
    auto portable_prepare = [](Ctx& c) {
        c.pg->prepare("acq", "SELECT o.owner_id FROM simba_portable.simba_acquire($1, $2, $3::interval, $4::interval) AS o");
        c.pg->prepare("rel", "SELECT simba_portable.simba_release($1, $2)");
    };
    v.push_back({"portable", "pair", false, portable_prepare, simba_acq, simba_rel, nullptr});
    v.push_back({"portable", "renew", false, portable_prepare, simba_acq, simba_rel, nullptr});
    auto simba_always_prepare = [simba_prepare](Ctx& c) {
        c.pg->exec("SET simba.notify = always");
        simba_prepare(c);
    };
    v.push_back({"simba_always", "pair", false, simba_always_prepare, simba_acq, simba_rel, nullptr});
    // ---------------------------------------------------------- floor
    auto floor_prepare_on = [](const std::string& table) {
      return [table](Ctx& c) {
        c.pg->prepare("acq",
                      "UPDATE " + table + " AS m"
                      "   SET owner_id = $2, acquired_at = c.t, ttl_at = c.t + $3::interval,"
                      "       transition_at = c.t + $3::interval + $4::interval, version = m.version + 1,"
                      "       fence = m.fence + CASE WHEN m.owner_id = $2 AND m.transition_at > c.t THEN 0 ELSE 1 END"
                      "  FROM (SELECT pg_catalog.clock_timestamp() AS t) AS c"
                      " WHERE m.mutex = $1 AND (m.owner_id IS NULL OR m.owner_id = $2 OR m.transition_at <= c.t)"
                      " RETURNING m.owner_id, m.mutex, m.acquired_at, m.ttl_at, m.transition_at, m.version, m.fence, c.t");
        c.pg->prepare("rel", "WITH u AS (" + release_update_on(table) +
                                 " RETURNING m.mutex) SELECT pg_catalog.pg_notify('simba_floor', u.mutex) FROM u");
      };
    };
    auto floor_prepare = floor_prepare_on("bench_floor");
    auto floor_acq = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str(), kTtl, kTransition};
        return c.pg->run("acq", 4, p) == 1;
    };
    auto floor_rel = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str()};
        c.pg->run("rel", 2, p);
    };
    v.push_back({"floor", "pair", false, floor_prepare, floor_acq, floor_rel, nullptr});
    v.push_back({"floor", "renew", false, floor_prepare, floor_acq, floor_rel, nullptr});
    // The same bare UPDATEs on simba_mutex itself: its triggers fire, the function path is left out.
    v.push_back({"floor_trig", "pair", false, floor_prepare_on("simba_mutex"), floor_acq, floor_rel, nullptr});
    v.push_back({"floor_trig", "renew", false, floor_prepare_on("simba_mutex"), floor_acq, floor_rel, nullptr});
    // ---------------------------------------------------------- Simba JDBC
    // Replays JdbcMutexOwnerRepository (Simba's JDBC backend; reference:
    // /work/shared/reference/000_*.txt "Optimistic vs. Pessimistic Locking
    // (JDBC)" and 001_*.txt "Guard (Renewal) Mechanism"; the repository's
    // acquireAndGetOwner/release) as pgjdbc sends it from a HikariCP pool:
    //  - acquire and renewal are the same call: autoCommit = false, SQL_ACQUIRE
    //    (conditional UPDATE; a non-owner wins when transition_at < now, the
    //    owner while transition_at > now), SQL_GET (the owner row plus the
    //    server's current time), commit(). pgjdbc sends no BEGIN on
    //    setAutoCommit(false); it prefixes BEGIN to the first statement in the
    //    same write, before one Sync (QueryExecutorImpl.sendQueryPreamble), so
    //    BEGIN + UPDATE is one round trip: 3 round trips per acquire, not 4.
    //    Here: libpq pipeline mode, BEGIN as an unnamed statement parsed every
    //    time (pgjdbc sends it as a simple 'Q' query), UPDATE, one Sync.
    //  - release is SQL_RELEASE alone in autocommit (no transaction block, no
    //    NOTIFY): 1 round trip.
    //  - UPDATE/SELECT/COMMIT are named server-side statements: pgjdbc's
    //    per-connection statement cache keeps the execution count across
    //    prepareStatement() calls on the pooled connection, so after
    //    prepareThreshold (5) uses they are server-prepared: steady state.
    //  - Simba stores epoch millis and frees a row with owner_id = '' and
    //    times 0; on simba_mutex's timestamptz columns a free row has NULLs,
    //    hence "owner_id IS NULL"; its times come from the server clock.
    auto jdbc_prepare_with = [](bool notify) {
      return [notify](Ctx& c) {
        c.pg->prepare("begin", "BEGIN");
        c.pg->prepare("commit", "COMMIT");
        c.pg->prepare("upd",
                      "UPDATE bench_jdbc SET owner_id = $2, acquired_at = pg_catalog.clock_timestamp(),"
                      "       ttl_at = pg_catalog.clock_timestamp() + $3::interval,"
                      "       transition_at = pg_catalog.clock_timestamp() + $3::interval + $4::interval,"
                      "       version = version + 1"
                      " WHERE mutex = $1 AND (owner_id IS NULL OR transition_at < pg_catalog.clock_timestamp()"
                      "       OR (owner_id = $2 AND transition_at > pg_catalog.clock_timestamp()))");
        c.pg->prepare("sel",
                      "SELECT owner_id, acquired_at, ttl_at, transition_at, version,"
                      "       pg_catalog.clock_timestamp() AS current_at FROM bench_jdbc WHERE mutex = $1");
        c.pg->prepare("rel",
                      notify ? "WITH u AS (UPDATE bench_jdbc SET owner_id = NULL, acquired_at = NULL, ttl_at = NULL,"
                               "       transition_at = NULL, version = version + 1 WHERE mutex = $1 AND owner_id = $2"
                               " RETURNING mutex) SELECT pg_catalog.pg_notify('simba_jdbc', u.mutex) FROM u"
                             : "UPDATE bench_jdbc SET owner_id = NULL, acquired_at = NULL, ttl_at = NULL,"
                               "       transition_at = NULL, version = version + 1 WHERE mutex = $1 AND owner_id = $2");
      };
    };
    auto jdbc_prepare = jdbc_prepare_with(false);
    auto jdbc_acq = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str(), kTtl, kTransition};
        PGconn* pc = c.pg->c;
        // [BEGIN, UPDATE, Sync] in one write, like pgjdbc's query preamble.
        if (!PQenterPipelineMode(pc) || !PQsendQueryParams(pc, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0) ||
            !PQsendQueryPrepared(pc, "upd", 4, p, nullptr, nullptr, 0) || !PQpipelineSync(pc))
            throw std::runtime_error(std::string("jdbc pipeline: ") + PQerrorMessage(pc));
        for (int k = 0; k < 2; ++k) {  // BEGIN, UPDATE: one result each, then NULL
            PGresult* r = PQgetResult(pc);
            bool ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
            std::string msg = r ? PQresultErrorMessage(r) : PQerrorMessage(pc);
            PQclear(r);
            if (!ok) throw std::runtime_error("jdbc pipeline statement failed: " + msg);
            PQclear(PQgetResult(pc));
        }
        PGresult* r = PQgetResult(pc);
        bool synced = r && PQresultStatus(r) == PGRES_PIPELINE_SYNC;
        PQclear(r);
        if (!synced || !PQexitPipelineMode(pc))
            throw std::runtime_error(std::string("jdbc pipeline sync: ") + PQerrorMessage(pc));
        std::string owner;
        c.pg->run("sel", 1, p, &owner);
        c.pg->run("commit", 0, nullptr);
        return owner == c.id;
    };
    auto jdbc_acq_begin_rt = [](Ctx& c, int i) {  // diagnostic: BEGIN in its own round trip
        const char* p[] = {c.names[i].c_str(), c.id.c_str(), kTtl, kTransition};
        std::string owner;
        c.pg->run("begin", 0, nullptr);
        c.pg->run("upd", 4, p);
        c.pg->run("sel", 1, p, &owner);
        c.pg->run("commit", 0, nullptr);
        return owner == c.id;
    };
    auto jdbc_rel = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str()};
        c.pg->run("rel", 2, p);
    };
    v.push_back({"jdbc", "pair", false, jdbc_prepare, jdbc_acq, jdbc_rel, nullptr});
    v.push_back({"jdbc", "renew", false, jdbc_prepare, jdbc_acq, jdbc_rel, nullptr});
    v.push_back({"jdbc_begin_rt", "pair", false, jdbc_prepare, jdbc_acq_begin_rt, jdbc_rel, nullptr});
    v.push_back({"jdbc_begin_rt", "renew", false, jdbc_prepare, jdbc_acq_begin_rt, jdbc_rel, nullptr});
    v.push_back({"jdbc_notify", "pair", false, jdbc_prepare_with(true), jdbc_acq, jdbc_rel, nullptr});
    // ---------------------------------------------------------- diagnostics: NOTIFY, client statement
    // A variant's acquire, then the extension's own release UPDATE as plain
    // SQL (no function, no NOTIFY).
    auto with_plain_release = [](std::function<void(Ctx&)> prepare, const std::string& table) {
        return [prepare, table](Ctx& c) {
            prepare(c);
            c.pg->prepare("rel_nn", release_update_on(table));
        };
    };
    auto rel_nn = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str()};
        c.pg->run("rel_nn", 2, p);
    };
    v.push_back({"simba_nonotify", "pair", false, with_plain_release(simba_prepare, "simba_mutex"), simba_acq, rel_nn,
                 nullptr});
    v.push_back({"floor_nonotify", "pair", false, with_plain_release(floor_prepare, "bench_floor"), floor_acq, rel_nn,
                 nullptr});
    // What the client library sends (client/src/statements.cpp kAcquireSql, kReleaseSql).
    auto client_prepare = [](Ctx& c) {
        c.pg->prepare("acq", kClientAcquireSql);
        c.pg->prepare("rel", kClientReleaseSql);
    };
    auto client_acq = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str(), "10000000", "6000000"};
        std::string owner;
        c.pg->run("acq", 4, p, &owner, 1);  // column 1: owner_id
        return owner == c.id;
    };
    v.push_back({"simba_client", "pair", false, client_prepare, client_acq, simba_rel, nullptr});
    v.push_back({"simba_client", "renew", false, client_prepare, client_acq, simba_rel, nullptr});
    // ---------------------------------------------------------- ShedLock
    auto shed_prepare = [](Ctx& c) {
        c.pg->prepare("lock",
                      "INSERT INTO shedlock(name, lock_until, locked_at, locked_by)"
                      " VALUES($1, timezone('utc', CURRENT_TIMESTAMP) + cast($3 as interval),"
                      "        timezone('utc', CURRENT_TIMESTAMP), $2)"
                      " ON CONFLICT (name) DO UPDATE"
                      " SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + cast($3 as interval),"
                      "     locked_at = timezone('utc', CURRENT_TIMESTAMP), locked_by = $2"
                      " WHERE shedlock.lock_until <= timezone('utc', CURRENT_TIMESTAMP)");
        c.pg->prepare("extend",
                      "UPDATE shedlock SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + cast($3 as interval)"
                      " WHERE name = $1 AND locked_by = $2 AND lock_until > timezone('utc', CURRENT_TIMESTAMP)");
        c.pg->prepare("unlock",
                      "UPDATE shedlock SET lock_until = (CASE"
                      " WHEN locked_at + cast('0 s' as interval) > timezone('utc', CURRENT_TIMESTAMP)"
                      " THEN locked_at + cast('0 s' as interval) ELSE timezone('utc', CURRENT_TIMESTAMP) END)"
                      " WHERE name = $1 AND locked_by = $2");
    };
    auto shed_acq = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str(), kTtl};
        return c.pg->run("lock", 3, p) == 1;
    };
    auto shed_extend = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str(), kTtl};
        return c.pg->run("extend", 3, p) == 1;
    };
    auto shed_rel = [](Ctx& c, int i) {
        const char* p[] = {c.names[i].c_str(), c.id.c_str()};
        c.pg->run("unlock", 2, p);
    };
    v.push_back({"shedlock", "pair", false, shed_prepare, shed_acq, shed_rel, nullptr});
    Variant shed_renew{"shedlock", "renew", false, shed_prepare, shed_acq, shed_rel, nullptr};
    shed_renew.op = [shed_extend](Ctx& c) {
        int i = c.own[c.next++ % c.own.size()];
        if (shed_extend(c, i)) c.wins++;
        return 1L;
    };
    v.push_back(shed_renew);
    // ---------------------------------------------------------- advisory locks
    auto adv_prepare = [](Ctx& c) {
        c.pg->prepare("lock", "SELECT pg_try_advisory_lock($1::int8)");
        c.pg->prepare("unlock", "SELECT pg_advisory_unlock($1::int8)");
    };
    auto adv_acq = [](Ctx& c, int i) {
        std::string key = std::to_string(i), r;
        const char* p[] = {key.c_str()};
        c.pg->run("lock", 1, p, &r);
        return r == "t";
    };
    auto adv_rel = [](Ctx& c, int i) {
        std::string key = std::to_string(i);
        const char* p[] = {key.c_str()};
        c.pg->run("unlock", 1, p);
    };
    v.push_back({"advisory", "pair", false, adv_prepare, adv_acq, adv_rel, nullptr});
    // ---------------------------------------------------------- Redis
    auto redis_prepare = [](Ctx& c) {
        c.del_sha = c.redis->cmd({"SCRIPT", "LOAD",
                                  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
                                  "else return 0 end"})
                        .substr(1);
        c.renew_sha = c.redis->cmd({"SCRIPT", "LOAD",
                                    "if redis.call('get', KEYS[1]) == ARGV[1] then "
                                    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"})
                          .substr(1);
    };
    auto redis_acq = [](Ctx& c, int i) {
        return c.redis->cmd({"SET", c.names[i], c.id, "NX", "PX", "10000"}) == "+OK";
    };
    auto redis_rel = [](Ctx& c, int i) { c.redis->cmd({"EVALSHA", c.del_sha, "1", c.names[i], c.id}); };
    v.push_back({"redis", "pair", true, redis_prepare, redis_acq, redis_rel, nullptr});
    Variant redis_renew{"redis", "renew", true, redis_prepare, redis_acq, redis_rel, nullptr};
    redis_renew.op = [](Ctx& c) {
        int i = c.own[c.next++ % c.own.size()];
        if (c.redis->cmd({"EVALSHA", c.renew_sha, "1", c.names[i], c.id, "10000"}) == ":1") c.wins++;
        return 1L;
    };
    v.push_back(redis_renew);
    // ---------------------------------------------------------- batched renewals
    Variant batch{"simba_batch", "renew", false, nullptr, simba_acq, simba_rel, nullptr};
    batch.prepare = [simba_prepare](Ctx& c) {
        simba_prepare(c);
        c.pg->prepare("batch",
                      "SELECT count(*) FROM pg_catalog.unnest($1::text[]) AS n(m),"
                      " LATERAL simba_acquire(n.m, $2, $3::interval, $4::interval) AS o WHERE o.owner_id = $2");
    };
    batch.op = [](Ctx& c) {
        if (c.batches.empty()) {
            for (std::size_t k = 0; k < c.own.size(); k += kMaxBatch) {
                std::string a = "{";
                for (std::size_t j = k; j < std::min(c.own.size(), k + kMaxBatch); ++j)
                    a += (j > k ? "," : "") + c.names[c.own[j]];
                c.batches.push_back(a + "}");
            }
        }
        const std::string& a = c.batches[c.next++ % c.batches.size()];
        const char* p[] = {a.c_str(), c.id.c_str(), kTtl, kTransition};
        std::string n;
        c.pg->run("batch", 4, p, &n);
        long renewed = std::stol(n);
        c.wins += renewed;
        return renewed;
    };
    v.push_back(batch);
    // ---------------------------------------------------------- diagnostic: scalar call
    auto call_prepare = [](Ctx& c) {
        c.pg->prepare("acq", "SELECT (simba_acquire($1, $2, $3::interval, $4::interval)).owner_id");
        c.pg->prepare("rel", "SELECT simba_release($1, $2)");
    };
    v.push_back({"simba_call", "pair", false, call_prepare, simba_acq, simba_rel, nullptr});
    return v;
}

struct RunResult {
    double ops_per_s = 0;
    double win_rate = 0;
};

RunResult run(const Variant& v, int clients, double seconds, int mutexes, const std::string& redis_path) {
    std::vector<std::unique_ptr<Ctx>> ctx;
    std::vector<std::string> names;
    for (int i = 0; i < mutexes; ++i) names.push_back("bm" + std::to_string(i));
    for (int t = 0; t < clients; ++t) {
        auto c = std::make_unique<Ctx>();
        c->thread = t;
        c->threads = clients;
        c->mutexes = mutexes;
        c->id = "bench-" + std::to_string(t);
        c->names = names;
        c->rng.seed(1234567 + t * 7919 + clients);
        for (int i = t; i < mutexes; i += clients) c->own.push_back(i);
        std::shuffle(c->own.begin(), c->own.end(), c->rng);
        if (v.needs_redis)
            c->redis = std::make_unique<Redis>(redis_path);
        else
            c->pg = std::make_unique<Conn>(g_conninfo);
        // With --ops (callgrind-protocols.sh): which backend did the work.
        if (g_ops > 0 && c->pg) std::fprintf(stderr, "client backend pid %d\n", PQbackendPID(c->pg->c));
        v.prepare(*c);
        if (v.mode == "renew") {  // take the leases this client renews
            for (int i : c->own)
                if (!v.acquire(*c, i)) throw std::runtime_error(v.name + ": could not take lease " + names[i]);
        }
        ctx.push_back(std::move(c));
    }
    std::atomic<bool> go{false}, stop{false};
    std::vector<long> ops(clients, 0);
    std::vector<std::thread> th;
    for (int t = 0; t < clients; ++t) {
        th.emplace_back([&, t] {
            Ctx& c = *ctx[t];
            std::uniform_int_distribution<int> pick(0, mutexes - 1);
            while (!go.load()) std::this_thread::yield();
            long n = 0;
            while (g_ops > 0 ? n < g_ops : !stop.load(std::memory_order_relaxed)) {
                if (v.op) {
                    n += v.op(c);
                } else if (v.mode == "pair") {
                    int i = pick(c.rng);
                    if (v.acquire(c, i)) {
                        c.wins++;
                        v.release(c, i);
                    }
                    ++n;
                } else {
                    int i = c.own[c.next++ % c.own.size()];
                    if (v.acquire(c, i)) c.wins++;
                    ++n;
                }
            }
            ops[t] = n;
        });
    }
    double t0 = now_us();
    go = true;
    if (g_ops == 0) sleep_ms(seconds * 1000);
    stop = true;
    for (auto& x : th) x.join();
    double elapsed = (now_us() - t0) / 1e6;
    long total = 0, wins = 0;
    for (int t = 0; t < clients; ++t) {
        total += ops[t];
        wins += ctx[t]->wins;
    }
    // Leave every lease free for the next variant.
    if (v.mode == "renew")
        for (auto& c : ctx)
            for (int i : c->own) v.release(*c, i);
    ctx.clear();
    RunResult r;
    r.ops_per_s = total / elapsed;
    r.win_rate = total ? static_cast<double>(wins) / total : 0;
    return r;
}

void setup(int mutexes, const std::string& portable_script) {
    Conn c(g_conninfo);
    c.exec("SET client_min_messages = warning");
    c.exec("CREATE EXTENSION IF NOT EXISTS simba");
    std::string n = std::to_string(mutexes - 1);
    if (!portable_script.empty()) {  // psql runs the script (it uses psql's variables)
        c.exec("DROP SCHEMA IF EXISTS simba_portable CASCADE");
        std::string cmd = "psql -Xq -v ON_ERROR_STOP=1 -v schema=simba_portable -f '" + portable_script + "' '" +
                          g_conninfo + "'";
        if (std::system(cmd.c_str()) != 0) throw std::runtime_error("could not install the portable edition: " + cmd);
        c.exec("SELECT count(simba_portable.simba_release('bm' || i, 'setup')) FROM generate_series(0, " + n +
               ") i, LATERAL simba_portable.simba_acquire('bm' || i, 'setup') o");
        c.exec("VACUUM ANALYZE simba_portable.simba_mutex");
    }
    c.exec("DROP TABLE IF EXISTS bench_floor, bench_jdbc, shedlock");
    c.exec("CREATE TABLE bench_floor (LIKE simba_mutex INCLUDING ALL) WITH (fillfactor = 50)");
    c.exec("CREATE TABLE bench_jdbc (LIKE simba_mutex INCLUDING ALL) WITH (fillfactor = 50)");
    // ShedLock's documented PostgreSQL table.
    c.exec("CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL,"
           " locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))");
    c.exec("INSERT INTO bench_floor (mutex) SELECT 'bm' || i FROM generate_series(0, " + n + ") i");
    c.exec("INSERT INTO bench_jdbc (mutex) SELECT 'bm' || i FROM generate_series(0, " + n + ") i");
    c.exec("INSERT INTO shedlock SELECT 'bm' || i, timezone('utc', now()) - interval '1 s',"
           " timezone('utc', now()) - interval '1 s', '' FROM generate_series(0, " + n + ") i");
    c.exec("SELECT count(simba_release('bm' || i, 'setup')) FROM generate_series(0, " + n +
           ") i, LATERAL simba_acquire('bm' || i, 'setup') o");
    c.exec("VACUUM ANALYZE simba_mutex, bench_floor, bench_jdbc, shedlock");
}

}  // namespace

int main(int argc, char** argv) {
    double seconds = 2;
    int rounds = 3, mutexes = 1000;
    std::vector<int> clients{1, 2, 8};
    std::string redis_path, only, json_path, host, port, portable_script;
    Options cli("benchmark 1: acquire throughput of simba and its baselines");
    cli.add_option("--seconds", seconds, "length of each run")->check(CLI::PositiveNumber);
    cli.add_option("--rounds", rounds, "alternating rounds of every variant")->check(CLI::PositiveNumber);
    cli.add_option("--mutexes", mutexes, "mutexes the clients spread over")->check(CLI::PositiveNumber);
    cli.add_option("--clients", clients, "client counts (comma-separated)")->delimiter(',');
    cli.add_option("--redis", redis_path, "unix socket of a Redis: adds the Redis variants");
    cli.add_option("--portable", portable_script, "the portable edition's script: adds the portable variants");
    cli.add_option("--only", only, "comma list of name/mode, e.g. simba/pair,floor/pair (diagnostics too)");
    cli.add_option("--host", host, "server host (default: libpq's environment)");
    cli.add_option("--port", port, "server port");
    cli.add_option("--ops", g_ops, "fixed operations per client instead of --seconds (0: by time)");
    cli.add_option("--json", json_path, "write the results here (and chart data beside it, .dat)");
    CLI11_PARSE(cli, argc, argv);
    if (!host.empty()) g_conninfo += "host=" + host;
    if (!port.empty()) g_conninfo += " port=" + port;

    setup(mutexes, portable_script);
    std::vector<Variant> all = variants(), vs;
    for (auto& v : all) {
        if (v.needs_redis && redis_path.empty()) continue;
        if (v.name == "portable" && portable_script.empty()) continue;
        static const std::string diag = ",simba_call,simba_client,simba_nonotify,floor_nonotify,jdbc_notify,jdbc_begin_rt,";
        if (diag.find("," + v.name + ",") != std::string::npos && only.empty()) continue;  // diagnostics: only when asked for
        if (!only.empty() && ("," + only + ",").find("," + v.name + "/" + v.mode + ",") == std::string::npos) continue;
        vs.push_back(v);
    }
    // results[name/mode][clients] = ops/s per round
    std::map<std::string, std::map<int, std::vector<double>>> res, wins;
    std::printf("benchmark 1: %d rounds x %.1f s per run, %d mutexes, variants alternate, server %s\n", rounds,
                seconds, mutexes, g_conninfo.empty() ? "from PGHOST/PGPORT" : g_conninfo.c_str());
    std::fflush(stdout);
    for (int r = 0; r < rounds; ++r) {
        for (int c : clients) {
            for (std::size_t k = 0; k < vs.size(); ++k) {
                const Variant& v = vs[(k + r) % vs.size()];
                auto rr = run(v, c, seconds, mutexes, redis_path);
                res[v.name + "/" + v.mode][c].push_back(rr.ops_per_s);
                wins[v.name + "/" + v.mode][c].push_back(rr.win_rate);
            }
        }
        std::fprintf(stderr, "  round %d/%d done\n", r + 1, rounds);
    }

    auto med = [&](const std::string& key, int c) {
        auto it = res.find(key);
        if (it == res.end() || !it->second.count(c)) return static_cast<double>(NAN);
        return median(it->second[c]);
    };
    // Ratios are paired: the median over rounds of a / b within the same round,
    // so a noisy round moves both sides together.
    auto ratio = [&](const std::string& a, const std::string& b, int c) {
        if (!res.count(a) || !res.count(b) || !res[a].count(c) || !res[b].count(c)) return static_cast<double>(NAN);
        std::vector<double> r;
        for (std::size_t i = 0; i < std::min(res[a][c].size(), res[b][c].size()); ++i)
            r.push_back(res[a][c][i] / res[b][c][i]);
        return median(r);
    };
    Json json{{"seconds", seconds}, {"rounds", rounds}, {"mutexes", mutexes}, {"results", Json::array()}};
    for (std::string mode : {"pair", "renew"}) {
        Table t;
        std::vector<std::string> head = {"variant (" + mode + ")"};
        for (int c : clients) head.push_back(std::to_string(c) + "c ops/s");
        for (int c : clients) head.push_back(std::to_string(c) + "c /floor");
        for (int c : clients) head.push_back(std::to_string(c) + "c simba/x");
        t.rows.push_back(head);
        for (auto& v : vs) {
            if (v.mode != mode) continue;
            std::string key = v.name + "/" + mode;
            std::vector<std::string> row = {v.name};
            for (int c : clients) row.push_back(fmt(med(key, c), 0));
            for (int c : clients) row.push_back(fmt(ratio(key, "floor/" + mode, c)));
            for (int c : clients) row.push_back(fmt(ratio("simba/" + mode, key, c)));
            t.rows.push_back(row);
            for (int c : clients) {
                json["results"].push_back({{"variant", v.name},
                                           {"mode", mode},
                                           {"clients", c},
                                           {"ops_per_s", med(key, c)},
                                           {"runs", res[key][c]},
                                           {"win_rate", median(wins[key][c])},
                                           {"vs_floor", ratio(key, "floor/" + mode, c)},
                                           {"simba_over", ratio("simba/" + mode, key, c)}});
            }
        }
        if (res.count("portable/" + mode) && res.count("shedlock/" + mode)) {
            t.rows.push_back({"portable/shedlock"});
            for (int c : clients) t.rows.back().push_back(fmt(ratio("portable/" + mode, "shedlock/" + mode, c)));
        }
        t.print(std::string("Benchmark 1 — acquire throughput, ") +
                (mode == std::string("pair") ? "acquire+release pairs" : "renewals (ops = leases renewed)") +
                " — ops/s: median of " + std::to_string(rounds) + " alternating runs; /floor = variant / bare UPDATE,"
                " simba/x = simba / variant, both the median of per-round ratios");
    }
    write_file(json_path, json);
    if (!json_path.empty()) {  // chart data: one line per variant, ops/s per client count
        std::string base = json_path.substr(0, json_path.rfind('.'));
        for (std::string mode : {"pair", "renew"}) {
            std::ofstream f(base + "-" + mode + ".dat");
            f << "# variant";
            for (int c : clients) f << " " << c;
            f << "\n";
            for (auto& v : vs) {
                if (v.mode != mode) continue;
                f << v.name;
                for (int c : clients) f << " " << dat_num(med(v.name + "/" + mode, c));
                f << "\n";
            }
        }
    }
    return 0;
}
