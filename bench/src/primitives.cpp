// Benchmark 8: the newer primitives against doing the same with the mutex.
//
// Multi-lock: each client thread takes a set of 10 mutexes, drawn at random
// from 1,000, and gives it back, in a closed loop on its own connection:
//   multi    SELECT ... FROM simba_acquire_all(set) + simba_release_all(set):
//            two statements, all or nothing
//   single   simba_acquire of each name in byte order, stopping at the first
//            refused (then releasing what it took), then simba_release of
//            each: up to 20 statements, and the set is not taken atomically
// Both alternate within each round (the order rotates between rounds); the
// result is the median over rounds of sets per second, and multi / single.
#include <algorithm>
#include <atomic>
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

}  // namespace

int main(int argc, char** argv) try {
    Options cli("Benchmark 8: a multi-lock of 10 mutexes against 10 single acquires");
    double seconds = 1.2;
    int rounds = 3;
    std::vector<int> client_counts = {1, 2, 8};
    std::string json_path, conninfo;
    cli.add_option("--seconds", seconds, "length of each timed run");
    cli.add_option("--rounds", rounds, "rounds (the median is reported)");
    cli.add_option("--clients", client_counts, "client counts")->delimiter(',');
    cli.add_option("--conninfo", conninfo, "libpq connection string (default: the PG* environment)");
    cli.add_option("--json", json_path, "write the results here");
    CLI11_PARSE(cli, argc, argv);

    {
        Conn setup(conninfo);
        setup.exec("CREATE EXTENSION IF NOT EXISTS simba");
        setup.exec("DELETE FROM simba_mutex WHERE mutex LIKE 'pm%'");
    }
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
    write_file(json_path, {{"multi_lock", out}});
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "bench_primitives: %s\n", e.what());
    return 1;
}
