// Benchmark 8: the newer primitives against what users would do without them.
//
// multi — each client thread takes a set of 10 mutexes, drawn at random
// from 1,000, and gives it back, in a closed loop on its own connection:
//   multi    SELECT ... FROM simba_acquire_all(set) + simba_release_all(set):
//            two statements, all or nothing
//   single   simba_acquire of each name in byte order, stopping at the first
//            refused (then releasing what it took), then simba_release of
//            each: up to 20 statements, and the set is not taken atomically
// Both alternate within each round (the order rotates between rounds); the
// result is the median over rounds of sets per second, and multi / single.
//
// rwlock — attempts on one read-write lock, 1, 2 and 8 clients, each
// released when it was granted, against PostgreSQL's advisory locks (no
// lease, no fence, nothing written): read attempts against
// pg_try_advisory_lock_shared + pg_advisory_unlock_shared, write attempts
// against pg_try_advisory_lock + pg_advisory_unlock. Rotating order, median
// of rounds, attempts per second.
//
// fair — handoffs of one mutex among N waiters, each on its own connection
// and LISTENing: the holder releases at once and every waiter calls again
// when woken (or every 2 s). fair: simba_fair_acquire / _release, the
// release wakes the next waiter alone; herd: simba_acquire / simba_release,
// the release's NOTIFY on channel simba wakes every waiter. Handoffs (a
// change of hands: a releaser that takes it back does not count) per
// second, statements per handoff, and the latency from the release to the
// next holder's acquire (p50, p99).
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <set>

#include "common.hpp"

using namespace bench;

namespace {

const int kMutexes = 1000;
const int kSetSize = 10;

struct Client {
    std::unique_ptr<Conn> pg;
    std::string id;
    std::mt19937_64 rng;
};

/// `kSetSize` distinct names in byte order, and the same as an array literal.
std::vector<std::string> draw_set(Client& c, std::string& array) {
    std::set<std::string> names;
    std::uniform_int_distribution<int> pick(0, kMutexes - 1);
    while (static_cast<int>(names.size()) < kSetSize) names.insert("pm" + std::to_string(pick(c.rng)));
    array = "{";
    for (auto& n : names) array += (array.size() > 1 ? "," : "") + n;
    array += "}";
    return {names.begin(), names.end()};
}

/// One set taken and given back; returns statements sent, *taken whether it was.
int multi_op(Client& c, bool* taken) {
    std::string array;
    draw_set(c, array);
    const char* p[] = {array.c_str(), c.id.c_str()};
    std::string mine;
    c.pg->run("all", 2, p, &mine);
    *taken = mine == std::to_string(kSetSize);
    if (!*taken) return 1;
    c.pg->run("rel_all", 2, p);
    return 2;
}

int single_op(Client& c, bool* taken) {
    std::string array;
    const auto names = draw_set(c, array);
    int statements = 0, won = 0;
    for (auto& n : names) {
        const char* p[] = {n.c_str(), c.id.c_str()};
        std::string owner;
        c.pg->run("acq", 2, p, &owner);
        ++statements;
        if (owner != c.id) break;
        ++won;
    }
    *taken = won == kSetSize;
    for (int i = 0; i < won; ++i) {
        const char* p[] = {names[i].c_str(), c.id.c_str()};
        c.pg->run("rel", 2, p);
        ++statements;
    }
    return statements;
}

struct Result {
    double sets_per_s = 0, taken_per_s = 0, statements_per_set = 0;
};

Result run(int clients, double seconds, const std::string& conninfo, bool multi) {
    std::vector<std::unique_ptr<Client>> cs;
    for (int t = 0; t < clients; ++t) {
        auto c = std::make_unique<Client>();
        c->pg = std::make_unique<Conn>(conninfo);
        c->id = "bench-" + std::to_string(t);
        c->rng.seed(1234 + t);
        c->pg->prepare("all",
                       "SELECT count(*) FILTER (WHERE owner_id = $2)"
                       " FROM simba_acquire_all($1::text[], $2, '10 s', '6 s')");
        c->pg->prepare("rel_all", "SELECT simba_release_all($1::text[], $2)");
        c->pg->prepare("acq", "SELECT owner_id FROM simba_acquire($1, $2, '10 s', '6 s')");
        c->pg->prepare("rel", "SELECT simba_release($1, $2)");
        cs.push_back(std::move(c));
    }
    std::atomic<bool> stop{false};
    std::vector<long> sets(clients), taken(clients), statements(clients);
    std::vector<std::thread> threads;
    const double start = now_us();
    for (int t = 0; t < clients; ++t)
        threads.emplace_back([&, t] {
            while (!stop.load(std::memory_order_relaxed)) {
                bool got = false;
                statements[t] += multi ? multi_op(*cs[t], &got) : single_op(*cs[t], &got);
                ++sets[t];
                taken[t] += got;
            }
        });
    sleep_ms(seconds * 1000);
    stop = true;
    for (auto& th : threads) th.join();
    const double elapsed = (now_us() - start) / 1e6;
    long s = 0, k = 0, st = 0;
    for (int t = 0; t < clients; ++t) s += sets[t], k += taken[t], st += statements[t];
    return {s / elapsed, k / elapsed, s ? static_cast<double>(st) / s : 0};
}


// ------------------------------------------------------------- rwlock

/// Acquire + release pairs of one lock by `clients` threads for `seconds`.
double pairs(int clients, double seconds, const std::string& conninfo, const std::string& acquire,
             const std::string& release) {
    std::vector<std::unique_ptr<Conn>> cs;
    for (int t = 0; t < clients; ++t) {
        cs.push_back(std::make_unique<Conn>(conninfo));
        cs.back()->prepare("acq", acquire);
        cs.back()->prepare("rel", release);
    }
    std::atomic<bool> stop{false};
    std::vector<long> ops(clients);
    std::vector<std::thread> threads;
    const double start = now_us();
    for (int t = 0; t < clients; ++t)
        threads.emplace_back([&, t] {
            const std::string id = "rw-" + std::to_string(t);
            const char* p[] = {id.c_str()};
            while (!stop.load(std::memory_order_relaxed)) {
                std::string got;
                cs[t]->run("acq", 1, p, &got);
                if (got == "t") cs[t]->run("rel", 1, p);  // released only when taken, on both sides
                ++ops[t];
            }
        });
    sleep_ms(seconds * 1000);
    stop = true;
    for (auto& th : threads) th.join();
    long total = 0;
    for (long o : ops) total += o;
    return total / ((now_us() - start) / 1e6);
}

Json rwlock_bench(const std::vector<int>& client_counts, double seconds, int rounds, const std::string& conninfo) {
    // The advisory statements take $1 too (unused), so both sides send the same parameters.
    struct Side {
        const char* name;
        std::string acquire, release;
    };
    const Side sides[] = {
        {"simba read", "SELECT granted FROM simba_rwlock_acquire('bench-rw', $1, 'read', '10 s', '6 s')",
         "SELECT simba_rwlock_release('bench-rw', $1)"},
        {"advisory shared", "SELECT pg_try_advisory_lock_shared(4242) WHERE $1::text IS NOT NULL",
         "SELECT pg_advisory_unlock_shared(4242) WHERE $1::text IS NOT NULL"},
        {"simba write", "SELECT granted FROM simba_rwlock_acquire('bench-rw', $1, 'write', '10 s', '6 s')",
         "SELECT simba_rwlock_release('bench-rw', $1)"},
        {"advisory exclusive", "SELECT pg_try_advisory_lock(4242) WHERE $1::text IS NOT NULL",
         "SELECT pg_advisory_unlock(4242) WHERE $1::text IS NOT NULL"},
    };
    Table table;
    table.rows.push_back({"clients", "simba read/s", "advisory shared/s", "read ratio", "simba write/s",
                          "advisory exclusive/s", "write ratio"});
    Json out = Json::array();
    for (int clients : client_counts) {
        std::vector<std::vector<double>> v(4);
        for (int r = 0; r < rounds; ++r)
            for (int k = 0; k < 4; ++k) {
                const int i = (k + r) % 4;  // the order rotates between rounds
                v[i].push_back(pairs(clients, seconds, conninfo, sides[i].acquire, sides[i].release));
            }
        const double sr = median(v[0]), ar = median(v[1]), sw = median(v[2]), aw = median(v[3]);
        table.rows.push_back({std::to_string(clients), fmt(sr, 0), fmt(ar, 0), fmt(sr / ar) + "x", fmt(sw, 0),
                              fmt(aw, 0), fmt(sw / aw) + "x"});
        out.push_back({{"clients", clients}, {"simba_read", sr}, {"advisory_shared", ar}, {"simba_write", sw},
                       {"advisory_exclusive", aw}});
    }
    table.print("Benchmark 8: attempts on one read-write lock (released when granted) against advisory locks, median of " +
                std::to_string(rounds) + " rounds of " + fmt(seconds, 1) + " s");
    return out;
}

// --------------------------------------------------------------- fair

/// Waits up to `ms` for a notification on `c`; true if one came.
bool wait_notify(PGconn* c, int ms) {
    if (PGnotify* n = PQnotifies(c)) {
        PQfreemem(n);
        return true;
    }
    pollfd p{PQsocket(c), POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return false;
    PQconsumeInput(c);
    bool any = false;
    while (PGnotify* n = PQnotifies(c)) {
        PQfreemem(n);
        any = true;
    }
    return any;
}

struct HandoffResult {
    double per_s = 0, statements = 0, p50_ms = 0, p99_ms = 0;
};

HandoffResult handoffs(int waiters, double seconds, const std::string& conninfo, bool fair) {
    const std::string mutex = fair ? "bench-fair" : "bench-herd";
    std::vector<std::unique_ptr<Conn>> cs;
    for (int t = 0; t < waiters; ++t) {
        auto c = std::make_unique<Conn>(conninfo);
        const std::string id = "w" + std::to_string(t);
        if (fair) {
            c->prepare("acq", "SELECT owner_id, wake_channel FROM simba_fair_acquire($1, $2, '10 s', '6 s')");
            c->prepare("rel", "SELECT simba_fair_release($1, $2)");
            const char* p[] = {mutex.c_str(), id.c_str()};
            std::string channel;
            c->run("acq", 2, p, &channel, 1);
            c->exec("LISTEN \"" + channel + "\"");
        } else {
            c->prepare("acq", "SELECT owner_id FROM simba_acquire($1, $2, '10 s', '6 s')");
            c->prepare("rel", "SELECT simba_release($1, $2)");
            c->exec("LISTEN simba");
        }
        cs.push_back(std::move(c));
    }
    std::atomic<bool> stop{false};
    std::atomic<double> released_at{0};
    std::atomic<long> statements{0}, count{0};
    std::atomic<int> last_holder{-1};
    std::mutex m;
    std::vector<double> latencies;
    std::vector<std::thread> threads;
    const double start = now_us();
    for (int t = 0; t < waiters; ++t)
        threads.emplace_back([&, t] {
            const std::string id = "w" + std::to_string(t);
            const char* p[] = {mutex.c_str(), id.c_str()};
            while (!stop.load(std::memory_order_relaxed)) {
                std::string owner;
                cs[t]->run("acq", 2, p, &owner);
                ++statements;
                if (owner == id) {
                    // A handoff is a change of hands: a releaser taking it back counts for nothing.
                    const double now = now_us(), since = released_at.load();
                    if (last_holder.exchange(t) != t) {
                        ++count;
                        if (since > 0) {
                            std::lock_guard<std::mutex> g(m);
                            latencies.push_back((now - since) / 1000);
                        }
                    }
                    released_at = now_us();
                    cs[t]->run("rel", 2, p);
                    ++statements;
                    continue;  // back in line at once: fair queues it, the herd tries again
                }
                wait_notify(cs[t]->c, 2000);
            }
        });
    sleep_ms(seconds * 1000);
    stop = true;
    for (auto& th : threads) th.join();
    const double elapsed = (now_us() - start) / 1e6;
    for (int t = 0; t < waiters; ++t) {
        const std::string id = "w" + std::to_string(t);
        const char* p[] = {mutex.c_str(), id.c_str()};
        cs[t]->run("rel", 2, p);
    }
    const long n = std::max(1L, count.load());
    return {count / elapsed, static_cast<double>(statements) / n, percentile(latencies, 50), percentile(latencies, 99)};
}

Json fair_bench(const std::vector<int>& waiter_counts, double seconds, const std::string& conninfo) {
    Table table;
    table.rows.push_back({"waiters", "fair handoffs/s", "herd handoffs/s", "fair statements/handoff",
                          "herd statements/handoff", "fair p50 ms", "herd p50 ms", "fair p99 ms", "herd p99 ms"});
    Json out = Json::array();
    for (int w : waiter_counts) {
        const HandoffResult f = handoffs(w, seconds, conninfo, true), h = handoffs(w, seconds, conninfo, false);
        table.rows.push_back({std::to_string(w), fmt(f.per_s, 0), fmt(h.per_s, 0), fmt(f.statements, 1),
                              fmt(h.statements, 1), fmt(f.p50_ms), fmt(h.p50_ms), fmt(f.p99_ms), fmt(h.p99_ms)});
        out.push_back({{"waiters", w}, {"fair_per_s", f.per_s}, {"herd_per_s", h.per_s},
                       {"fair_statements", f.statements}, {"herd_statements", h.statements},
                       {"fair_p50_ms", f.p50_ms}, {"herd_p50_ms", h.p50_ms},
                       {"fair_p99_ms", f.p99_ms}, {"herd_p99_ms", h.p99_ms}});
    }
    table.print("Benchmark 8: handoffs of one mutex among N waiters, fair (the next one woken) against today's "
                "(every waiter woken), " + fmt(seconds, 1) + " s each");
    return out;
}

}  // namespace

int main(int argc, char** argv) try {
    Options cli("Benchmark 8: multi-lock, read-write lock and fair lock against their baselines");
    double seconds = 1.2;
    int rounds = 3;
    std::vector<int> client_counts = {1, 2, 8}, waiter_counts = {10, 100, 250};
    std::string json_path, conninfo, only = "multi,rwlock,fair";
    cli.add_option("--seconds", seconds, "length of each timed run");
    cli.add_option("--rounds", rounds, "rounds (the median is reported)");
    cli.add_option("--clients", client_counts, "client counts")->delimiter(',');
    cli.add_option("--waiters", waiter_counts, "fair: waiter counts (a connection each)")->delimiter(',');
    cli.add_option("--only", only, "comma list of multi, rwlock, fair");
    cli.add_option("--conninfo", conninfo, "libpq connection string (default: the PG* environment)");
    cli.add_option("--json", json_path, "write the results here");
    CLI11_PARSE(cli, argc, argv);
    const auto on = [&](const char* name) { return ("," + only + ",").find(std::string(",") + name + ",") != std::string::npos; };

    {
        Conn setup(conninfo);
        setup.exec("CREATE EXTENSION IF NOT EXISTS simba");
        setup.exec("DELETE FROM simba_mutex WHERE mutex LIKE 'pm%'");
    }
    Json results;
    if (on("multi")) {
        // Warm-up, not reported: the first use of each name inserts its row.
        for (bool multi : {true, false}) run(client_counts.back(), 0.5, conninfo, multi);
        Table table;
        table.rows.push_back({"clients", "multi sets/s", "single sets/s", "multi / single", "taken/s multi", "taken/s single",
                              "statements/set multi", "statements/set single"});
        Json out = Json::array();
        for (int clients : client_counts) {
            std::vector<Result> m, s;
            for (int r = 0; r < rounds; ++r) {
                const bool multi_first = r % 2 == 0;
                Result a = run(clients, seconds, conninfo, multi_first);
                Result b = run(clients, seconds, conninfo, !multi_first);
                m.push_back(multi_first ? a : b);
                s.push_back(multi_first ? b : a);
            }
            auto med = [](const std::vector<Result>& v, double Result::*f) {
                std::vector<double> x;
                for (auto& r : v) x.push_back(r.*f);
                return median(x);
            };
            const double ms = med(m, &Result::sets_per_s), ss = med(s, &Result::sets_per_s);
            table.rows.push_back({std::to_string(clients), fmt(ms, 0), fmt(ss, 0), fmt(ms / ss) + "x",
                                  fmt(med(m, &Result::taken_per_s), 0), fmt(med(s, &Result::taken_per_s), 0),
                                  fmt(med(m, &Result::statements_per_set), 1), fmt(med(s, &Result::statements_per_set), 1)});
            out.push_back({{"clients", clients}, {"multi_sets_per_s", ms}, {"single_sets_per_s", ss}, {"ratio", ms / ss},
                           {"multi_statements_per_set", med(m, &Result::statements_per_set)},
                           {"single_statements_per_set", med(s, &Result::statements_per_set)}});
        }
        table.print("Benchmark 8: a set of 10 mutexes taken and given back (of 1,000), median of " +
                    std::to_string(rounds) + " rounds of " + fmt(seconds, 1) + " s");
        results["multi_lock"] = out;
    }
    if (on("rwlock")) results["rwlock"] = rwlock_bench(client_counts, seconds, rounds, conninfo);
    if (on("fair")) results["fair"] = fair_bench(waiter_counts, seconds * 2, conninfo);
    write_file(json_path, results);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "bench_primitives: %s\n", e.what());
    return 1;
}
