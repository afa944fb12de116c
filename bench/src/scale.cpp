// Benchmark 4: scale of one process — N mutex services in one factory.
//
// N services on N/2 mutexes: every mutex has one owner and one waiter in
// this process (ttl 10 s, transition 6 s by default). After a warm-up the
// steady state is measured over a window: threads (/proc/self/status),
// connections (the factory and pg_stat_activity), RSS, CPU % of this
// process and of its server backends, and the statements reaching the
// server (pg_stat_statements, top level). The factory batches due attempts
// (FactoryOptions::batch_max, 100) and takes every lock under one session
// (FactoryOptions::sessions: one keepalive a period renews them all); sizes
// listed in --per-lock run again with a lease per lock (each owner renews,
// batched), and those in --unbatched with a lease per lock and batch_max =
// 1, one statement per call: the baselines, in the same run. Calls =
// simba_acquire calls (the factory's acquire_calls); owner calls are
// renewals (sum of version over the mutexes), waiter calls the rest;
// statements are shared out between them in proportion to their calls.
#include <simba/simba.hpp>

#include "common.hpp"

using namespace bench;

namespace {

struct Snapshot {
    double t = 0;
    double acquire_calls = 0, other_calls = 0, versions = 0, cpu = 0, server_cpu = 0;
};

std::vector<long> backend_pids(Conn& mon, const std::string& app) {
    std::vector<long> out;
    PGresult* r = PQexec(mon.c, ("SELECT pid FROM pg_stat_activity WHERE application_name = '" + app + "'").c_str());
    for (int i = 0; i < PQntuples(r); ++i) out.push_back(std::atol(PQgetvalue(r, i, 0)));
    PQclear(r);
    return out;
}

Snapshot snap(Conn& mon, const std::string& prefix, const std::vector<long>& pids) {
    Snapshot s;
    s.t = now_us();
    s.acquire_calls = std::stod(mon.value(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '%simba_acquire(%'"
        " AND query NOT LIKE '%pg_stat_statements%'"));
    s.other_calls = std::stod(mon.value(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE '%simba_acquire(%'"
        " AND query NOT LIKE '%pg_stat%' AND query NOT LIKE '%simba_mutex%'"));
    s.versions = std::stod(mon.value("SELECT coalesce(sum(version), 0) FROM simba_mutex WHERE mutex LIKE '" +
                                     prefix + "%'"));
    s.cpu = cpu_seconds();
    for (long p : pids) s.server_cpu += proc_cpu_seconds(p);
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> sizes{1000, 10000}, unbatched{10000};
    double ttl_s = 10, tr_s = 6, warmup = 15, window = 20;
    std::string json_path;
    Options cli("benchmark 4: N services on N/2 mutexes in one process");
    cli.add_option("--services", sizes, "service counts, batched (comma-separated)")->delimiter(',');
    cli.add_option("--unbatched", unbatched, "service counts run again per lock with batch_max = 1")->delimiter(',');
    std::vector<int> per_lock;
    cli.add_option("--per-lock", per_lock, "service counts run again with a lease per lock, batched")->delimiter(',');
    cli.add_option("--ttl", ttl_s, "lease ttl, seconds");
    cli.add_option("--transition", tr_s, "lease transition, seconds");
    cli.add_option("--warmup", warmup, "seconds before the measured window");
    cli.add_option("--window", window, "measured seconds");
    cli.add_option("--json", json_path, "write the results here");
    CLI11_PARSE(cli, argc, argv);
    struct Run {
        int services, batch_max;
        bool sessions;
    };
    std::vector<Run> runs;
    const int batch = simba::pg::FactoryOptions{}.batch_max;
    for (int n : sizes) runs.push_back({n, batch, true});
    for (int n : per_lock) runs.push_back({n, batch, false});
    for (int n : unbatched) runs.push_back({n, 1, false});
    Conn mon;
    mon.exec("SET client_min_messages = warning");
    mon.exec("CREATE EXTENSION IF NOT EXISTS simba");
    mon.exec("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    simba::set_log_handler([](simba::LogLevel level, const std::string& msg) {
        if (level == simba::LogLevel::warning || level == simba::LogLevel::error)
            std::fprintf(stderr, "simba %s: %s\n", simba::to_string(level), msg.c_str());
    });

    std::printf("benchmark 4: N services on N/2 mutexes in one factory, ttl %.0f s, transition %.0f s,"
                " warm-up %.0f s, window %.0f s\n", ttl_s, tr_s, warmup, window);
    std::fflush(stdout);
    Table t;
    t.rows.push_back({"services", "leases", "batch", "threads", "conns", "RSS MB", "client CPU %", "server CPU %", "stmts/s",
                      "calls/stmt", "owner calls/ttl", "waiter calls/(ttl+tr)", "owner stmt/ttl",
                      "waiter stmt/(ttl+tr)", "other stmts/s", "start s", "stop s"});
    Json json{{"ttl_s", ttl_s}, {"transition_s", tr_s}, {"window_s", window}, {"results", Json::array()}};
    for (std::size_t si = 0; si < runs.size(); ++si) {
        const auto [n, batch_max, sessions] = runs[si];
        const std::string tag = std::to_string(n) + "-" + std::to_string(batch_max) + (sessions ? "-s" : "-l");
        const std::string prefix = "bench-scale-" + tag + "-";
        const std::string app = "simba-bench-scale-" + tag;
        int threads0 = thread_count();
        long rss0 = rss_kb();
        simba::pg::FactoryOptions fo;
        fo.application_name = app;
        fo.batch_max = batch_max;
        fo.sessions = sessions;
        double t_start = now_us();
        std::vector<std::unique_ptr<simba::MutexContendService>> svcs;
        {
            simba::pg::ContendServiceFactory factory("", fo);
            if (!factory.wait_connected(std::chrono::seconds(10))) std::fprintf(stderr, "bench: not connected after 10 s\n");
            simba::ContendOptions o;
            o.ttl = std::chrono::milliseconds(static_cast<long>(ttl_s * 1000));
            o.transition = std::chrono::milliseconds(static_cast<long>(tr_s * 1000));
            std::atomic<int> owners{0};
            for (int i = 0; i < n; ++i) {
                auto c = std::make_shared<simba::FunctionContender>(
                    prefix + std::to_string(i / 2), [&owners](const simba::MutexState&) { owners++; },
                    [&owners](const simba::MutexState&) { owners--; },
                    (i % 2 ? "w-" : "o-") + std::to_string(i / 2));
                svcs.push_back(factory.create(c, o));
                svcs.back()->start();
            }
            while (owners.load() < n / 2 && now_us() - t_start < 60e6) sleep_ms(10);
            double started = (now_us() - t_start) / 1e6;
            sleep_ms(std::max(0.0, warmup * 1000 - (now_us() - t_start) / 1000));
            auto pids = backend_pids(mon, app);
            // Only the counter is kept: a metrics snapshot of 10,000 services
            // is megabytes, which RSS must not count. RSS is read first.
            const auto m_a = factory.metrics();
            auto a = snap(mon, prefix, pids);
            int threads = thread_count() - threads0;
            sleep_ms(window * 1000);
            long rss = rss_kb();
            auto b = snap(mon, prefix, pids);
            const auto m_b = factory.metrics();
            const double keepalives = static_cast<double>(m_b.session_statements - m_a.session_statements);
            double secs = (b.t - a.t) / 1e6;
            int conns = factory.connection_count();
            long server_conns = static_cast<long>(pids.size());
            double stmts = (b.acquire_calls - a.acquire_calls) / secs;
            double calls = static_cast<double>(m_b.acquire_calls - m_a.acquire_calls) / secs;
            double renewals = (b.versions - a.versions) / secs;
            double per_call = calls > 0 ? stmts / calls : 0;
            double owner_calls = renewals / (n / 2) * ttl_s;
            double waiter_calls = (calls - renewals) / (n - n / 2) * (ttl_s + tr_s);
            double owner_per_ttl = owner_calls * per_call;
            double waiter_per_lease = waiter_calls * per_call;
            double cpu = (b.cpu - a.cpu) / secs * 100, scpu = (b.server_cpu - a.server_cpu) / secs * 100;
            double other = (b.other_calls - a.other_calls) / secs;
            double t_stop = now_us();
            for (auto& s : svcs) s->stop();
            double stopped = (now_us() - t_stop) / 1e6;
            svcs.clear();
            t.rows.push_back({std::to_string(n), sessions ? "session" : "per lock", std::to_string(batch_max),
                              std::to_string(threads),
                              std::to_string(conns) + " (server " + std::to_string(server_conns) + ")",
                              fmt(rss / 1024.0, 1) + " (+" + fmt((rss - rss0) / 1024.0, 1) + ")", fmt(cpu, 1),
                              fmt(scpu, 1), fmt(stmts, 1), fmt(calls / std::max(stmts, 1e-9), 1), fmt(owner_calls, 2),
                              fmt(waiter_calls, 2), fmt(owner_per_ttl, 3), fmt(waiter_per_lease, 3),
                              fmt(other, 2) + (sessions ? " (" + fmt(keepalives / secs, 2) + " keepalive)" : ""),
                              fmt(started, 2), fmt(stopped, 2)});
            json["results"].push_back({{"services", n},
                                       {"batch_max", batch_max},
                                       {"sessions", sessions},
                                       {"session_statements_per_s", keepalives / secs},
                                       {"calls_per_s", calls},
                                       {"owner_calls_per_ttl", owner_calls},
                                       {"waiter_calls_per_ttl_plus_transition", waiter_calls},
                                       {"threads", threads},
                                       {"connections", conns},
                                       {"server_connections", server_conns},
                                       {"rss_mb", rss / 1024.0},
                                       {"rss_growth_mb", (rss - rss0) / 1024.0},
                                       {"client_cpu_pct", cpu},
                                       {"server_cpu_pct", scpu},
                                       {"statements_per_s", stmts},
                                       {"renewals_per_s", renewals},
                                       {"owner_statements_per_ttl", owner_per_ttl},
                                       {"waiter_statements_per_ttl_plus_transition", waiter_per_lease},
                                       {"other_statements_per_s", other},
                                       {"start_s", started},
                                       {"stop_s", stopped}});
        }
    }
    t.print("Benchmark 4 — one process, one factory (threads = added by the factory; targets: 2 connections, fixed "
            "threads, owner <= 1 stmt/ttl, waiter <= 1 stmt/(ttl+transition), RSS < 64 MB at 10,000; batch 1 = one "
            "statement per call, the baseline)");
    write_file(json_path, json);
    return 0;
}
