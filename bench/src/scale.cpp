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
//
// Then --lockers N: N Lockers, each on a mutex of its own, taken with lock()
// one after another against raw libpq sending the client's acquire
// statement N times in a row (the floor: one round trip and one commit
// each) and lock_async() of all N (batched); and released by destroying
// them one after another against unlock() of each in turn (a commit each).
#include <simba/simba.hpp>

#include <future>

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

/// Mutexes named prefix% that the server counts as held.
long held(Conn& mon, const std::string& prefix) {
    return std::stol(mon.value("SELECT count(*) FROM simba_mutex_status WHERE starts_with(mutex, '" + prefix +
                               "') AND owner_id IS NOT NULL"));
}

void lockers_in_a_row(Conn& mon, int n, Json& json) {
    simba::pg::FactoryOptions fo;
    fo.application_name = "simba-bench-lockers";
    simba::pg::ContendServiceFactory factory("", fo);
    if (!factory.wait_connected(std::chrono::seconds(10))) std::fprintf(stderr, "bench: not connected after 10 s\n");
    const std::string tag = "bench-lockers-" + std::to_string(static_cast<long>(now_us())) + "-";
    auto make = [&](const std::string& prefix) {
        std::vector<std::unique_ptr<simba::Locker>> v;
        v.reserve(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i)
            v.push_back(std::make_unique<simba::Locker>(factory, prefix + std::to_string(i), "bench"));
        return v;
    };
    Conn raw;
    raw.exec("SET client_min_messages = warning");
    raw.prepare("acq", kClientAcquireSql);
    raw.prepare("rel", kClientReleaseSql);
    auto raw_in_a_row = [&](const char* stmt) {
        const double t = now_us();
        for (int i = 0; i < n; ++i) {
            const std::string name = tag + "raw-" + std::to_string(i);
            const char* params[] = {name.c_str(), "raw", "10000000", "6000000"};
            raw.run(stmt, std::string(stmt) == "acq" ? 4 : 2, params);
        }
        return (now_us() - t) / 1e6;
    };
    const double raw_acquire_s = raw_in_a_row("acq");
    const double raw_release_s = raw_in_a_row("rel");

    auto a = make(tag + "a-");
    double t0 = now_us();
    for (auto& l : a) l->lock();
    const double lock_s = (now_us() - t0) / 1e6;
    auto b = make(tag + "b-");
    t0 = now_us();
    std::vector<std::future<void>> taken;
    taken.reserve(b.size());
    for (auto& l : b) taken.push_back(l->lock_async());
    for (auto& f : taken) f.get();
    const double async_s = (now_us() - t0) / 1e6;

    const auto m0 = factory.metrics();
    t0 = now_us();
    a.clear();
    const double destroy_s = (now_us() - t0) / 1e6;
    while (held(mon, tag + "a-") > 0 && now_us() - t0 < 60e6) sleep_ms(2);
    const double free_s = (now_us() - t0) / 1e6;
    const auto m1 = factory.metrics();
    t0 = now_us();
    for (auto& l : b) l->unlock();
    const double unlock_s = (now_us() - t0) / 1e6;
    const auto m2 = factory.metrics();
    b.clear();

    const auto stmts = [](const simba::Metrics& x, const simba::Metrics& y) {
        return static_cast<double>(y.release_statements - x.release_statements);
    };
    Table t;
    t.rows.push_back({"lockers", "lock() in a row s", "raw acquire in a row s", "ratio", "lock_async() all s",
                      "destroyed s", "all free on the server s", "release stmts", "unlock() in a row s",
                      "release stmts (unlock)", "raw release in a row s", "ratio (free / unlock)"});
    t.rows.push_back({std::to_string(n), fmt(lock_s, 2), fmt(raw_acquire_s, 2), fmt(lock_s / raw_acquire_s, 2),
                      fmt(async_s, 2), fmt(destroy_s, 2), fmt(free_s, 2), fmt(stmts(m0, m1), 0), fmt(unlock_s, 2),
                      fmt(stmts(m1, m2), 0), fmt(raw_release_s, 2), fmt(free_s / unlock_s, 3)});
    t.print("Benchmark 4 — Lockers one after another, each on a mutex of its own, in one factory");
    json["lockers"] = {{"lockers", n},
                       {"lock_in_a_row_s", lock_s},
                       {"raw_acquire_in_a_row_s", raw_acquire_s},
                       {"raw_release_in_a_row_s", raw_release_s},
                       {"lock_async_all_s", async_s},
                       {"destroyed_s", destroy_s},
                       {"free_on_server_s", free_s},
                       {"destroy_release_statements", stmts(m0, m1)},
                       {"unlock_in_a_row_s", unlock_s},
                       {"unlock_release_statements", stmts(m1, m2)}};
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
    int lockers = 10000;
    cli.add_option("--lockers", lockers, "Lockers taken and released one after another (0: none)");
    CLI11_PARSE(cli, argc, argv);
    struct Run {
        int services, batch_max;
        bool sessions;
    };
    std::vector<Run> runs;
    const int batch = simba::pg::FactoryOptions{}.batch_max;
    // An empty list ("") parses as {0}: none.
    for (int n : sizes)
        if (n > 0) runs.push_back({n, batch, true});
    for (int n : per_lock)
        if (n > 0) runs.push_back({n, batch, false});
    for (int n : unbatched)
        if (n > 0) runs.push_back({n, 1, false});
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
    if (!runs.empty())
        t.print("Benchmark 4 — one process, one factory (threads = added by the factory; targets: 2 connections, fixed "
            "threads, owner <= 1 stmt/ttl, waiter <= 1 stmt/(ttl+transition), RSS < 64 MB at 10,000; batch 1 = one "
            "statement per call, the baseline)");
    if (lockers > 0) lockers_in_a_row(mon, lockers, json);
    write_file(json_path, json);
    return 0;
}
