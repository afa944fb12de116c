// simba chaos nemesis: runs the workload and injects faults.
//
// Spawns --workers worker processes (simba_chaos_worker), waits until every
// mutex has an owner, then alternates faults with quiet periods until
// --duration-s is over; then stops the workers (SIGTERM, SIGKILL after 15 s).
// Faults (--kinds, used in turn):
//   kill     SIGKILL the process that owns a random mutex (of --mutexes and
//            --targets) or holds a --rwlocks read-write lock; a new worker
//            replaces it
//   stop     SIGSTOP that owner until its lease has ended on the server clock
//            (+ --stop-extra-ms), then SIGCONT
//   term     pg_terminate_backend on 4 random client backends (statement, LISTEN, ledger)
//   restart  pg_ctl restart -m immediate: crash, then crash recovery
//   listen   pg_terminate_backend on every LISTEN connection
//   any other kind, with --fault-cmd CMD: runs `CMD KIND` (test/ha/faults.sh)
//            and timestamps the lines it prints: "healthy" (the cluster is
//            healthy again), "start" (the fault begins) and "healed DETAIL"
//            (it ended); a non-zero exit, or no "healed" within
//            --fault-timeout-s, is logged as an error (the run fails).
// Every fault is logged to DIR/nemesis.log:
//   fault KIND START_NS HEAL_NS DETAIL    (steady ns; HEAL = when the fault ended:
//                                          the kill, the SIGCONT, the server back up)
//   healthy STEADY_NS                     (a --fault-cmd's "healthy")
//   spawn SLOT PID STEADY_NS
//   run START_NS END_NS                   (last line: the workload's steady window)
// After each fault: with --settle-ms, until every mutex has a live owner on
// the server (at most that long), then --quiet-ms.
// Every kind of --kinds at least once: past --duration-s the run goes on
// with the kinds not injected yet, for at most --extra-s more, and fails
// (exit 3) if one still was not.
// Every child gets PR_SET_PDEATHSIG, so nothing outlives the nemesis.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
extern "C" void on_signal(int) { g_interrupted.store(true); }

struct Args {
    int workers = 8;
    std::string worker_bin;
    std::string logdir;
    std::string conninfo;
    int duration_s = 120;
    int extra_s = 120;
    int quiet_ms = 6000;
    int stop_extra_ms = 1000;
    std::vector<std::string> kinds{"kill", "stop", "term", "restart", "listen"};
    std::vector<std::string> worker_args;
    std::vector<std::string> mutexes{"chaos-a", "chaos-b", "chaos-c"};
    std::vector<std::string> targets;  // more mutexes whose owners are fault targets
    std::vector<std::string> rwlocks;  // read-write locks whose holders are fault targets
    std::string pgdata, pgbin, pglog, pguser;
    std::string fault_cmd;
    int fault_timeout_s = 120;
    int settle_ms = 0;
    unsigned seed = std::random_device{}();
};

void add_options(CLI::App& cli, Args& a) {
    cli.add_option("--workers", a.workers, "worker processes");
    cli.add_option("--worker-bin", a.worker_bin, "simba_chaos_worker")->required();
    cli.add_option("--logdir", a.logdir, "directory of the event logs")->required();
    cli.add_option("--conninfo", a.conninfo, "libpq connection string");
    cli.add_option("--duration-s", a.duration_s, "length of the run");
    cli.add_option("--extra-s", a.extra_s, "how long past --duration-s the run may go on for kinds not injected yet");
    cli.add_option("--quiet-ms", a.quiet_ms, "quiet period between faults");
    cli.add_option("--stop-extra-ms", a.stop_extra_ms, "a SIGSTOP lasts this much past the lease's end");
    // Built-in kinds: kill, stop, term, restart, listen; any other goes to --fault-cmd.
    cli.add_option("--kinds", a.kinds, "faults, in turn (comma-separated)")->delimiter(',');
    cli.add_option("--worker-arg", a.worker_args, "passed on to every worker (repeatable; --worker-arg=--flag)");
    cli.add_option("--mutexes", a.mutexes, "mutexes (comma-separated): every one must have an owner")->delimiter(',');
    cli.add_option("--targets", a.targets, "more mutexes whose owners faults may target (comma-separated)")
        ->delimiter(',');
    cli.add_option("--rwlocks", a.rwlocks, "read-write locks whose holders faults may target (comma-separated)")
        ->delimiter(',');
    cli.add_option("--pgdata", a.pgdata, "the server's data directory (restart)");
    cli.add_option("--pgbin", a.pgbin, "PostgreSQL's bin directory");
    cli.add_option("--pglog", a.pglog, "pg_ctl's log file");
    cli.add_option("--pguser", a.pguser, "run pg_ctl as this user");
    cli.add_option("--fault-cmd", a.fault_cmd, "runs the kinds that are not built in: FAULT_CMD KIND");
    cli.add_option("--fault-timeout-s", a.fault_timeout_s, "longest a --fault-cmd fault may take");
    cli.add_option("--settle-ms", a.settle_ms, "after a fault, wait up to this for every mutex to have an owner");
    cli.add_option("--seed", a.seed, "random seed");
}

/// fork(); the child dies with us (and at once if we died before it could
/// ask). Returns what fork() does: 0 in the child.
pid_t fork_bound() {
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
    }
    return pid;
}

/// fork + exec; the child dies with us. Returns the pid.
pid_t spawn(const std::vector<std::string>& argv, const std::string& out_file = {}) {
    pid_t pid = fork_bound();
    if (pid == 0) {
        if (!out_file.empty()) {
            int fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                ::dup2(fd, 1);
                ::dup2(fd, 2);
                ::close(fd);
            }
        }
        std::vector<char*> cargv;
        for (auto& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
        cargv.push_back(nullptr);
        ::execvp(cargv[0], cargv.data());
        ::_exit(127);
    }
    return pid;
}

/// Runs a command to completion (bounded: SIGKILL after timeout); returns its exit status.
int run(const std::vector<std::string>& argv, const std::string& out_file, seconds timeout) {
    pid_t pid = spawn(argv, out_file);
    auto end = Clock::now() + timeout;
    while (true) {
        int st = 0;
        pid_t r = ::waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (Clock::now() > end) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &st, 0);
            return 124;
        }
        std::this_thread::sleep_for(milliseconds(20));
    }
}

class Nemesis {
public:
    explicit Nemesis(Args a) : a_(std::move(a)), rng_(a_.seed), log_(a_.logdir + "/nemesis.log") {}

    int main() {
        std::cout << "nemesis: seed " << a_.seed << ", " << a_.workers << " workers, " << a_.duration_s
                  << " s, faults:";
        for (auto& k : a_.kinds) std::cout << ' ' << k;
        std::cout << std::endl;
        for (int slot = 0; slot < a_.workers; ++slot) spawn_worker(slot);
        const std::int64_t run_start = chaos::steady_ns();
        const auto end = Clock::now() + seconds(a_.duration_s);
        // Past the end only for a kind not injected yet, and at most --extra-s.
        const auto last_call = end + seconds(a_.extra_s);
        if (!wait_all_owned(seconds(30))) std::cout << "nemesis: warning: not every mutex owned after 30 s" << std::endl;
        std::size_t turn = 0;
        while (!g_interrupted.load()) {
            reap();
            const auto missing = first_missing_kind();
            const auto stop = missing ? last_call : end;
            const std::string kind = Clock::now() < end || !missing ? a_.kinds[turn++ % a_.kinds.size()] : *missing;
            // Every fault gets its full quiet period before the end, so the
            // checker can judge the recovery from it.
            if (Clock::now() + milliseconds(a_.quiet_ms) >= stop) {
                pause_until(stop);
                break;
            }
            inject(kind);
            // --settle-ms: first until every mutex has an owner again (at
            // most that long), so the checker can judge every recovery.
            if (a_.settle_ms > 0) wait_all_owned(milliseconds(a_.settle_ms));
            pause_until(std::min(stop, Clock::now() + milliseconds(a_.quiet_ms)));
        }
        const std::int64_t run_end = chaos::steady_ns();
        stop_workers();
        log_.write("run", run_start, run_end);
        std::cout << "nemesis: done, " << faults_ << " faults injected" << std::endl;
        if (g_interrupted.load()) return 130;
        if (const auto missing = first_missing_kind()) {
            std::cout << "nemesis: FAILED: " << *missing << " never injected in " << a_.duration_s << " s and "
                      << a_.extra_s << " s more" << std::endl;
            return 3;
        }
        return 0;
    }

private:
    std::optional<std::string> first_missing_kind() {
        for (auto& k : a_.kinds)
            if (injected_[k] == 0) return k;
        return std::nullopt;
    }

    void spawn_worker(int slot) {
        std::vector<std::string> argv{a_.worker_bin,
                                      "--worker",
                                      std::to_string(next_worker_),
                                      "--log",
                                      a_.logdir + "/worker-" + std::to_string(next_worker_) + ".log",
                                      "--conninfo",
                                      a_.conninfo,
                                      "--max-seconds",
                                      std::to_string(a_.duration_s + a_.extra_s + 120)};
        std::string ms;
        for (auto& m : a_.mutexes) ms += (ms.empty() ? "" : ",") + m;
        argv.push_back("--mutexes");
        argv.push_back(ms);
        for (auto& x : a_.worker_args) argv.push_back(x);
        pid_t pid = spawn(argv, a_.logdir + "/worker-" + std::to_string(next_worker_) + ".stderr");
        ++next_worker_;
        slots_[slot] = pid;
        log_.write("spawn", slot, pid, chaos::steady_ns());
    }

    void reap() {
        for (auto& [slot, pid] : slots_) {
            int st = 0;
            if (pid > 0 && ::waitpid(pid, &st, WNOHANG) == pid) {
                std::cout << "nemesis: worker pid " << pid << " exited on its own (status " << st << "), replacing"
                          << std::endl;
                log_.write("died", slot, pid, chaos::steady_ns());
                spawn_worker(slot);
            }
        }
    }

    void pause_until(Clock::time_point t) {
        while (!g_interrupted.load() && Clock::now() < t) {
            std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(100), t - Clock::now()));
        }
    }

    std::unique_ptr<pqxx::connection> connect(int attempts = 100) {
        for (int i = 0; i < attempts; ++i) {
            try {
                return std::make_unique<pqxx::connection>(a_.conninfo +
                                                          " application_name=simba-chaos-nemesis connect_timeout=2");
            } catch (const std::exception&) {
                std::this_thread::sleep_for(milliseconds(100));
            }
        }
        throw std::runtime_error("nemesis: cannot connect");
    }

    struct Owner {
        std::string mutex, id;  // mutex: the lock's name (a read-write lock's too)
        pid_t pid = -1;
        std::int64_t transition_us = 0;
    };

    /// Live owners (lease not over on the server clock) that are our workers:
    /// of the mutexes and targets, and the holders of the read-write locks.
    std::vector<Owner> owners() {
        std::vector<Owner> out;
        try {
            auto c = connect(1);  // the callers poll: one attempt, bounded by connect_timeout
            pqxx::nontransaction tx(*c);
            auto r = tx.exec(
                "SELECT mutex, owner_id, (extract(epoch FROM transition_at) * 1000000)::int8 FROM simba_mutex_status"
                " WHERE owner_id IS NOT NULL ORDER BY mutex");  // the view: live leases, or their session's
            std::vector<Owner> found;
            for (const auto& row : r) {
                Owner o{row[0].as<std::string>(), row[1].as<std::string>(), -1, row[2].as<std::int64_t>()};
                if (std::find(a_.mutexes.begin(), a_.mutexes.end(), o.mutex) == a_.mutexes.end() &&
                    std::find(a_.targets.begin(), a_.targets.end(), o.mutex) == a_.targets.end())
                    continue;
                found.push_back(o);
            }
            if (!a_.rwlocks.empty()) {
                // A hold under a session ends with the session; its row's own times are only for show.
                auto h = tx.exec(
                    "SELECT h.rwlock, h.owner_id, (extract(epoch FROM coalesce(s.transition_at, h.transition_at))"
                    " * 1000000)::int8 FROM simba_rwlock_holder AS h"
                    " LEFT JOIN simba_session_lease AS s ON s.session_id = h.session_id"
                    " WHERE h.mode IN ('read', 'write') AND coalesce(s.transition_at, h.transition_at) > clock_timestamp()"
                    " ORDER BY h.rwlock, h.owner_id");
                for (const auto& row : h) {
                    Owner o{row[0].as<std::string>(), row[1].as<std::string>(), -1, row[2].as<std::int64_t>()};
                    if (std::find(a_.rwlocks.begin(), a_.rwlocks.end(), o.mutex) != a_.rwlocks.end()) found.push_back(o);
                }
            }
            for (auto& o : found) {
                long pid = chaos::pid_of_contender(o.id);
                for (auto& [slot, p] : slots_)
                    if (p == pid) o.pid = p;
                if (o.pid > 0) out.push_back(o);
            }
        } catch (const std::exception& e) {
            // Polled every 50 ms, through failovers too: one line per 5 s at most.
            if (Clock::now() - last_owner_error_ > seconds(5)) {
                std::cout << "nemesis: owner query failed: " << e.what() << std::endl;
                last_owner_error_ = Clock::now();
            }
        }
        return out;
    }

    bool wait_all_owned(Clock::duration bound) {
        auto end = Clock::now() + bound;
        while (Clock::now() < end && !g_interrupted.load()) {
            std::set<std::string> owned;
            for (auto& o : owners())
                if (std::find(a_.mutexes.begin(), a_.mutexes.end(), o.mutex) != a_.mutexes.end()) owned.insert(o.mutex);
            if (owned.size() == a_.mutexes.size()) return true;
            std::this_thread::sleep_for(milliseconds(50));
        }
        return false;
    }

    std::optional<Owner> random_owner(Clock::duration bound) {
        auto end = Clock::now() + bound;
        while (Clock::now() < end && !g_interrupted.load()) {
            // A lock first, then one of its holders: the many readers of a
            // read-write lock do not crowd out the mutexes' owners.
            std::map<std::string, std::vector<Owner>> by_lock;
            for (auto& o : owners()) by_lock[o.mutex].push_back(o);
            if (!by_lock.empty()) {
                auto it = std::next(by_lock.begin(),
                                    static_cast<long>(std::uniform_int_distribution<std::size_t>(0, by_lock.size() - 1)(rng_)));
                auto& os = it->second;
                return os[std::uniform_int_distribution<std::size_t>(0, os.size() - 1)(rng_)];
            }
            std::this_thread::sleep_for(milliseconds(50));
        }
        return std::nullopt;
    }

    int slot_of(pid_t pid) {
        for (auto& [slot, p] : slots_)
            if (p == pid) return slot;
        return -1;
    }

    void record(const std::string& kind, std::int64_t start, std::int64_t heal, const std::string& detail) {
        ++faults_;
        ++injected_[kind];
        log_.write("fault", kind, start, heal, detail);
        std::cout << "nemesis: " << kind << " (" << detail << "), " << (heal - start) / 1000000 << " ms" << std::endl;
    }

    void inject(const std::string& kind) {
        if (kind == "kill") {
            auto o = random_owner(seconds(10));
            if (!o) return skip(kind);
            std::int64_t t = chaos::steady_ns();
            ::kill(o->pid, SIGKILL);
            int st = 0;
            ::waitpid(o->pid, &st, 0);
            int slot = slot_of(o->pid);
            spawn_worker(slot);
            record(kind, t, t, "owner of " + o->mutex + " pid " + std::to_string(o->pid));
        } else if (kind == "stop") {
            auto o = random_owner(seconds(10));
            if (!o) return skip(kind);
            std::int64_t t = chaos::steady_ns();
            ::kill(o->pid, SIGSTOP);
            // Until the lease has ended on the server's clock, plus extra.
            auto bound = Clock::now() + seconds(30);
            while (Clock::now() < bound) {
                bool over = false;
                try {
                    auto c = connect();
                    pqxx::nontransaction tx(*c);
                    over = tx.exec1("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8 > " +
                                    std::to_string(o->transition_us))[0]
                               .as<bool>();
                } catch (const std::exception&) {
                }
                if (over) break;
                std::this_thread::sleep_for(milliseconds(50));
            }
            std::this_thread::sleep_for(milliseconds(a_.stop_extra_ms));
            std::int64_t heal = chaos::steady_ns();
            ::kill(o->pid, SIGCONT);
            record(kind, t, heal, "owner of " + o->mutex + " pid " + std::to_string(o->pid));
        } else if (kind == "term" || kind == "listen") {
            std::string sql =
                kind == "term"
                    ? "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity"
                      " WHERE application_name LIKE 'simba-chaos-w%' OR application_name LIKE 'simba-chaos-ledger%'"
                      " ORDER BY random() LIMIT 4) s"
                    : "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                      " WHERE application_name LIKE 'simba-chaos-w%' AND query ILIKE 'LISTEN%'";
            std::int64_t t = chaos::steady_ns();
            long n = 0;
            try {
                auto c = connect();
                pqxx::nontransaction tx(*c);
                n = tx.exec1(sql)[0].as<long>();
            } catch (const std::exception& e) {
                std::cout << "nemesis: " << kind << " failed: " << e.what() << std::endl;
                return;
            }
            record(kind, t, chaos::steady_ns(), std::to_string(n) + " backends");
        } else if (kind == "restart") {
            std::int64_t t = chaos::steady_ns();
            int rc = run(pg_cmd({"pg_ctl", "-D", a_.pgdata, "-m", "immediate", "-w", "-t", "60", "-l", a_.pglog,
                                 "restart"}),
                         a_.logdir + "/pg_ctl.log", seconds(90));
            std::int64_t heal = chaos::steady_ns();
            if (rc != 0) {
                std::cout << "nemesis: pg_ctl restart failed (" << rc << ")" << std::endl;
                log_.write("error", "restart", rc);
            }
            record(kind, t, heal, "pg_ctl restart -m immediate rc " + std::to_string(rc));
        } else if (!a_.fault_cmd.empty()) {
            external(kind);
        } else {
            throw std::runtime_error("unknown fault kind " + kind);
        }
    }

    /// `fault_cmd KIND`: its stdout lines "start" and "healed DETAIL" are the
    /// fault's start and heal times, and "healthy" when the cluster was found
    /// healthy again (after the previous fault) first; its stderr goes to
    /// faults.log.
    void external(const std::string& kind) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
        pid_t pid = fork_bound();
        if (pid == 0) {
            ::dup2(fds[1], 1);
            int fd = ::open((a_.logdir + "/faults.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) ::dup2(fd, 2);
            ::execl(a_.fault_cmd.c_str(), a_.fault_cmd.c_str(), kind.c_str(), static_cast<char*>(nullptr));
            ::_exit(127);
        }
        ::close(fds[1]);
        const auto deadline = Clock::now() + seconds(a_.fault_timeout_s);
        std::int64_t start = 0, heal = 0;
        std::string detail, buf;
        bool eof = false;
        while (!eof && Clock::now() < deadline && !g_interrupted.load()) {
            pollfd p{fds[0], POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) continue;
            char chunk[512];
            ssize_t n = ::read(fds[0], chunk, sizeof chunk);
            const std::int64_t t = chaos::steady_ns();  // taken as soon as the line arrived
            if (n <= 0) {
                eof = true;
                break;
            }
            buf.append(chunk, static_cast<std::size_t>(n));
            for (auto nl = buf.find('\n'); nl != std::string::npos; nl = buf.find('\n')) {
                std::string line = buf.substr(0, nl);
                buf.erase(0, nl + 1);
                if (line == "healthy") {
                    log_.write("healthy", t);
                } else if (line == "start") {
                    start = t;
                } else if (line.rfind("healed", 0) == 0) {
                    heal = t;
                    detail = line.size() > 7 ? line.substr(7) : "";
                }
            }
        }
        ::close(fds[0]);
        int st = 0;
        if (!eof) ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (rc != 0 || start == 0 || heal == 0) {
            std::cout << "nemesis: " << kind << " failed (exit " << rc << (eof ? "" : ", timed out")
                      << "; see faults.log)" << std::endl;
            log_.write("error", kind, rc, eof ? "exit" : "timeout");
            if (start == 0) return;
            if (heal == 0) heal = chaos::steady_ns();
        }
        record(kind, start, heal, detail);
    }

    void skip(const std::string& kind) {
        std::cout << "nemesis: " << kind << " skipped: no live owner" << std::endl;
        log_.write("skipped", kind, chaos::steady_ns());
    }

    std::vector<std::string> pg_cmd(std::vector<std::string> argv) {
        argv[0] = a_.pgbin.empty() ? argv[0] : a_.pgbin + "/" + argv[0];
        if (!a_.pguser.empty()) argv.insert(argv.begin(), {"runuser", "-u", a_.pguser, "--"});
        return argv;
    }

    void stop_workers() {
        for (auto& [slot, pid] : slots_) {
            if (pid > 0) {
                ::kill(pid, SIGCONT);
                ::kill(pid, SIGTERM);
            }
        }
        auto end = Clock::now() + seconds(15);
        for (auto& [slot, pid] : slots_) {
            int st = 0;
            while (pid > 0 && ::waitpid(pid, &st, WNOHANG) == 0) {
                if (Clock::now() > end) {
                    std::cout << "nemesis: worker pid " << pid << " did not stop, SIGKILL" << std::endl;
                    ::kill(pid, SIGKILL);
                    ::waitpid(pid, &st, 0);
                    break;
                }
                std::this_thread::sleep_for(milliseconds(20));
            }
            pid = -1;
        }
    }

    Args a_;
    std::mt19937 rng_;
    chaos::EventLog log_;
    std::map<int, pid_t> slots_;
    int next_worker_ = 0;
    Clock::time_point last_owner_error_{};
    int faults_ = 0;
    std::map<std::string, int> injected_;  // by kind
};

}  // namespace

int main(int argc, char** argv) {
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    Args args;
    chaos::Options cli("simba chaos nemesis: runs the workload and injects faults (nemesis.cpp lists them)");
    add_options(cli, args);
    CLI11_PARSE(cli, argc, argv);
    try {
        Nemesis n(args);
        return n.main();
    } catch (const std::exception& e) {
        std::cerr << "simba_chaos_nemesis: " << e.what() << std::endl;
        return 2;
    }
}
