// Benchmark 3: crash failover — SIGKILL the owner process, time until a
// waiter in another process gets on_acquired.
//
// T trials run side by side on T mutexes: T owner processes (each its own
// factory and service, forked before any thread exists) and one waiter
// process holding T services in one factory. Once every waiter has seen its
// owner, the owners are killed one by one at uniformly random offsets over
// one ttl (so kills land at every phase of the renewal cycle). Latency =
// on_acquired in the waiter - the kill. Bound = ttl + transition + jitter max
// (the lease can have been renewed just before the kill).
#include <simba/simba.hpp>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <atomic>
#include <mutex>
#include <random>

#include "common.hpp"

using namespace bench;

namespace {

constexpr int kMax = 500;
struct Shared {
    std::atomic<int> owned[kMax];
};

}  // namespace

int main(int argc, char** argv) {
    int trials = 50;
    double ttl_s = 1, tr_s = 1;
    std::string label, json_path;
    Options cli("benchmark 3: crash failover, SIGKILL of the owner process -> on_acquired elsewhere");
    cli.add_option("--trials", trials, "owners to kill")->check(CLI::Range(1, kMax));
    cli.add_option("--ttl", ttl_s, "lease ttl, seconds");
    cli.add_option("--transition", tr_s, "lease transition, seconds");
    cli.add_option("--label", label, "appended to the table's title");
    cli.add_option("--json", json_path, "write the results here");
    CLI11_PARSE(cli, argc, argv);
    if (trials > kMax) throw std::runtime_error("too many trials");
    simba::ContendOptions opts;
    opts.ttl = std::chrono::milliseconds(static_cast<long>(ttl_s * 1000));
    opts.transition = std::chrono::milliseconds(static_cast<long>(tr_s * 1000));
    const double jitter_max_s = (tr_s > 0 ? opts.jitter.normal.max : opts.jitter.zero_transition.max).count() / 1000.0;
    const double bound_ms = (ttl_s + tr_s + jitter_max_s) * 1000;
    const std::string tag = "bench-fo-" + std::to_string(getpid()) + "-";
    {
        Conn c;
        c.exec("SET client_min_messages = warning");
        c.exec("CREATE EXTENSION IF NOT EXISTS simba");
    }
    auto* sh = static_cast<Shared*>(
        mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (sh == MAP_FAILED) throw std::runtime_error("mmap");
    new (sh) Shared();
    for (int i = 0; i < trials; ++i) sh->owned[i] = 0;

    std::printf("benchmark 3%s: %d owners SIGKILLed, ttl %.1f s, transition %.1f s, bound %.0f ms\n",
                label.c_str(), trials, ttl_s, tr_s, bound_ms);
    std::fflush(stdout);
    std::vector<pid_t> pids;
    for (int i = 0; i < trials; ++i) {
        pid_t pid = fork();
        if (pid == 0) {  // an owner: one factory, one service, then wait to be killed
            try {
                simba::pg::ContendServiceFactory f;
                auto c = std::make_shared<simba::FunctionContender>(
                    tag + std::to_string(i), [sh, i](const simba::MutexState&) { sh->owned[i] = 1; }, nullptr,
                    "owner-" + std::to_string(i));
                auto s = f.create(c, opts);
                s->start();
                for (;;) pause();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "owner %d: %s\n", i, e.what());
                _exit(1);
            }
        }
        pids.push_back(pid);
    }
    double until = now_us() + 30e6;
    for (int i = 0; i < trials; ++i)
        while (!sh->owned[i].load()) {
            if (now_us() > until) throw std::runtime_error("owners did not all acquire");
            sleep_ms(5);
        }

    std::mutex m;
    std::vector<double> t_acq(trials, NAN), t_kill(trials, NAN);
    int acquired = 0;
    simba::pg::ContendServiceFactory factory;
    std::vector<std::unique_ptr<simba::MutexContendService>> waiters;
    for (int i = 0; i < trials; ++i) {
        auto c = std::make_shared<simba::FunctionContender>(
            tag + std::to_string(i),
            [&, i](const simba::MutexState&) {
                double t = now_us();
                std::lock_guard<std::mutex> lock(m);
                if (std::isnan(t_acq[i])) {
                    t_acq[i] = t;
                    ++acquired;
                }
            },
            nullptr, "waiter-" + std::to_string(i));
        waiters.push_back(factory.create(c, opts));
        waiters.back()->start();
    }
    until = now_us() + 30e6;
    for (int i = 0; i < trials; ++i)
        while (waiters[i]->state().after.owner_id != "owner-" + std::to_string(i)) {
            if (now_us() > until) throw std::runtime_error("waiters did not see their owners");
            sleep_ms(5);
        }
    // Kill schedule: uniform over one ttl.
    std::mt19937_64 rng(2024);
    std::uniform_real_distribution<double> off(0, ttl_s * 1e6);
    std::vector<std::pair<double, int>> plan;
    double start = now_us();
    for (int i = 0; i < trials; ++i) plan.push_back({start + off(rng), i});
    std::sort(plan.begin(), plan.end());
    for (auto& [at, i] : plan) {
        double d = at - now_us();
        if (d > 0) sleep_ms(d / 1000);
        {
            std::lock_guard<std::mutex> lock(m);
            t_kill[i] = now_us();
        }
        kill(pids[i], SIGKILL);
    }
    for (auto pid : pids) waitpid(pid, nullptr, 0);
    until = now_us() + bound_ms * 1000 + 5e6;
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(m);
            if (acquired == trials) break;
        }
        if (now_us() > until) break;
        sleep_ms(10);
    }
    std::vector<double> lat;
    int within = 0, missing = 0;
    {
        std::lock_guard<std::mutex> lock(m);
        for (int i = 0; i < trials; ++i) {
            if (std::isnan(t_acq[i])) {
                ++missing;
                continue;
            }
            double ms = (t_acq[i] - t_kill[i]) / 1000.0;
            lat.push_back(ms);
            if (ms <= bound_ms) ++within;
        }
    }
    for (auto& w : waiters) w->stop();
    auto s = summarize(lat);
    Table t;
    t.rows.push_back({"ttl / transition", "trials", "min ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "bound ms",
                      "max/bound", "within bound"});
    t.rows.push_back({fmt(ttl_s, 0) + " s / " + fmt(tr_s, 0) + " s", std::to_string(s.n), fmt(s.min, 0),
                      fmt(s.p50, 0), fmt(s.p90, 0), fmt(s.p99, 0), fmt(s.max, 0), fmt(bound_ms, 0),
                      fmt(s.max / bound_ms), std::to_string(within) + "/" + std::to_string(trials)});
    t.print("Benchmark 3 — crash failover" + label + ": SIGKILL of the owner process -> on_acquired elsewhere");
    write_file(json_path, Json{{"ttl_s", ttl_s}, {"transition_s", tr_s}, {"bound_ms", bound_ms},
                               {"latency_ms", json_summary(s)}, {"within_bound", within}, {"missing", missing},
                               {"trials", trials}});
    return missing == 0 ? 0 : 1;
}
