// simba chaos worker: one process of the workload.
//
// One simba::pg::ContendServiceFactory contends for every mutex given (one
// service each); a separate libpqxx connection writes the ledger. While a
// service reports is_owner(), the worker writes to the ledger, each write a
// transaction guarded by simba_fence_check with the service's fence:
//
//   BEGIN; SELECT simba_fence_check(mutex, id, fence);  -- unless --no-fence-check
//   <work: --work-ms inside the transaction>;
//   INSERT INTO ledger (...) RETURNING id, clock_timestamp(); COMMIT;
//
// Every step goes to the event log (see common.hpp), read by the checker:
//   start  worker pid steady
//   id     worker mutex contender_id
//   acq    worker mutex fence steady_cb anchor_ns acquired_us ttl_us transition_us current_us owner
//   rel    worker mutex fence steady_cb
//   inv    worker mutex fence seq before_ns after_ns
//                                             (is_owner() was true at some instant between
//                                              the two steady times; then the write starts)
//   ok     worker mutex fence seq send_ns recv_ns row_id server_us
//   fail   worker mutex fence seq sqlstate
//   unk    worker mutex fence seq             (COMMIT sent, connection lost: outcome unknown)
//   lib    worker level message               (the client library's log)
//   stop   worker steady
//
// Usage: simba_chaos_worker --worker N --log FILE [--conninfo STR]
//        [--mutexes a,b,c] [--ttl-ms 1000] [--transition-ms 500]
//        [--work-ms 3] [--pause-ms 3] [--max-seconds 3600] [--hold-ms 0] [--ledger-timeout-ms 0]
//        [--no-fence-check]
// --hold-ms H: an owner hands a mutex over after holding it H/2..3H/2 ms
// (stop() releases it, NOTIFYing the waiters; start() contends again), so a
// run sees many changes of hands, not only those the faults force.
// --ledger-timeout-ms T: a ledger transaction unanswered for T ms has its
// socket shut down (a frozen or blackholed server would hold libpq's wait,
// and this loop with it, for good); its outcome is then fail or unk.
// Stops on SIGTERM/SIGINT (releasing its locks) or after --max-seconds.
#include <sys/socket.h>

#include <pqxx/pqxx>
#include <simba/simba.hpp>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

struct Args {
    int worker = 0;
    std::string log;
    std::string conninfo;
    std::vector<std::string> mutexes{"chaos-a", "chaos-b", "chaos-c"};
    int ttl_ms = 1000;
    int transition_ms = 500;
    int work_ms = 3;
    int pause_ms = 3;
    int max_seconds = 3600;
    int hold_ms = 0;
    int ledger_timeout_ms = 0;  // off
    bool fence_check = true;
};

/// Shuts down the ledger socket of a transaction past its deadline.
class LedgerWatchdog {
public:
    LedgerWatchdog() : t_([this] { run(); }) {}
    ~LedgerWatchdog() {
        done_.store(true);
        t_.join();
    }
    void arm(int fd, std::chrono::milliseconds timeout) {
        fd_.store(fd);
        deadline_.store(chaos::steady_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count());
    }
    void disarm() { fd_.store(-1); }

private:
    void run() {
        while (!done_.load()) {
            int fd = fd_.load();
            if (fd >= 0 && chaos::steady_ns() > deadline_.load() && fd_.compare_exchange_strong(fd, -1))
                ::shutdown(fd, SHUT_RDWR);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    std::atomic<int> fd_{-1};
    std::atomic<std::int64_t> deadline_{0};
    std::atomic<bool> done_{false};
    std::thread t_;
};

void add_options(CLI::App& cli, Args& a) {
    cli.add_option("--worker", a.worker, "this worker's number");
    cli.add_option("--log", a.log, "event log file")->required();
    cli.add_option("--conninfo", a.conninfo, "libpq connection string");
    cli.add_option("--mutexes", a.mutexes, "mutexes to contend for (comma-separated)")->delimiter(',');
    cli.add_option("--ttl-ms", a.ttl_ms, "lease ttl");
    cli.add_option("--transition-ms", a.transition_ms, "lease transition");
    cli.add_option("--work-ms", a.work_ms, "work inside each ledger transaction");
    cli.add_option("--pause-ms", a.pause_ms, "pause between writes");
    cli.add_option("--max-seconds", a.max_seconds, "hard time limit");
    cli.add_option("--hold-ms", a.hold_ms, "hand a mutex over after holding it H/2..3H/2 ms (0: never)");
    cli.add_flag("--fence-check,!--no-fence-check", a.fence_check, "guard each write with simba_fence_check");
    cli.add_option("--ledger-timeout-ms", a.ledger_timeout_ms,
                   "a ledger transaction's socket is shut down past this (0: never)");
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

int main(int argc, char** argv) {
    Args args;
    chaos::Options cli("simba chaos worker: one process of the workload (worker.cpp says what it logs)");
    add_options(cli, args);
    CLI11_PARSE(cli, argc, argv);
    if (args.mutexes.empty()) {
        std::cerr << "simba_chaos_worker: --mutexes: none given\n";
        return 2;
    }
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::signal(SIGPIPE, SIG_IGN);

    chaos::EventLog out(args.log);
    const int w = args.worker;
    out.write("start", w, ::getpid(), chaos::steady_ns());
    simba::set_log_handler([&out, w](simba::LogLevel level, const std::string& msg) {
        if (level >= simba::LogLevel::warning) out.write("lib", w, simba::to_string(level), msg);
    });

    simba::pg::FactoryOptions fo;
    fo.application_name = "simba-chaos-w" + std::to_string(w);
    fo.reconnect_max = std::chrono::milliseconds(1000);
    simba::pg::ContendServiceFactory factory(args.conninfo, fo);

    simba::ContendOptions co;
    co.ttl = std::chrono::milliseconds(args.ttl_ms);
    co.transition = std::chrono::milliseconds(args.transition_ms);

    std::vector<std::unique_ptr<simba::MutexContendService>> services;
    for (const auto& m : args.mutexes) {
        auto on_acq = [&out, w, m](const simba::MutexState& s) {
            const auto& a = s.after;
            out.write("acq", w, m, a.fence, chaos::steady_ns(),
                      std::chrono::duration_cast<std::chrono::nanoseconds>(a.anchor.time_since_epoch()).count(),
                      a.acquired_at.count(), a.ttl_at.count(), a.transition_at.count(), a.current_at.count(),
                      a.owner_id);
        };
        auto on_rel = [&out, w, m](const simba::MutexState& s) {
            out.write("rel", w, m, s.before.fence, chaos::steady_ns());
        };
        auto contender = std::make_shared<simba::FunctionContender>(m, on_acq, on_rel);
        out.write("id", w, m, contender->contender_id());
        services.push_back(factory.create(contender, co));
    }
    for (auto& s : services) s->start();

    const std::string ledger_conninfo =
        args.conninfo + " application_name=simba-chaos-ledger" + std::to_string(w) + " connect_timeout=2";
    std::mt19937 rng(static_cast<unsigned>(::getpid()));
    std::vector<std::int64_t> hold_fence(services.size(), 0);
    std::vector<std::chrono::steady_clock::time_point> hold_until(services.size());
    std::unique_ptr<pqxx::connection> db;
    LedgerWatchdog watchdog;
    int backoff_ms = 50;
    std::int64_t seq = 0;
    const auto hard_end = std::chrono::steady_clock::now() + std::chrono::seconds(args.max_seconds);

    while (!g_stop.load() && std::chrono::steady_clock::now() < hard_end) {
        bool wrote = false;
        for (std::size_t si = 0; si < services.size(); ++si) {
            auto& svc = services[si];
            if (g_stop.load()) break;
            if (args.hold_ms > 0 && hold_fence[si] != 0 && std::chrono::steady_clock::now() >= hold_until[si]) {
                hold_fence[si] = 0;
                if (svc->is_owner()) {
                    out.write("handover", w, svc->mutex(), svc->fence(), chaos::steady_ns());
                    svc->stop();
                    svc->start();
                    continue;
                }
            }
            const std::int64_t t_check = chaos::steady_ns();  // before the check: is_owner() held at or after it
            if (!svc->is_owner()) continue;
            const std::int64_t fence = svc->fence();
            const std::int64_t t_owner = chaos::steady_ns();  // ... and at or before this
            if (fence <= 0) continue;
            if (args.hold_ms > 0 && hold_fence[si] != fence) {
                hold_fence[si] = fence;
                hold_until[si] = std::chrono::steady_clock::now() +
                                 std::chrono::milliseconds(std::uniform_int_distribution<int>(
                                     args.hold_ms / 2, args.hold_ms * 3 / 2)(rng));
            }
            const std::string& m = svc->mutex();
            const std::string& id = svc->contender_id();
            ++seq;
            wrote = true;
            out.write("inv", w, m, fence, seq, t_check, t_owner);
            if (!db) {
                try {
                    db = std::make_unique<pqxx::connection>(ledger_conninfo);
                    backoff_ms = 50;
                } catch (const std::exception& e) {
                    out.write("fail", w, m, fence, seq, "08001");
                    out.write("lib", w, "ledger-connect", e.what());
                    sleep_ms(backoff_ms);
                    backoff_ms = std::min(backoff_ms * 2, 500);
                    continue;
                }
            }
            bool committing = false;
            if (args.ledger_timeout_ms > 0) watchdog.arm(db->sock(), std::chrono::milliseconds(args.ledger_timeout_ms));
            try {
                pqxx::work tx(*db);
                if (args.fence_check) tx.exec_params("SELECT simba_fence_check($1, $2, $3)", m, id, fence);
                if (args.work_ms > 0) sleep_ms(args.work_ms);  // the holder's work, inside the transaction
                const std::int64_t send = chaos::steady_ns();
                auto row = tx.exec_params1(
                    "INSERT INTO ledger (mutex, writer, fence, worker, seq) VALUES ($1, $2, $3, $4, $5)"
                    " RETURNING id, (extract(epoch FROM clock_timestamp()) * 1000000)::int8",
                    m, id, fence, w, seq);
                const std::int64_t recv = chaos::steady_ns();
                committing = true;
                tx.commit();
                out.write("ok", w, m, fence, seq, send, recv, row[0].as<std::int64_t>(), row[1].as<std::int64_t>());
            } catch (const pqxx::in_doubt_error&) {
                watchdog.disarm();  // before db.reset() closes the socket
                out.write("unk", w, m, fence, seq);
                db.reset();
            } catch (const pqxx::broken_connection&) {
                watchdog.disarm();  // before db.reset() closes the socket
                if (committing) out.write("unk", w, m, fence, seq);
                else out.write("fail", w, m, fence, seq, "08006");
                db.reset();
            } catch (const pqxx::sql_error& e) {
                watchdog.disarm();  // before db.reset() closes the socket
                std::string state = e.sqlstate().empty() ? "XX000" : e.sqlstate();
                if (e.sqlstate().empty()) out.write("lib", w, "ledger-error", e.what());
                // A terminated backend or a crashed server: the outcome of a
                // COMMIT is then unknown, of anything before it a failure.
                if (committing && (state.rfind("57P", 0) == 0 || state.rfind("08", 0) == 0))
                    out.write("unk", w, m, fence, seq);
                else
                    out.write("fail", w, m, fence, seq, state);
                if (!db->is_open() || state.rfind("57P", 0) == 0 || state.rfind("08", 0) == 0) db.reset();
            } catch (const std::exception& e) {
                watchdog.disarm();  // before db.reset() closes the socket
                out.write(committing ? "unk" : "fail", w, m, fence, seq, committing ? "" : "XX000");
                out.write("lib", w, "ledger-error", e.what());
                db.reset();
            }
            watchdog.disarm();
        }
        sleep_ms(wrote ? args.pause_ms : 5);
    }
    for (auto& s : services) {
        try {
            s->stop();
        } catch (const std::exception& e) {
            out.write("lib", w, "stop", e.what());
        }
    }
    out.write("stop", w, chaos::steady_ns());
    return 0;
}
