// simba run: a cluster-wide singleton runner (a distributed flock).
//
// One contend service of the library holds the lease. CMD is started, and
// killed before the lease can pass on, by a watchdog process (watchdog.hpp):
// this process only tells it the lease end the library proves after each
// renewal (docs/design.md "Safety rules" rule 3), so a stopped, killed or
// wedged simba run cannot keep CMD alive. Every signal simba run handles is
// blocked in all threads and read from a signalfd by the main thread; the
// callbacks only set a flag and poke an eventfd.
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
#include "watchdog.hpp"

namespace simba::cli {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

struct Shared {
    std::mutex m;
    bool owner = false;
    bool lost = false;  // on_released after on_acquired
    int tenures = 0;    // on_acquired calls: a second one means the first tenure ended
    std::int64_t fence = 0;
    SteadyClock::time_point end{};  // the acquiring reply's proven lease end
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

}  // namespace

int cmd_run(const Args& a) {
    if (!a.mutex) throw UsageError("simba run: --mutex NAME is required");
    if (a.cmd.empty()) throw UsageError("simba run: no command given: simba run --mutex NAME -- CMD [ARGS...]");
    const std::string mutex = *a.mutex;
    const std::string id = a.contender ? *a.contender : ContenderId::host();
    ContendOptions copts;
    copts.ttl = parse_duration(a.ttl.value_or("10s"), "--ttl");
    copts.transition = parse_duration(a.transition.value_or("6s"), "--transition");
    std::optional<microseconds> wait;
    if (a.wait && *a.wait != "forever") wait = parse_duration(*a.wait, "--wait");
    const auto metrics_interval = parse_duration(a.metrics_interval.value_or("5s"), "--metrics-interval");
    if (metrics_interval.count() <= 0) throw UsageError("--metrics-interval must be greater than 0");
    const std::string metrics_file = a.metrics_file.value_or("");
    const bool verbose = a.verbose;
    validate_mutex(mutex);
    validate_contender_id(id);
    copts.validate();
    // The watchdog kills CMD `margin` before the lease end it can prove: a
    // tenth of the lease (at most 500 ms) for waking and killing, plus the
    // library's bound on the server's clock running fast. SIGTERM goes out
    // `grace` earlier; it must come after the first renewal attempt, which
    // the library makes `window` before the lease end (contend_period.hpp),
    // leaving a tenth of the window for a renewal to land.
    const auto lease = copts.ttl + copts.transition;
    const auto margin = std::min<microseconds>(lease / 10, milliseconds(500)) +
                        microseconds(lease.count() / 1000000 * copts.clock_drift_ppm +
                                     lease.count() % 1000000 * copts.clock_drift_ppm / 1000000);
    const auto window = std::max<microseconds>(copts.transition, lease / 4);
    const auto max_grace = window - margin - window / 10;
    const auto grace = a.grace ? parse_duration(*a.grace, "--grace") : window / 3;
    if (grace > max_grace)
        throw UsageError("--grace " + format_duration(grace) + " does not fit in the lease: CMD gets SIGTERM --grace " +
                         "before the watchdog's SIGKILL, which comes " + format_duration(margin) +
                         " before the lease ends, and renewals start " + format_duration(window) +
                         " before it (--transition, or a quarter of ttl + transition if more); with a tenth of that "
                         "left for renewing, --grace can be at most " + format_duration(max_grace) +
                         ": lower --grace or raise --transition");
    // How often the lease end the library proves is passed to the watchdog.
    const auto check_every = std::clamp<SteadyClock::duration>(window / 20, milliseconds(5), milliseconds(100));

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
        auto conn = connect(a.dsn, "simba-run");
        AnswerDeadline deadline(*conn);
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

    // Forked now, while this process has a single thread (the factory below
    // starts the library's); a subreaper, like the watchdog, so that what CMD
    // leaves comes to us should the watchdog be killed.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    WatchdogConfig wcfg;
    wcfg.argv = a.cmd;
    wcfg.mutex = mutex;
    wcfg.contender = id;
    wcfg.margin = margin;
    wcfg.grace = grace;
    wcfg.cmd_mask = old_mask;
    auto wd = std::make_unique<Watchdog>(std::move(wcfg), std::vector<int>{sfd, sh->efd});

    auto contender = std::make_shared<FunctionContender>(
        mutex,
        [sh](const MutexState& st) {
            std::lock_guard<std::mutex> lock(sh->m);
            sh->owner = true;  // `lost` stays set: a new tenure does not undo a loss
            ++sh->tenures;
            sh->fence = st.after.fence;
            sh->end = st.after.transition_deadline();
            sh->poke();
        },
        [sh](const MutexState&) {
            std::lock_guard<std::mutex> lock(sh->m);
            if (sh->owner) sh->lost = true;
            sh->owner = false;
            sh->poke();
        },
        id);
    // Failing renewals are worth a line before the loss they may become.
    contender->set_on_suspended([mutex](const Lease& lease) {
        std::fprintf(stderr, "simba run: renewals of mutex %s are failing: the lease ends in %lld ms unless one succeeds\n",
                     mutex.c_str(), static_cast<long long>(duration_cast<milliseconds>(lease.remaining()).count()));
    });
    contender->set_on_resumed([mutex](const Lease& lease) {
        std::fprintf(stderr, "simba run: renewals of mutex %s succeed again (fence %lld)\n", mutex.c_str(),
                     static_cast<long long>(lease.fence));
    });
    pg::FactoryOptions fopts;
    fopts.application_name = "simba-run";
    pg::ContendServiceFactory factory(a.dsn, fopts);
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
                sh->tenures = 1;  // counted from the tenure CMD runs in
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
            if (sig == SIGCHLD) {
                if (::waitpid(wd->pid(), nullptr, WNOHANG) == wd->pid()) {
                    service->stop();
                    throw Failure(software, "the watchdog (pid " + std::to_string(wd->pid()) +
                                                ") died before CMD started");
                }
                continue;
            }
            if (sig == SIGUSR1 || sig == SIGUSR2) continue;
            say(verbose, std::string("got ") + strsignal(sig) + " while waiting: stopping");
            service->stop();
            write_metrics();
            return 128 + sig;
        }
    }

    // ------------------------------------------------------------- CMD
    // The watchdog starts CMD and enforces the lease on it; this loop only
    // feeds it the lease end the library proves after each renewal, passes
    // signals on and reports. Nothing here is on the path that kills CMD in
    // time (docs/design.md, "simba run").
    const auto tenure = service->state().after;
    if (tenure.is_owner(id) && tenure.fence == fence) wd->extend(tenure.transition_deadline());
    {
        std::lock_guard<std::mutex> lock(sh->m);
        wd->extend(sh->end);
    }
    wd->start(fence);
    const auto& page = wd->page();

    bool lost = false, wd_exited = false, said_exit = false;
    std::int64_t said_term = 0, said_kill = 0;
    int wd_status = 0;
    auto before_end = [](const std::atomic<std::int64_t>& left_ns) {
        return format_duration(duration_cast<microseconds>(std::chrono::nanoseconds(left_ns.load())));
    };
    // What the watchdog did, said after it was done.
    auto report = [&] {
        if (page.cmd_pid.load() < 0) return;
        const auto term = page.term_sent_ns.load(), kill = page.kill_sent_ns.load();
        if (term != 0 && term != said_term) {
            said_term = term;
            std::fprintf(stderr,
                         "simba run: renewals of %s are failing: sent SIGTERM to %s's processes %s before the lease "
                         "ends (--grace %s before the SIGKILL)\n",
                         mutex.c_str(), a.cmd[0].c_str(), before_end(page.term_left_ns).c_str(), format_duration(grace).c_str());
        }
        if (kill != 0 && kill != said_kill) {
            said_kill = kill;
            const auto why = static_cast<KillReason>(page.kill_reason.load());
            if (why == KillReason::deadline)
                std::fprintf(stderr,
                             "simba run: no renewal of %s (fence %lld) came in time: killed (SIGKILL) %s's processes "
                             "%s before the lease ends\n",
                             mutex.c_str(), static_cast<long long>(fence), a.cmd[0].c_str(), before_end(page.kill_left_ns).c_str());
            else if (why == KillReason::lost)
                std::fprintf(stderr, "simba run: killed (SIGKILL) %s's processes\n", a.cmd[0].c_str());
        }
        if (page.cmd_exited.load() && !said_exit && page.lingering.load() > 0 && page.kill_sent_ns.load() == 0) {
            said_exit = true;
            const int st = page.cmd_status.load();
            std::fprintf(stderr,
                         "simba run: %s exited (status %d) and left %d process(es) running: holding %s until they exit\n",
                         a.cmd[0].c_str(), WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), page.lingering.load(),
                         mutex.c_str());
        }
    };
    while (!wd_exited) {
        bool gone;
        {
            std::lock_guard<std::mutex> lock(sh->m);
            gone = sh->lost || !sh->owner || sh->fence != fence;
        }
        gone = gone || !service->is_owner();
        if (gone && !lost) {
            lost = true;
            wd->kill_now();  // the watchdog signals; we log after
            std::fprintf(stderr, "simba run: lost the lock on %s (fence %lld) while %s ran\n", mutex.c_str(),
                         static_cast<long long>(fence), a.cmd[0].c_str());
        } else if (!gone) {
            const auto st = service->state().after;
            if (st.is_owner(id) && st.fence == fence) wd->extend(st.transition_deadline());
        }
        report();
        auto now = SteadyClock::now();
        if (metrics_due() <= now) write_metrics();
        pollfd fds[3] = {{sfd, POLLIN, 0}, {sh->efd, POLLIN, 0}, {wd->news_fd(), POLLIN, 0}};
        ::poll(fds, 3, wait_ms(std::min(metrics_due(), now + check_every)));
        drain_efd();
        wd->drain();
        signalfd_siginfo si;
        while (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
            int sig = static_cast<int>(si.ssi_signo);
            if (sig != SIGCHLD) {
                wd->forward(sig);
                say(verbose, std::string("forwarding ") + strsignal(sig) + " to " + a.cmd[0]);
            }
        }
        // Checked whether or not a SIGCHLD was seen (signals coalesce).
        if (::waitpid(wd->pid(), &wd_status, WNOHANG) == wd->pid()) wd_exited = true;
    }
    if (!(WIFEXITED(wd_status) && WEXITSTATUS(wd_status) == 0 && page.done.load())) {
        // The watchdog was killed: CMD died with it (PR_SET_PDEATHSIG); what
        // it left is reparented to us (a subreaper too).
        kill_all_children();
        service->stop();
        write_metrics();
        std::fprintf(stderr, "simba run: the watchdog (pid %d) died (%s): killed %s and its processes\n",
                     static_cast<int>(wd->pid()),
                     WIFSIGNALED(wd_status) ? strsignal(WTERMSIG(wd_status))
                                            : ("status " + std::to_string(WEXITSTATUS(wd_status))).c_str(),
                     a.cmd[0].c_str());
        return software;
    }
    if (page.cmd_pid.load() < 0) {
        service->stop();
        throw Failure(software, std::string("fork: ") + std::strerror(-page.cmd_pid.load()));
    }
    report();
    // SIGKILLed, or SIGTERMed for failing renewals with no renewal after it
    // (CMD may have exited by the SIGTERM): either way the lock was lost, 76.
    const bool killed = page.kill_sent_ns.load() != 0 || page.term_pending.load() != 0;
    bool ended;
    {
        std::lock_guard<std::mutex> lock(sh->m);
        ended = sh->lost || sh->fence != fence || !service->is_owner();
    }
    // Every process CMD started is gone: only now may the lock pass on.
    // stop() runs the callbacks still queued: a lapse the library bridged
    // with a new tenure (simba run was stopped past its lease) shows there.
    service->stop();
    {
        std::lock_guard<std::mutex> lock(sh->m);
        ended = ended || sh->tenures > 1 || sh->fence != fence;
    }
    if (!lost && !killed && ended) {
        lost = true;  // the lease ended before CMD's processes did: they finished after it ended
        std::fprintf(stderr, "simba run: %s finished after the lease on %s had ended\n", a.cmd[0].c_str(),
                     mutex.c_str());
    }
    write_metrics();
    const int status = page.cmd_status.load();
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : software;
    if (lost || killed) {
        say(verbose, a.cmd[0] + " ended (status " + std::to_string(rc) + ") after the lock was lost: exit 76");
        return lost_lock;
    }
    say(verbose, a.cmd[0] + " exited with status " + std::to_string(rc) + "; released " + mutex);
    return rc;
}

}  // namespace simba::cli
