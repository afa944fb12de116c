// simba run: a cluster-wide singleton runner (a distributed flock).
//
// One contend service of the library holds the lease; CMD runs only between
// its on_acquired and on_released (which the library fires no later than the
// lease deadline it can prove, docs/design.md "Safety rules" rule 3). Every signal simba run
// handles is blocked in all threads and read from a signalfd by the main
// thread; the callbacks only set a flag and poke an eventfd, so the main loop
// is the only place that starts, signals and reaps CMD.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "cli.hpp"
#include "simba/simba.hpp"

extern char** environ;

namespace simba::cli {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

struct Shared {
    std::mutex m;
    bool owner = false;
    bool lost = false;  // on_released after on_acquired
    std::int64_t fence = 0;
    int efd = -1;
    void poke() {
        std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(efd, &one, sizeof one);
    }
};

void say(bool verbose, const std::string& msg) {
    if (verbose) std::fprintf(stderr, "simba run: %s\n", msg.c_str());
}

int wait_ms(SteadyClock::time_point until) {
    auto d = duration_cast<milliseconds>(until - SteadyClock::now()).count();
    return static_cast<int>(std::max<long long>(0, std::min<long long>(d + 1, 1000)));
}

void write_all(int fd, const char* s) { [[maybe_unused]] auto n = ::write(fd, s, std::strlen(s)); }

}  // namespace

int cmd_run(const std::vector<std::string>& args) {
    auto o = parse_options("run", args,
                           with_common({{"mutex", 'm', true},
                                        {"contender", 'c', true},
                                        {"ttl", 0, true},
                                        {"transition", 0, true},
                                        {"wait", 'w', true},
                                        {"grace", 0, true},
                                        {"metrics-file", 0, true},
                                        {"metrics-interval", 0, true},
                                        {"verbose", 'v', false}}),
                           true);
    if (o.has("help")) {
        std::fputs(help_for("run"), stdout);
        return ok;
    }
    if (!o.has("mutex")) throw UsageError("simba run: --mutex NAME is required");
    if (o.rest.empty()) throw UsageError("simba run: no command given: simba run --mutex NAME -- CMD [ARGS...]");
    const std::string mutex = o.get("mutex");
    const std::string id = o.has("contender") ? o.get("contender") : ContenderId::host();
    ContendOptions copts;
    copts.ttl = parse_duration(o.get("ttl", "10s"), "--ttl");
    copts.transition = parse_duration(o.get("transition", "6s"), "--transition");
    std::optional<microseconds> wait;
    if (o.has("wait") && o.get("wait") != "forever") wait = parse_duration(o.get("wait"), "--wait");
    const auto grace = parse_duration(o.get("grace", "10s"), "--grace");
    const auto metrics_interval = parse_duration(o.get("metrics-interval", "5s"), "--metrics-interval");
    if (metrics_interval.count() <= 0) throw UsageError("--metrics-interval must be greater than 0");
    const std::string metrics_file = o.get("metrics-file");
    const bool verbose = o.has("verbose");
    validate_mutex(mutex);
    validate_contender_id(id);
    copts.validate();

    // Signals: blocked before any thread exists, so the library's threads
    // inherit the mask and every signal reaches the signalfd.
    sigset_t handled, old_mask;
    sigemptyset(&handled);
    const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    for (int s : forwarded) sigaddset(&handled, s);
    sigaddset(&handled, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &handled, &old_mask);
    const int sfd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
    auto sh = std::make_shared<Shared>();
    sh->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sfd < 0 || sh->efd < 0) throw Failure(software, std::string("signalfd/eventfd: ") + std::strerror(errno));

    set_log_handler([verbose](LogLevel level, const std::string& msg) {
        if (level == LogLevel::debug || (level == LogLevel::info && !verbose)) return;
        std::fprintf(stderr, "simba run: [%s] %s\n", to_string(level), msg.c_str());
    });

    // A first connection: a clear "could not connect" (69), missing
    // extension (78) or privilege (77) before anything else; with --wait 0
    // it also makes the one attempt.
    {
        auto conn = connect(o, "simba-run");
        try {
            pqxx::nontransaction tx(*conn);
            if (wait && wait->count() == 0) {
                auto r = tx.exec_params(
                    "SELECT " SIMBA_CLI_OWNER_ID ", fence, extract(epoch FROM transition_at - current_at)::float8"
                    " FROM simba_acquire($1, $2, $3::interval, $4::interval)",
                    mutex, id, to_interval(copts.ttl), to_interval(copts.transition));
                if (r[0][0].is_null() || r[0][0].as<std::string>() != id) {
                    std::fprintf(stderr, "simba run: %s is held by %s (others may take it in %s); not waiting (--wait 0)\n",
                                 mutex.c_str(), r[0][0].c_str(),
                                 format_duration(microseconds(static_cast<std::int64_t>(r[0][2].as<double>() * 1e6))).c_str());
                    return busy;
                }
            } else {
                tx.exec_params("SELECT simba_owner($1)", mutex);
            }
        } catch (const pqxx::failure& e) {
            fail_sql(e, "simba_acquire");
        }
    }

    auto contender = std::make_shared<FunctionContender>(
        mutex,
        [sh](const MutexState& st) {
            std::lock_guard<std::mutex> lock(sh->m);
            sh->owner = true;  // `lost` stays set: a new tenure does not undo a loss
            sh->fence = st.after.fence;
            sh->poke();
        },
        [sh](const MutexState&) {
            std::lock_guard<std::mutex> lock(sh->m);
            if (sh->owner) sh->lost = true;
            sh->owner = false;
            sh->poke();
        },
        id);
    pg::FactoryOptions fopts;
    fopts.application_name = "simba-run";
    pg::ContendServiceFactory factory(o.get("dsn"), fopts);
    auto service = factory.create(contender, copts);

    auto next_metrics = SteadyClock::now();
    bool metrics_warned = false;
    auto write_metrics = [&] {
        if (metrics_file.empty()) return;
        next_metrics = SteadyClock::now() + metrics_interval;
        const std::string tmp = metrics_file + ".tmp." + std::to_string(::getpid());
        const std::string text = to_prometheus(factory.metrics());
        FILE* f = std::fopen(tmp.c_str(), "w");
        bool good = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
        if (f) good = (std::fclose(f) == 0) && good;
        if (good) good = std::rename(tmp.c_str(), metrics_file.c_str()) == 0;
        if (!good) {
            std::remove(tmp.c_str());
            if (!metrics_warned)
                std::fprintf(stderr, "simba run: cannot write --metrics-file %s: %s\n", metrics_file.c_str(),
                             std::strerror(errno));
            metrics_warned = true;
        }
    };
    auto metrics_due = [&] { return metrics_file.empty() ? SteadyClock::time_point::max() : next_metrics; };
    auto drain_efd = [&] {
        std::uint64_t v;
        while (::read(sh->efd, &v, sizeof v) > 0) {
        }
    };

    service->start();
    say(verbose, "waiting for mutex " + mutex + " as " + id);
    const auto started = SteadyClock::now();
    // With --wait 0 the lease is ours already: allow the service a connect's time to renew it.
    const auto give_up = !wait ? SteadyClock::time_point::max()
                               : started + (wait->count() == 0 ? microseconds(std::chrono::seconds(10)) : *wait);

    // ------------------------------------------------------------ wait
    std::int64_t fence = 0;
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(sh->m);
            if (sh->owner && service->is_owner()) {
                fence = sh->fence;
                sh->lost = false;
                break;
            }
        }
        auto now = SteadyClock::now();
        if (now >= give_up) {
            auto holder = service->state().after;
            service->stop();
            write_metrics();
            if (wait->count() == 0) {
                std::fprintf(stderr, "simba run: could not confirm the lease on %s within 10s (connection trouble?)\n",
                             mutex.c_str());
                return unavailable;
            }
            std::fprintf(stderr, "simba run: gave up after %s waiting for %s (%s)\n", format_duration(*wait).c_str(),
                         mutex.c_str(),
                         holder.has_owner() ? ("held by " + holder.owner_id + ", fence " + std::to_string(holder.fence)).c_str()
                                            : "not held at the last attempt");
            return busy;
        }
        if (metrics_due() <= now) write_metrics();
        pollfd fds[2] = {{sfd, POLLIN, 0}, {sh->efd, POLLIN, 0}};
        ::poll(fds, 2, wait_ms(std::min(give_up, metrics_due())));
        drain_efd();
        signalfd_siginfo si;
        while (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
            int sig = static_cast<int>(si.ssi_signo);
            if (sig == SIGCHLD || sig == SIGUSR1 || sig == SIGUSR2) continue;
            say(verbose, std::string("got ") + strsignal(sig) + " while waiting: stopping");
            service->stop();
            write_metrics();
            return 128 + sig;
        }
    }

    // ------------------------------------------------------------- CMD
    // Everything the child needs is built before fork: between fork and exec
    // only async-signal-safe calls (the parent has threads).
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
        std::string kv = *e;
        if (kv.rfind("SIMBA_MUTEX=", 0) == 0 || kv.rfind("SIMBA_CONTENDER=", 0) == 0 || kv.rfind("SIMBA_FENCE=", 0) == 0)
            continue;
        env_strings.push_back(kv);
    }
    env_strings.push_back("SIMBA_MUTEX=" + mutex);
    env_strings.push_back("SIMBA_CONTENDER=" + id);
    env_strings.push_back("SIMBA_FENCE=" + std::to_string(fence));
    std::vector<char*> envp, argv;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    for (auto& s : o.rest) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    const std::string not_found = "simba run: " + o.rest[0] + ": command not found\n";
    const std::string cannot = "simba run: " + o.rest[0] + ": cannot execute\n";
    const pid_t parent = ::getpid();

    const pid_t child = ::fork();
    if (child < 0) {
        service->stop();
        throw Failure(software, std::string("fork: ") + std::strerror(errno));
    }
    if (child == 0) {
        ::setpgid(0, 0);
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // CMD must not outlive a killed simba run
        if (::getppid() != parent) ::_exit(cannot_execute);
        ::close(sfd);
        ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
        ::execvpe(argv[0], argv.data(), envp.data());
        const int err = errno;
        write_all(2, err == ENOENT ? not_found.c_str() : cannot.c_str());
        ::_exit(err == ENOENT ? static_cast<int>(Exit::not_found) : static_cast<int>(Exit::cannot_execute));
    }
    ::setpgid(child, child);  // also here: no window in which a signal misses the group
    say(verbose, "acquired " + mutex + " as " + id + ", fence " + std::to_string(fence) + ": running " + o.rest[0] +
                     " (pid " + std::to_string(child) + ")");
    write_metrics();

    bool lost = false, killed = false;
    auto kill_at = SteadyClock::time_point::max();
    int status = 0;
    auto signal_group = [&](int sig) {
        if (::kill(-child, sig) != 0) ::kill(child, sig);
    };
    for (;;) {
        bool gone;
        {
            std::lock_guard<std::mutex> lock(sh->m);
            gone = sh->lost || !sh->owner || sh->fence != fence || !service->is_owner();
        }
        if (gone && !lost) {
            lost = true;
            kill_at = SteadyClock::now() + grace;
            std::fprintf(stderr,
                         "simba run: lost the lock on %s (fence %lld) while %s ran: sending SIGTERM, SIGKILL in %s\n",
                         mutex.c_str(), static_cast<long long>(fence), o.rest[0].c_str(),
                         format_duration(grace).c_str());
            signal_group(SIGTERM);
        }
        if (lost && !killed && SteadyClock::now() >= kill_at) {
            say(true, o.rest[0] + " still running " + format_duration(grace) + " after SIGTERM: SIGKILL");
            signal_group(SIGKILL);
            killed = true;
        }
        auto now = SteadyClock::now();
        if (metrics_due() <= now) write_metrics();
        auto until = std::min(metrics_due(), killed ? SteadyClock::time_point::max() : kill_at);
        pollfd fds[2] = {{sfd, POLLIN, 0}, {sh->efd, POLLIN, 0}};
        ::poll(fds, 2, wait_ms(until));
        drain_efd();
        bool exited = false;
        signalfd_siginfo si;
        while (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
            int sig = static_cast<int>(si.ssi_signo);
            if (sig != SIGCHLD) {
                say(verbose, std::string("forwarding ") + strsignal(sig) + " to " + o.rest[0]);
                signal_group(sig);
            }
        }
        // Checked whether or not a SIGCHLD was seen (signals coalesce); not
        // reaped yet, so CMD's pid (= its group id) cannot be reused before
        // the group is killed below.
        siginfo_t info{};
        if (::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == child)
            exited = true;
        if (exited) break;
    }
    {
        std::lock_guard<std::mutex> lock(sh->m);
        if (!lost && (sh->lost || sh->fence != fence || !service->is_owner())) {
            lost = true;  // the lease ended before CMD did: it finished after the lease ended
            std::fprintf(stderr, "simba run: %s finished after the lease on %s had ended\n", o.rest[0].c_str(),
                         mutex.c_str());
        }
    }
    if (lost) ::kill(-child, SIGKILL);  // whatever CMD left behind in its group
    ::waitpid(child, &status, 0);
    service->stop();
    write_metrics();
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : software;
    if (lost) {
        say(verbose, o.rest[0] + " ended (status " + std::to_string(rc) + ") after the lock was lost: exit 76");
        return lost_lock;
    }
    say(verbose, o.rest[0] + " exited with status " + std::to_string(rc) + "; released " + mutex);
    return rc;
}

}  // namespace simba::cli
