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
// The same factory also runs the lockers of the new primitives, each on a
// thread of its own with its own ledger connection (every fenced write is
// the same transaction shape, its check skipped with --no-fence-check):
//   --rwlock NAME   a simba::SharedLocker: a random mix of read holds and
//                   write holds (some downgraded half-way); while holding,
//                   rows in rw_ledger checked by simba_rwlock_fence_check
//   --multi a,b,c   a simba::MultiLocker over those mutexes, taken only in
//                   the multi window (--multi-period-ms, --multi-window-ms:
//                   the steady clock, the same for every worker), in which
//                   the services of those mutexes stand aside (stopped), so
//                   the multi-locks are not starved; while holding, one
//                   ledger row per member, each member's simba_fence_check in
//                   the same transaction
//   --fair M        a simba::Locker with ContendOptions::fair on mutex M,
//                   queueing again after each hold; ledger rows as a service's
//
// Every step goes to the event log (see common.hpp), read by the checker:
//   start  worker pid steady
//   id     worker mutex contender_id      (a service's, or the fair Locker's)
//   acq    worker mutex fence steady_cb anchor_ns acquired_us ttl_us transition_us current_us owner
//   rel    worker mutex fence steady_cb
//   inv    worker mutex fence seq before_ns after_ns
//                                             (is_owner() was true at some instant between
//                                              the two steady times; then the write starts)
//   ok     worker mutex fence seq send_ns recv_ns row_id server_us
//   fail   worker mutex fence seq sqlstate
//   unk    worker mutex fence seq             (COMMIT sent, connection lost: outcome unknown)
//   lib    worker level message               (the client library's log)
//   yield / unyield worker mutex steady        (a multi-lock member's service stood aside / contends again)
//   stop   worker steady
// The read-write lock:
//   rwid   worker rwlock contender_id
//   rwacq  worker rwlock mode fence acquired_us steady   (lock() or lock_shared() returned)
//   rwinv  worker rwlock mode fence acquired_us seq before_ns after_ns
//   rwok   worker rwlock mode fence seq send_ns recv_ns row_id server_us
//   rwfail worker rwlock mode fence seq sqlstate
//   rwunk  worker rwlock mode fence seq
//   rwdown worker rwlock fence ok steady       (downgrade() returned ok = 1 or 0, or threw: error)
//   rwrel  worker rwlock mode steady           (unlock() or unlock_shared() called)
// The multi-lock (MEMBERS: mutex:fence,... in byte order of the names):
//   mid    worker contender_id mutex,mutex,...
//   macq   worker steady acquired_us MEMBERS
//   minv   worker seq before_ns after_ns MEMBERS
//   mok    worker seq send_ns recv_ns row_id,row_id,... server_us   (rows in member order)
//   mfail  worker seq sqlstate
//   munk   worker seq
//   mrel   worker steady
// The fair lock (its writes are inv/ok/fail/unk lines of its mutex):
//   fwait  worker mutex steady                 (lock() called)
//   facq   worker mutex fence acquired_us steady   (lock() returned: held)
//   fdone  worker mutex steady why             (lock() ended without a hold)
//   frel   worker mutex fence steady           (unlock() called)
//
// Usage: simba_chaos_worker --worker N --log FILE [--conninfo STR]
//        [--mutexes a,b,c] [--ttl-ms 1000] [--transition-ms 500]
//        [--work-ms 3] [--pause-ms 3] [--max-seconds 3600] [--hold-ms 0] [--ledger-timeout-ms 0]
//        [--no-fence-check] [--rwlock NAME] [--multi a,b,c] [--fair M] (more: --help)
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
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
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
    // The new primitives' lockers (off unless named).
    std::string rwlock;
    int rw_write_pct = 25;
    int rw_downgrade_pct = 30;
    std::vector<std::string> multi;
    int multi_period_ms = 12000;
    int multi_window_ms = 4000;
    std::string fair;
    int fair_ttl_ms = 2000;
    int fair_transition_ms = 1000;
    int locker_hold_ms = 400;   // a locker holds H/2..3H/2 ms
    int locker_pause_ms = 40;   // between a locker's writes
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

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

/// One ledger connection (one per thread: libpqxx connections are not
/// shared) and the outcome rules of a fenced write.
class Ledger {
public:
    /// What the body of a write tells: its INSERT's steady send and receive
    /// times, the rows' ids and the server's clock_timestamp() at the INSERT.
    struct Done {
        std::int64_t send = 0, recv = 0, server_us = 0;
        std::vector<std::int64_t> ids;
    };
    enum class Outcome { ok, fail, unknown };
    struct Result {
        Outcome outcome = Outcome::fail;
        std::string sqlstate;
        Done done;
    };

    Ledger(chaos::EventLog& out, int w, const std::string& conninfo, const std::string& app, int timeout_ms)
        : out_(out), w_(w), timeout_ms_(timeout_ms),
          conninfo_(conninfo + " application_name=" + app + " connect_timeout=2") {}

    /// One transaction: `body` runs the checks, the work and the INSERT(s),
    /// then it commits. A failure before COMMIT is fail (with its SQLSTATE),
    /// a lost connection during COMMIT unknown.
    Result write(const std::function<Done(pqxx::work&)>& body) {
        Result r;
        if (!db_) {
            try {
                db_ = std::make_unique<pqxx::connection>(conninfo_);
                backoff_ms_ = 50;
            } catch (const std::exception& e) {
                out_.write("lib", w_, "ledger-connect", e.what());
                sleep_ms(backoff_ms_);
                backoff_ms_ = std::min(backoff_ms_ * 2, 500);
                r.sqlstate = "08001";
                return r;
            }
        }
        bool committing = false;
        if (timeout_ms_ > 0) watchdog_.arm(db_->sock(), std::chrono::milliseconds(timeout_ms_));
        try {
            pqxx::work tx(*db_);
            r.done = body(tx);
            committing = true;
            tx.commit();
            r.outcome = Outcome::ok;
        } catch (const pqxx::in_doubt_error&) {
            watchdog_.disarm();  // before db_.reset() closes the socket
            r.outcome = Outcome::unknown;
            db_.reset();
        } catch (const pqxx::broken_connection&) {
            watchdog_.disarm();  // before db_.reset() closes the socket
            if (committing) r.outcome = Outcome::unknown;
            else r.sqlstate = "08006";
            db_.reset();
        } catch (const pqxx::sql_error& e) {
            watchdog_.disarm();  // before db_.reset() closes the socket
            std::string state = e.sqlstate().empty() ? "XX000" : e.sqlstate();
            if (e.sqlstate().empty()) out_.write("lib", w_, "ledger-error", e.what());
            // A terminated backend or a crashed server: the outcome of a
            // COMMIT is then unknown, of anything before it a failure.
            if (committing && (state.rfind("57P", 0) == 0 || state.rfind("08", 0) == 0))
                r.outcome = Outcome::unknown;
            else
                r.sqlstate = state;
            if (!db_->is_open() || state.rfind("57P", 0) == 0 || state.rfind("08", 0) == 0) db_.reset();
        } catch (const std::exception& e) {
            watchdog_.disarm();  // before db_.reset() closes the socket
            if (committing) r.outcome = Outcome::unknown;
            else r.sqlstate = "XX000";
            out_.write("lib", w_, "ledger-error", e.what());
            db_.reset();
        }
        watchdog_.disarm();
        return r;
    }

private:
    chaos::EventLog& out_;
    const int w_;
    const int timeout_ms_;
    const std::string conninfo_;
    std::unique_ptr<pqxx::connection> db_;
    LedgerWatchdog watchdog_;
    int backoff_ms_ = 50;
};

/// Logs a write's outcome as TAG (ok), FAIL_TAG or UNK_TAG lines: `key`
/// are the fields after the worker, before the rest.
template <typename... Key>
void log_outcome(chaos::EventLog& out, const Ledger::Result& r, const char* ok, const char* fail, const char* unk,
                 int w, const Key&... key) {
    if (r.outcome == Ledger::Outcome::ok) {
        std::string ids;
        for (auto id : r.done.ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
        out.write(ok, w, key..., r.done.send, r.done.recv, ids, r.done.server_us);
    } else if (r.outcome == Ledger::Outcome::unknown) {
        out.write(unk, w, key...);
    } else {
        out.write(fail, w, key..., r.sqlstate);
    }
}

/// The INSERT's timing and result rows (id, server time in us) into `d`.
void returned(Ledger::Done& d, const pqxx::result& rows) {
    for (const auto& row : rows) {
        d.ids.push_back(row[0].as<std::int64_t>());
        d.server_us = row[1].as<std::int64_t>();
    }
}

constexpr const char* kReturning = " RETURNING id, (extract(epoch FROM clock_timestamp()) * 1000000)::int8";

/// A mutex holder's fenced ledger row (a service's, or the fair Locker's).
Ledger::Result mutex_write(Ledger& ledger, const Args& a, const std::string& m, const std::string& id,
                           std::int64_t fence, std::int64_t seq) {
    return ledger.write([&](pqxx::work& tx) {
        if (a.fence_check) tx.exec_params("SELECT simba_fence_check($1, $2, $3)", m, id, fence);
        if (a.work_ms > 0) sleep_ms(a.work_ms);  // the holder's work, inside the transaction
        Ledger::Done d;
        d.send = chaos::steady_ns();
        returned(d, tx.exec_params(std::string("INSERT INTO ledger (mutex, writer, fence, worker, seq)"
                                               " VALUES ($1, $2, $3, $4, $5)") + kReturning,
                                   m, id, fence, a.worker, seq));
        d.recv = chaos::steady_ns();
        return d;
    });
}

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
    cli.add_flag("--fence-check,!--no-fence-check", a.fence_check,
                 "guard each write (every workload's) with its fence check");
    cli.add_option("--ledger-timeout-ms", a.ledger_timeout_ms,
                   "a ledger transaction's socket is shut down past this (0: never)");
    cli.add_option("--rwlock", a.rwlock, "read-write lock a SharedLocker takes (empty: none)");
    cli.add_option("--rw-write-pct", a.rw_write_pct, "share of the read-write lock's holds that write");
    cli.add_option("--rw-downgrade-pct", a.rw_downgrade_pct, "share of write holds downgraded half-way");
    cli.add_option("--multi", a.multi, "mutexes a MultiLocker takes together (comma-separated; none: off)")
        ->delimiter(',');
    cli.add_option("--multi-period-ms", a.multi_period_ms, "the multi window recurs this often (steady clock)");
    cli.add_option("--multi-window-ms", a.multi_window_ms,
                   "its length: multi-locks start in it, the members' services stand aside");
    cli.add_option("--fair", a.fair, "mutex a fair Locker queues for (empty: none)");
    cli.add_option("--fair-ttl-ms", a.fair_ttl_ms, "the fair Locker's ttl (its place lapses after ttl + transition)");
    cli.add_option("--fair-transition-ms", a.fair_transition_ms, "the fair Locker's transition");
    cli.add_option("--locker-hold-ms", a.locker_hold_ms, "the lockers hold H/2..3H/2 ms");
    cli.add_option("--locker-pause-ms", a.locker_pause_ms, "pause between a locker's writes");
}

/// The steady clock's position in the multi window (the same in every worker).
bool in_multi_window(const Args& a) {
    const std::int64_t ms = chaos::steady_ns() / 1000000;
    return a.multi_window_ms > 0 && ms % a.multi_period_ms < a.multi_window_ms;
}

/// Shared by a worker's threads.
struct Shared {
    const Args& args;
    chaos::EventLog& out;
    std::atomic<std::int64_t> seq{0};  // one sequence per worker: (worker, seq) names a write

    std::int64_t next_seq() { return seq.fetch_add(1) + 1; }
    int uniform(std::mt19937& rng, int lo, int hi) {
        return std::uniform_int_distribution<int>(lo, std::max(lo, hi))(rng);
    }
    bool stopping() const { return g_stop.load(); }
};

std::string members_field(const std::vector<std::pair<std::string, std::int64_t>>& fences) {
    std::string s;
    for (const auto& [m, f] : fences) s += (s.empty() ? "" : ",") + m + ":" + std::to_string(f);
    return s;
}

/// The read-write lock's thread: a hold at a time, a writer now and then
/// (some downgrade half-way), fenced rows in rw_ledger while holding.
void rwlock_loop(Shared& sh, simba::SharedLocker& rw) {
    const Args& a = sh.args;
    const int w = a.worker;
    std::mt19937 rng(static_cast<unsigned>(::getpid()) * 7919u);
    Ledger ledger(sh.out, w, a.conninfo, "simba-chaos-ledger" + std::to_string(w) + "-rw", a.ledger_timeout_ms);
    const std::string& name = rw.rwlock();
    const std::string& id = rw.contender_id();
    while (!sh.stopping()) {
        const bool write = sh.uniform(rng, 0, 99) < a.rw_write_pct;
        try {
            // Unbounded: a wait that never ends shows in the checker's
            // liveness of the lock (it once did: test/chaos/README.md).
            if (write) rw.lock();
            else rw.lock_shared();
        } catch (const simba::CancelledError&) {
            break;
        } catch (const std::exception& e) {
            sh.out.write("lib", w, "rwlock", e.what());
            sleep_ms(100);
            continue;
        }
        bool exclusive = write;
        if (auto l = rw.lease())
            sh.out.write("rwacq", w, name, l->exclusive ? "write" : "read", l->fence, l->acquired_at.count(),
                         chaos::steady_ns());
        const auto start = std::chrono::steady_clock::now();
        const auto hold = std::chrono::milliseconds(sh.uniform(rng, a.locker_hold_ms / 2, a.locker_hold_ms * 3 / 2));
        const bool downgrade = write && sh.uniform(rng, 0, 99) < a.rw_downgrade_pct;
        while (!sh.stopping() && std::chrono::steady_clock::now() < start + hold) {
            if (downgrade && exclusive && std::chrono::steady_clock::now() >= start + hold / 2) {
                try {
                    const bool ok = rw.downgrade();  // now held shared either way
                    exclusive = false;
                    sh.out.write("rwdown", w, name, rw.fence(), ok ? 1 : 0, chaos::steady_ns());
                } catch (const std::exception& e) {
                    // Not expected (a lost answer is a lost hold: false);
                    // the thread still holds it for writing: unlock() below.
                    sh.out.write("rwdown", w, name, rw.fence(), "error", chaos::steady_ns());
                    sh.out.write("lib", w, "rwlock-downgrade", e.what());
                    break;
                }
            }
            const std::int64_t t_check = chaos::steady_ns();
            const auto l = rw.lease();
            const std::int64_t t_owner = chaos::steady_ns();
            if (!l) break;  // lost: unlock below
            const std::string mode = l->exclusive ? "write" : "read";
            const std::int64_t seq = sh.next_seq();
            sh.out.write("rwinv", w, name, mode, l->fence, l->acquired_at.count(), seq, t_check, t_owner);
            auto r = ledger.write([&](pqxx::work& tx) {
                if (a.fence_check) tx.exec_params("SELECT simba_rwlock_fence_check($1, $2, $3)", name, id, l->fence);
                if (a.work_ms > 0) sleep_ms(a.work_ms);
                Ledger::Done d;
                d.send = chaos::steady_ns();
                returned(d, tx.exec_params(std::string("INSERT INTO rw_ledger (rwlock, writer, mode, fence, worker, seq)"
                                                       " VALUES ($1, $2, $3, $4, $5, $6)") + kReturning,
                                           name, id, mode, l->fence, w, seq));
                d.recv = chaos::steady_ns();
                return d;
            });
            log_outcome(sh.out, r, "rwok", "rwfail", "rwunk", w, name, mode, l->fence, seq);
            sleep_ms(a.locker_pause_ms);
        }
        sh.out.write("rwrel", w, name, exclusive ? "write" : "read", chaos::steady_ns());
        try {
            if (exclusive) rw.unlock();
            else rw.unlock_shared();
        } catch (const std::exception& e) {
            sh.out.write("lib", w, "rwlock-unlock", e.what());
        }
        sleep_ms(sh.uniform(rng, 0, a.locker_hold_ms / 2));
    }
}

/// The multi-lock's thread: takes every member in the multi window, writes
/// one row per member in each fenced transaction while holding.
void multi_loop(Shared& sh, simba::MultiLocker& ml) {
    const Args& a = sh.args;
    const int w = a.worker;
    std::mt19937 rng(static_cast<unsigned>(::getpid()) * 104729u);
    Ledger ledger(sh.out, w, a.conninfo, "simba-chaos-ledger" + std::to_string(w) + "-multi", a.ledger_timeout_ms);
    const std::string& id = ml.contender_id();
    while (!sh.stopping()) {
        if (!in_multi_window(a)) {
            sleep_ms(20);
            continue;
        }
        try {
            ml.lock();  // begun in the window, it may go on waiting past it, against the services
        } catch (const simba::CancelledError&) {
            break;
        } catch (const std::exception& e) {
            sh.out.write("lib", w, "multi", e.what());
            sleep_ms(100);
            continue;
        }
        if (auto l = ml.lease())
            sh.out.write("macq", w, chaos::steady_ns(), l->acquired_at.count(), members_field(l->fences));
        const auto start = std::chrono::steady_clock::now();
        const auto hold = std::chrono::milliseconds(sh.uniform(rng, a.locker_hold_ms / 2, a.locker_hold_ms * 3 / 2));
        while (!sh.stopping() && std::chrono::steady_clock::now() < start + hold) {
            const std::int64_t t_check = chaos::steady_ns();
            const auto l = ml.lease();
            const std::int64_t t_owner = chaos::steady_ns();
            if (!l) break;
            const std::int64_t seq = sh.next_seq();
            sh.out.write("minv", w, seq, t_check, t_owner, members_field(l->fences));
            auto r = ledger.write([&](pqxx::work& tx) {
                // In byte order of the names, as simba_fence_check's locks should be taken.
                std::string names, fences;
                for (const auto& [m, f] : l->fences) {
                    if (a.fence_check) tx.exec_params("SELECT simba_fence_check($1, $2, $3)", m, id, f);
                    names += (names.empty() ? "" : ",") + tx.quote(m);
                    fences += (fences.empty() ? "" : ",") + std::to_string(f);
                }
                if (a.work_ms > 0) sleep_ms(a.work_ms);
                Ledger::Done d;
                d.send = chaos::steady_ns();
                returned(d, tx.exec_params(
                                "INSERT INTO ledger (mutex, writer, fence, worker, seq)"
                                " SELECT m, $1, f, $2, $3 FROM unnest(ARRAY[" + names + "]::text[], ARRAY[" + fences +
                                    "]::int8[]) WITH ORDINALITY AS u(m, f, o) ORDER BY o" + kReturning,
                                id, w, seq));
                d.recv = chaos::steady_ns();
                return d;
            });
            log_outcome(sh.out, r, "mok", "mfail", "munk", w, seq);
            sleep_ms(a.locker_pause_ms);
        }
        sh.out.write("mrel", w, chaos::steady_ns());
        try {
            ml.unlock();
        } catch (const std::exception& e) {
            sh.out.write("lib", w, "multi-unlock", e.what());
        }
        sleep_ms(sh.uniform(rng, 0, a.locker_hold_ms));
    }
}

/// The fair lock's thread: queues, holds with fenced writes, queues again.
void fair_loop(Shared& sh, simba::Locker& fl) {
    const Args& a = sh.args;
    const int w = a.worker;
    std::mt19937 rng(static_cast<unsigned>(::getpid()) * 15485863u);
    Ledger ledger(sh.out, w, a.conninfo, "simba-chaos-ledger" + std::to_string(w) + "-fair", a.ledger_timeout_ms);
    const std::string& m = fl.mutex();
    const std::string& id = fl.contender_id();
    while (!sh.stopping()) {
        sh.out.write("fwait", w, m, chaos::steady_ns());
        try {
            fl.lock();
        } catch (const simba::CancelledError&) {
            sh.out.write("fdone", w, m, chaos::steady_ns(), "cancelled");
            break;
        } catch (const std::exception& e) {
            sh.out.write("fdone", w, m, chaos::steady_ns(), "error");
            sh.out.write("lib", w, "fair", e.what());
            sleep_ms(100);
            continue;
        }
        if (auto l = fl.lease()) sh.out.write("facq", w, m, l->fence, l->acquired_at.count(), chaos::steady_ns());
        const auto start = std::chrono::steady_clock::now();
        const auto hold = std::chrono::milliseconds(sh.uniform(rng, a.locker_hold_ms / 2, a.locker_hold_ms * 3 / 2));
        std::int64_t fence = 0;
        while (!sh.stopping() && std::chrono::steady_clock::now() < start + hold) {
            const std::int64_t t_check = chaos::steady_ns();
            const auto l = fl.lease();
            const std::int64_t t_owner = chaos::steady_ns();
            if (!l) break;
            fence = l->fence;
            const std::int64_t seq = sh.next_seq();
            sh.out.write("inv", w, m, fence, seq, t_check, t_owner);
            log_outcome(sh.out, mutex_write(ledger, a, m, id, fence, seq), "ok", "fail", "unk", w, m, fence, seq);
            sleep_ms(a.locker_pause_ms);
        }
        sh.out.write("frel", w, m, fence, chaos::steady_ns());
        try {
            fl.unlock();
        } catch (const std::exception& e) {
            sh.out.write("lib", w, "fair-unlock", e.what());
        }
        // Out of the queue a while, so places change from one round to the next.
        sleep_ms(sh.uniform(rng, 0, a.locker_hold_ms * 2));
    }
}

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
    if (args.multi_period_ms <= 0) {
        std::cerr << "simba_chaos_worker: --multi-period-ms must be positive\n";
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
    // A service of a multi-lock member stands aside in the multi window.
    std::vector<bool> yields(services.size(), false);
    for (std::size_t si = 0; si < services.size(); ++si)
        for (const auto& m : args.multi)
            if (services[si]->mutex() == m) yields[si] = true;
    std::vector<bool> running(services.size(), false);
    for (std::size_t si = 0; si < services.size(); ++si) {
        if (yields[si] && in_multi_window(args)) continue;
        services[si]->start();
        running[si] = true;
    }

    // The new primitives' lockers, each driven by a thread of its own.
    Shared shared{args, out};
    std::unique_ptr<simba::SharedLocker> rw;
    std::unique_ptr<simba::MultiLocker> ml;
    std::unique_ptr<simba::Locker> fl;
    std::vector<std::thread> threads;
    std::atomic<int> threads_left{0};
    auto spawn = [&](std::function<void()> body) {
        ++threads_left;
        threads.emplace_back([body = std::move(body), &threads_left, &out, w] {
            try {
                body();
            } catch (const std::exception& e) {
                out.write("lib", w, "locker-thread", e.what());
            }
            --threads_left;
        });
    };
    if (!args.rwlock.empty()) {
        rw = std::make_unique<simba::SharedLocker>(factory, args.rwlock, simba::ContenderId::host(), co);
        out.write("rwid", w, args.rwlock, rw->contender_id());
        spawn([&] { rwlock_loop(shared, *rw); });
    }
    if (!args.multi.empty()) {
        ml = std::make_unique<simba::MultiLocker>(factory, args.multi, simba::ContenderId::host(), co);
        std::string names;
        for (const auto& m : ml->mutexes()) names += (names.empty() ? "" : ",") + m;
        out.write("mid", w, ml->contender_id(), names);
        spawn([&] { multi_loop(shared, *ml); });
    }
    if (!args.fair.empty()) {
        simba::ContendOptions fo_fair = co;
        fo_fair.ttl = std::chrono::milliseconds(args.fair_ttl_ms);
        fo_fair.transition = std::chrono::milliseconds(args.fair_transition_ms);
        fo_fair.fair = true;
        fl = std::make_unique<simba::Locker>(factory, args.fair, simba::ContenderId::host(), fo_fair);
        out.write("id", w, args.fair, fl->contender_id());
        spawn([&] { fair_loop(shared, *fl); });
    }

    Ledger ledger(out, w, args.conninfo, "simba-chaos-ledger" + std::to_string(w), args.ledger_timeout_ms);
    std::mt19937 rng(static_cast<unsigned>(::getpid()));
    std::vector<std::int64_t> hold_fence(services.size(), 0);
    std::vector<std::chrono::steady_clock::time_point> hold_until(services.size());
    const auto hard_end = std::chrono::steady_clock::now() + std::chrono::seconds(args.max_seconds);

    while (!g_stop.load() && std::chrono::steady_clock::now() < hard_end) {
        bool wrote = false;
        const bool window = in_multi_window(args);
        for (std::size_t si = 0; si < services.size(); ++si) {
            auto& svc = services[si];
            if (g_stop.load()) break;
            if (yields[si] && window == running[si]) {
                // Into the multi window: stand aside (stop() releases); out of it: contend again.
                out.write(window ? "yield" : "unyield", w, svc->mutex(), chaos::steady_ns());
                if (window) svc->stop();
                else svc->start();
                running[si] = !window;
                hold_fence[si] = 0;
            }
            if (!running[si]) continue;
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
            const std::int64_t seq = shared.next_seq();
            wrote = true;
            out.write("inv", w, m, fence, seq, t_check, t_owner);
            log_outcome(out, mutex_write(ledger, args, m, id, fence, seq), "ok", "fail", "unk", w, m, fence, seq);
        }
        sleep_ms(wrote ? args.pause_ms : 5);
    }
    // The lockers' threads end once their waits are cancelled; a cancel()
    // ends only waits already begun, so it is repeated until they are gone.
    g_stop.store(true);
    while (threads_left.load() > 0) {
        if (rw) rw->cancel();
        if (ml) ml->cancel();
        if (fl) fl->cancel();
        sleep_ms(20);
    }
    for (auto& t : threads) t.join();
    for (std::size_t si = 0; si < services.size(); ++si) {
        if (!running[si]) continue;
        try {
            services[si]->stop();
        } catch (const std::exception& e) {
            out.write("lib", w, "stop", e.what());
        }
    }
    out.write("stop", w, chaos::steady_ns());
    return 0;
}
