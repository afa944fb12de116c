// Benchmark 5: client overhead — Locker acquire + release versus the same two
// statements (the client's own SQL text) sent with raw libpq, one at a time.
//
//   locker      { Locker l(factory, m); l.acquire(); }   (RAII: construct,
//               acquire, destructor releases)
//   locker-reuse  one Locker per mutex kept across iterations: acquire(); release()
//   libpq       PQexecPrepared(acquire) + PQexecPrepared(release)
// Batches alternate; the result is the median per-operation latency over
// all batches, and the ratio to libpq.
#include <simba/simba.hpp>

#include <map>

#include "common.hpp"

using namespace bench;

int main(int argc, char** argv) {
    int batches = 6, per = 300;
    int mutexes = 100;
    std::string json_path, listen, only;
    Options cli("benchmark 5: client overhead, acquire + release one at a time");
    cli.add_option("--batches", batches, "alternating batches of every path")->check(CLI::PositiveNumber);
    cli.add_option("--ops", per, "acquire + release pairs per path and batch")->check(CLI::PositiveNumber);
    cli.add_option("--listen", listen, "the factory's listen_conninfo (\"none\": poll only)");
    cli.add_option("--only", only, "one path (libpq, locker, locker-reuse), for profiling")
        ->check(CLI::IsMember({"libpq", "locker", "locker-reuse"}));
    cli.add_option("--json", json_path, "write the results here");
    CLI11_PARSE(cli, argc, argv);
    Conn raw;
    raw.exec("SET client_min_messages = warning");
    raw.exec("CREATE EXTENSION IF NOT EXISTS simba");
    raw.exec("SET statement_timeout = 2000");  // as the factory does
    raw.prepare("acq", kClientAcquireSql);
    raw.prepare("rel", kClientReleaseSql);
    // --listen none: poll only. The factory's own LISTEN connection gets the
    // NOTIFY of every release it makes, which wakes its I/O thread; this
    // shows what that costs.
    simba::pg::FactoryOptions fo;
    fo.listen_conninfo = listen;
    simba::pg::ContendServiceFactory factory("", fo);
    if (!factory.wait_connected(std::chrono::seconds(10))) throw std::runtime_error("factory did not connect");
    std::vector<std::string> names;
    for (int i = 0; i < mutexes; ++i) names.push_back("bench-ov-" + std::to_string(i));
    const std::string raw_id = "raw-client", ttl = "10000000", tr = "6000000";
    std::vector<std::unique_ptr<simba::Locker>> kept;
    for (int i = 0; i < mutexes; ++i)
        kept.push_back(std::make_unique<simba::Locker>(factory, names[i], "reuse-" + std::to_string(i)));

    std::map<std::string, std::vector<double>> lat;  // microseconds per op
    std::map<std::string, std::vector<double>> rate;
    std::vector<std::string> order = {"libpq", "locker", "locker-reuse"};
    if (!only.empty()) order = {only};
    std::printf("benchmark 5: %d alternating batches x %d acquire+release\n", batches, per);
    std::fflush(stdout);
    for (int b = 0; b < batches + 1; ++b) {  // batch 0 warms up and is dropped
        for (std::size_t k = 0; k < order.size(); ++k) {
            const std::string& v = order[(k + b) % order.size()];
            std::vector<double> ops;
            double t0 = now_us();
            for (int i = 0; i < per; ++i) {
                const std::string& m = names[i % mutexes];
                double s = now_us();
                if (v == "libpq") {
                    const char* p[] = {m.c_str(), raw_id.c_str(), ttl.c_str(), tr.c_str()};
                    std::string owner;
                    raw.run("acq", 4, p, &owner);
                    const char* q[] = {m.c_str(), raw_id.c_str()};
                    raw.run("rel", 2, q);
                } else if (v == "locker") {
                    simba::Locker l(factory, m, "locker-client");
                    l.acquire();
                } else {
                    kept[i % mutexes]->acquire();
                    kept[i % mutexes]->release();
                }
                ops.push_back(now_us() - s);
            }
            double secs = (now_us() - t0) / 1e6;
            if (b == 0) continue;
            lat[v].insert(lat[v].end(), ops.begin(), ops.end());
            rate[v].push_back(per / secs);
        }
    }
    Table t;
    t.rows.push_back({"path", "ops", "p50 us", "p90 us", "p99 us", "mean us", "ops/s", "p50 / libpq", "mean / libpq"});
    auto base = summarize(lat[order.front()]);
    Json json{{"batches", batches}, {"ops_per_batch", per}, {"results", Json::array()}};
    for (auto& v : order) {
        auto s = summarize(lat[v]);
        double r = median(rate[v]);
        t.rows.push_back({v, std::to_string(s.n), fmt(s.p50, 0), fmt(s.p90, 0), fmt(s.p99, 0), fmt(s.mean, 0),
                          fmt(r, 0), fmt(s.p50 / base.p50), fmt(s.mean / base.mean)});
        json["results"].push_back({{"path", v}, {"latency_us", json_summary(s)}, {"ops_per_s", r},
                                   {"p50_ratio", s.p50 / base.p50}, {"mean_ratio", s.mean / base.mean}});
    }
    t.print("Benchmark 5 — client overhead, acquire + release one at a time (target: Locker <= 1.15x raw libpq)");
    write_file(json_path, json);
    kept.clear();
    return 0;
}
