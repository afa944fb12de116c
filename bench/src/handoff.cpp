// Benchmark 2: handoff latency — a release in one process until the next
// holder in another process knows it holds the lock.
//
//   push   two processes, each with its own simba::pg::ContendServiceFactory
//          (LISTEN simba). They hand one mutex back and forth: the holder
//          waits until the other's service has seen it as owner (so the
//          other is waiting on its poll schedule), stamps t0 and calls
//          stop() (release + NOTIFY); the other stamps t1 in on_acquired.
//   poll   Simba's JDBC model: no LISTEN. A releaser process and a poller
//          process with one thread and connection per mutex, K mutexes in
//          parallel. The poller calls simba_acquire on the ContendPeriod
//          schedule of the client library (transition_at + jitter), the
//          releaser holds a random time inside its ttl, stamps t0 and calls
//          simba_release; the poller stamps t1 when its attempt wins.
// Both use the same ttl / transition (default 1 s / 1 s). Stamps come from
// CLOCK_MONOTONIC (std::chrono::steady_clock), comparable across processes.
#include <simba/simba.hpp>
#include <sys/mman.h>
#include <sys/wait.h>

#include <atomic>
#include <random>

#include "common.hpp"

using namespace bench;

namespace {

constexpr int kMaxN = 20000;
constexpr int kMaxPairs = 256;

struct Shared {
    std::atomic<long> k;         // handoff in progress (push)
    std::atomic<long> acquired;  // last handoff index whose new holder reported (push)
    std::atomic<long> ready;     // handoff index whose waiter is waiting (push)
    std::atomic<int> failed;                  // push: either process failed
    std::atomic<int> pair_failed[kMaxPairs];  // poll: that pair's releaser or poller failed
    std::atomic<long> held[kMaxPairs];        // poll: trial the releaser holds
    std::atomic<long> contending[kMaxPairs];  // poll: trial the poller has seen held
    std::atomic<long> done[kMaxPairs];        // poll: trial the poller won and released
    double t_rel[kMaxN];
    double t_acq[kMaxN];
};

Shared* sh = nullptr;

/// Waits for `pred`; throws on timeout or once `failed` (the peer's) is set.
void wait_for(const std::function<bool()>& pred, double timeout_s, const char* what,
              const std::atomic<int>& failed = sh->failed) {
    double until = now_us() + timeout_s * 1e6;
    while (!pred()) {
        if (failed.load()) throw std::runtime_error("peer failed");
        if (now_us() > until) throw std::runtime_error(std::string("timeout waiting for ") + what);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

// ---------------------------------------------------------------- push

void push_process(int p, long n, std::chrono::milliseconds ttl, std::chrono::milliseconds transition) {
    const std::string me = "push-" + std::to_string(p), other = "push-" + std::to_string(1 - p);
    simba::pg::ContendServiceFactory factory("", simba::pg::FactoryOptions{});
    if (!factory.wait_connected(std::chrono::seconds(10))) throw std::runtime_error("factory did not connect");
    auto contender = std::make_shared<simba::FunctionContender>(
        "bench-handoff",
        [](const simba::MutexState&) {
            double t = now_us();
            long idx = sh->k.load();
            if (idx >= 0) sh->t_acq[idx] = t;
            sh->acquired.store(idx);
        },
        nullptr, me);
    simba::ContendOptions o;
    o.ttl = ttl;
    o.transition = transition;
    auto svc = factory.create(contender, o);
    auto waiting_on_other = [&] { return svc->state().after.owner_id == other; };
    std::mt19937_64 rng(42 + p);
    std::uniform_int_distribution<int> settle_us(500, 2000);

    if (p == 0) {
        svc->start();
        wait_for([] { return sh->acquired.load() == -1; }, 10, "first owner");
    } else {
        wait_for([] { return sh->acquired.load() == -1; }, 10, "first owner");
        svc->start();
        wait_for(waiting_on_other, 10, "waiter to see the owner");
        sh->ready.store(0);
    }
    for (long k = 0; k < n; ++k) {
        if (k % 2 == p) {  // holder of handoff k
            wait_for([k] { return sh->ready.load() >= k; }, 10, "waiter ready");
            std::this_thread::sleep_for(std::chrono::microseconds(settle_us(rng)));
            sh->k.store(k);
            sh->t_rel[k] = now_us();
            svc->stop();
            wait_for([k] { return sh->acquired.load() >= k; }, 30, "handoff");
            if (k + 1 < n) {
                svc->start();
                wait_for(waiting_on_other, 10, "waiter to see the owner");
                sh->ready.store(k + 1);
            }
        } else {
            wait_for([k] { return sh->acquired.load() >= k; }, 30, "handoff");
        }
    }
    if (svc->running()) svc->stop();
}

// ---------------------------------------------------------------- poll

/// One simba_acquire round trip, parsed the way the client library does.
simba::MutexOwner acquire(Conn& c, const std::string& mutex, const std::string& id, long ttl_us, long tr_us) {
    std::string ttl = std::to_string(ttl_us), tr = std::to_string(tr_us);
    const char* p[] = {mutex.c_str(), id.c_str(), ttl.c_str(), tr.c_str()};
    auto anchor = simba::SteadyClock::now();
    PGresult* r = PQexecPrepared(c.c, "acq", 4, p, nullptr, nullptr, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        std::string msg = PQresultErrorMessage(r);
        PQclear(r);
        throw std::runtime_error("simba_acquire: " + msg);
    }
    auto num = [&](int col) -> long long { return PQgetisnull(r, 0, col) ? 0 : std::atoll(PQgetvalue(r, 0, col)); };
    simba::MutexOwner o;
    o.mutex = mutex;
    o.owner_id = PQgetisnull(r, 0, 1) ? "" : PQgetvalue(r, 0, 1);
    o.acquired_at = std::chrono::microseconds(num(2));
    o.ttl_at = std::chrono::microseconds(num(3));
    o.transition_at = std::chrono::microseconds(num(4));
    o.version = num(5);
    o.fence = num(6);
    o.current_at = std::chrono::microseconds(num(7));
    o.anchor = anchor;
    PQclear(r);
    return o;
}

void release(Conn& c, const std::string& mutex, const std::string& id) {
    const char* p[] = {mutex.c_str(), id.c_str()};
    c.run("rel", 2, p);
}

/// Each pair fails alone: a timeout in one (a thread descheduled for long on
/// a loaded machine) ends that pair's trials, not every pair's ("peer
/// failed" in 171 pairs once). Throws if any of this process's pairs failed.
void poll_process(int role, int pairs, int trials, long ttl_us, long tr_us) {
    std::vector<std::thread> th;
    std::atomic<int> failures{0};
    for (int j = 0; j < pairs; ++j) {
        th.emplace_back([=, &failures] {
            try {
                Conn c;
                c.prepare("acq", kClientAcquireSql);
                c.prepare("rel", kClientReleaseSql);
                const std::string m = "bench-poll-" + std::to_string(j);
                std::mt19937_64 rng(1000 + j);
                if (role == 0) {  // releaser
                    const std::string me = "releaser";
                    std::uniform_real_distribution<double> hold_ms(0, 0.9 * ttl_us / 1000.0);
                    for (int i = 0; i < trials; ++i) {
                        for (;;) {  // the poller released: free now
                            if (acquire(c, m, me, ttl_us, tr_us).owner_id == me) break;
                            sleep_ms(5);
                        }
                        sh->held[j].store(i);
                        wait_for([=] { return sh->contending[j].load() >= i || sh->done[j].load() >= i; }, 30,
                                 "poller attempt", sh->pair_failed[j]);
                        if (sh->done[j].load() >= i) {
                            // The poller won without ever seeing us: a thread
                            // descheduled past our lease on a loaded machine. No
                            // handoff to time; the trial is left out (t_acq NaN).
                            sh->t_acq[j * trials + i] = NAN;
                            continue;
                        }
                        sleep_ms(hold_ms(rng));
                        sh->t_rel[j * trials + i] = now_us();
                        release(c, m, me);
                        wait_for([=] { return sh->done[j].load() >= i; }, 60, "poller acquire", sh->pair_failed[j]);
                    }
                } else {  // poller: simba_acquire on the ContendPeriod schedule, no LISTEN
                    const std::string me = "poller";
                    simba::ContendPeriod period(me, simba::Jitter{}, 77 + j);
                    for (int i = 0; i < trials; ++i) {
                        wait_for([=] { return sh->held[j].load() >= i; }, 30, "releaser hold", sh->pair_failed[j]);
                        for (;;) {
                            auto o = acquire(c, m, me, ttl_us, tr_us);
                            if (o.owner_id == me) {
                                if (sh->contending[j].load() >= i) sh->t_acq[j * trials + i] = now_us();
                                break;
                            }
                            sh->contending[j].store(i);
                            auto now = simba::SteadyClock::now();
                            std::this_thread::sleep_for(period.ensure_next_delay(o, now));
                        }
                        release(c, m, me);
                        sh->done[j].store(i);
                    }
                }
            } catch (const std::exception& e) {
                std::fprintf(stderr, "poll %s %d: %s\n", role ? "poller" : "releaser", j, e.what());
                sh->pair_failed[j].store(1);
                ++failures;
            }
        });
    }
    for (auto& t : th) t.join();
    if (failures) throw std::runtime_error(std::to_string(failures.load()) + " pair(s) failed");
}

int run_children(const std::function<void(int)>& body) {
    pid_t pids[2];
    for (int p = 0; p < 2; ++p) {
        pids[p] = fork();
        if (pids[p] == 0) {
            int rc = 0;
            try {
                body(p);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "process %d: %s\n", p, e.what());
                sh->failed.store(1);
                rc = 1;
            }
            std::fflush(stderr);
            _exit(rc);
        }
    }
    int rc = 0;
    for (auto pid : pids) {
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
    }
    return rc;
}

}  // namespace

int main(int argc, char** argv) {
    long n = 1000;
    int pairs = 100;
    double ttl_s = 1, tr_s = 1;
    std::string json_path;
    Options cli("benchmark 2: handoff latency, release in one process -> holder in another");
    cli.add_option("--handoffs", n, "handoffs per method (push, poll)")->check(CLI::Range(1L, static_cast<long>(kMaxN)));
    cli.add_option("--pairs", pairs, "process pairs")->check(CLI::Range(1, kMaxPairs));
    cli.add_option("--ttl", ttl_s, "lease ttl, seconds");
    cli.add_option("--transition", tr_s, "lease transition, seconds");
    cli.add_option("--json", json_path, "write the results here (and the chart's samples beside it, .dat)");
    CLI11_PARSE(cli, argc, argv);
    if (n > kMaxN || pairs > kMaxPairs) throw std::runtime_error("too many handoffs or pairs");
    int trials = static_cast<int>((n + pairs - 1) / pairs);

    {  // the extension, and a mutex the client library never saw
        Conn c;
        c.exec("SET client_min_messages = warning");
        c.exec("CREATE EXTENSION IF NOT EXISTS simba");
    }
    void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) throw std::runtime_error("mmap");
    sh = new (mem) Shared();
    auto reset = [&] {
        sh->k = -1;
        sh->acquired = -2;
        sh->ready = -1;
        sh->failed = 0;
        for (int j = 0; j < kMaxPairs; ++j) {
            sh->held[j] = sh->contending[j] = sh->done[j] = -1;
            sh->pair_failed[j] = 0;
        }
        for (int i = 0; i < kMaxN; ++i) sh->t_rel[i] = sh->t_acq[i] = NAN;
    };
    auto ttl = std::chrono::milliseconds(static_cast<long>(ttl_s * 1000));
    auto tr = std::chrono::milliseconds(static_cast<long>(tr_s * 1000));

    std::printf("benchmark 2: %ld handoffs each way, ttl %.1f s, transition %.1f s\n", n, ttl_s, tr_s);
    std::fflush(stdout);
    reset();
    double t0 = now_us();
    int rc = run_children([&](int p) { push_process(p, n, ttl, tr); });
    double push_wall = (now_us() - t0) / 1e6;
    std::vector<double> push;
    for (long i = 0; i < n; ++i)
        if (!std::isnan(sh->t_acq[i])) push.push_back((sh->t_acq[i] - sh->t_rel[i]) / 1000.0);
    std::fprintf(stderr, "  push: %zu handoffs in %.1f s\n", push.size(), push_wall);

    reset();
    t0 = now_us();
    rc |= run_children([&](int p) { poll_process(p, pairs, trials, ttl_s * 1e6, tr_s * 1e6); });
    double poll_wall = (now_us() - t0) / 1e6;
    std::vector<double> poll;
    for (long i = 0; i < pairs * trials; ++i)
        if (!std::isnan(sh->t_acq[i])) poll.push_back((sh->t_acq[i] - sh->t_rel[i]) / 1000.0);
    int failed_pairs = 0;
    for (int j = 0; j < pairs; ++j) failed_pairs += sh->pair_failed[j].load() ? 1 : 0;
    std::fprintf(stderr, "  poll: %zu handoffs in %.1f s (%d in parallel, %d failed)\n", poll.size(), poll_wall, pairs,
                 failed_pairs);

    auto a = summarize(push), b = summarize(poll);
    Table t;
    t.rows.push_back({"path", "handoffs", "p50 ms", "p90 ms", "p99 ms", "max ms", "mean ms"});
    t.rows.push_back({"push (client library, NOTIFY)", std::to_string(a.n), fmt(a.p50, 3), fmt(a.p90, 3),
                      fmt(a.p99, 3), fmt(a.max, 3), fmt(a.mean, 3)});
    t.rows.push_back({"polling only (JDBC model)", std::to_string(b.n), fmt(b.p50, 1), fmt(b.p90, 1),
                      fmt(b.p99, 1), fmt(b.max, 1), fmt(b.mean, 1)});
    t.rows.push_back({"ratio polling / push", "", fmt(b.p50 / a.p50, 0) + "x", fmt(b.p90 / a.p90, 0) + "x",
                      fmt(b.p99 / a.p99, 0) + "x", fmt(b.max / a.max, 0) + "x", fmt(b.mean / a.mean, 0) + "x"});
    t.print("Benchmark 2 — handoff latency, release in one process -> holder in another (ttl " + fmt(ttl_s, 1) +
            " s, transition " + fmt(tr_s, 1) + " s; targets: push p99 <= 5 ms, >= 100x better than polling)");
    write_file(json_path, Json{{"ttl_s", ttl_s}, {"transition_s", tr_s}, {"push_ms", json_summary(a)},
                               {"poll_ms", json_summary(b)}, {"poll_failed_pairs", failed_pairs},
                               {"ratio_p50", b.p50 / a.p50},
                               {"ratio_p99", b.p99 / a.p99}});
    // raw samples for the chart
    std::string raw = json_path.empty() ? "" : json_path.substr(0, json_path.rfind('.')) + ".dat";
    if (!raw.empty()) {
        std::ofstream f(raw);
        std::sort(push.begin(), push.end());
        std::sort(poll.begin(), poll.end());
        f << "# fraction push_ms poll_ms\n";
        std::size_t m = std::max(push.size(), poll.size());
        for (std::size_t i = 0; i < m; ++i) {
            double fr = (i + 1.0) / m;
            auto at = [&](const std::vector<double>& v) {
                return v.empty() ? NAN : v[std::min(v.size() - 1, static_cast<std::size_t>(fr * v.size() - 1e-9))];
            };
            f << fr << " " << at(push) << " " << at(poll) << "\n";
        }
    }
    return rc;
}
