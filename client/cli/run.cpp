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
#include "run_plan.hpp"
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

// Signals: blocked before any thread exists, so the library's threads
// inherit the mask and every signal reaches the signalfd. Returns it (< 0 on
// failure); `old_mask` is the mask CMD starts with.
int block_signals(sigset_t& old_mask) {
    sigset_t handled;
    sigemptyset(&handled);
    const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    for (int s : forwarded) sigaddset(&handled, s);
    sigaddset(&handled, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &handled, &old_mask);
    return ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
}

// A first connection: a clear "could not connect" (69), missing extension
// (78) or privilege (77) before anything else; with --wait 0 it also makes
// the one attempt. Returns `busy` when that attempt finds the mutex held.
std::optional<int> check_server(const std::string& dsn, const RunOptions& o) {
    auto conn = connect(dsn, "simba-run");
    AnswerDeadline deadline(*conn);
    try {
        pqxx::nontransaction tx(*conn);
        if (o.wait && o.wait->count() == 0) {
            auto r = tx.exec_params(
                "SELECT " SIMBA_CLI_OWNER_ID ", fence, extract(epoch FROM transition_at - current_at)::float8"
                " FROM simba_acquire($1, $2, $3::interval, $4::interval)",
                o.mutex, o.contender, to_interval(o.lease.ttl), to_interval(o.lease.transition));
            if (r[0][0].is_null() || r[0][0].as<std::string>() != o.contender) {
                std::fprintf(stderr, "simba run: %s is held by %s (others may take it in %s); not waiting (--wait 0)\n",
                             o.mutex.c_str(), r[0][0].c_str(),
                             format_duration(microseconds(static_cast<std::int64_t>(r[0][2].as<double>() * 1e6))).c_str());
                return busy;
            }
        } else {
            tx.exec_params("SELECT simba_owner($1)", o.mutex);
        }
    } catch (const pqxx::failure& e) {
        fail_sql(e, "simba_acquire");
    }
    return std::nullopt;
}

// The contender whose callbacks only record the tenure in `sh` and wake the
// main thread; failing renewals are worth a line before the loss they may become.
std::shared_ptr<FunctionContender> make_contender(const std::shared_ptr<Shared>& sh, const RunOptions& o) {
    auto contender = std::make_shared<FunctionContender>(
        o.mutex,
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
        o.contender);
    const std::string mutex = o.mutex;
    contender->set_on_suspended([mutex](const Lease& lease) {
        std::fprintf(stderr, "simba run: renewals of mutex %s are failing: the lease ends in %lld ms unless one succeeds\n",
                     mutex.c_str(), static_cast<long long>(duration_cast<milliseconds>(lease.remaining()).count()));
    });
    contender->set_on_resumed([mutex](const Lease& lease) {
        std::fprintf(stderr, "simba run: renewals of mutex %s succeed again (fence %lld)\n", mutex.c_str(),
                     static_cast<long long>(lease.fence));
    });
    return contender;
}

// --metrics-file: the factory's metrics, written whole (a temporary file
// renamed over it) every --metrics-interval and at the end; a failure is
// said once.
class MetricsFile {
public:
    MetricsFile(const RunOptions& o, const pg::ContendServiceFactory& factory)
        : path_(o.metrics_file), interval_(o.metrics_interval), factory_(factory) {}

    SteadyClock::time_point due() const { return path_.empty() ? SteadyClock::time_point::max() : next_; }

    void write() {
        if (path_.empty()) return;
        next_ = SteadyClock::now() + interval_;
        const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
        const std::string text = to_prometheus(factory_.metrics());
        FILE* f = std::fopen(tmp.c_str(), "w");
        bool good = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
        if (f) good = (std::fclose(f) == 0) && good;
        if (good) good = std::rename(tmp.c_str(), path_.c_str()) == 0;
        if (!good) {
            std::remove(tmp.c_str());
            if (!warned_)
                std::fprintf(stderr, "simba run: cannot write --metrics-file %s: %s\n", path_.c_str(),
                             std::strerror(errno));
            warned_ = true;
        }
    }

private:
    const std::string path_;
    const microseconds interval_;
    const pg::ContendServiceFactory& factory_;
    SteadyClock::time_point next_ = SteadyClock::now();
    bool warned_ = false;
};

// One simba run after its setup: waits for the lease, then has the watchdog
// run CMD and supervises it until every process of CMD's is gone.
class Runner {
public:
    Runner(const RunOptions& o, Shared& sh, int sfd, Watchdog& wd, MutexContendService& service, MetricsFile& metrics)
        : o_(o), sh_(sh), sfd_(sfd), wd_(wd), service_(service), metrics_(metrics) {}

    /// An exit code if CMD must not run; nullopt once the lease is ours.
    std::optional<int> wait_for_lease();
    /// Runs CMD under the lease; its exit code, or 76 if the lease was lost.
    int run_cmd();

private:
    int give_up();
    std::optional<int> read_signals_while_waiting();
    bool lease_gone();
    void supervise();
    int finish();
    // Gives the watchdog the lease end the library proves now, if still of CMD's tenure.
    void extend_lease() {
        const auto st = service_.state().after;
        if (st.is_owner(o_.contender) && st.fence == fence_) wd_.extend(st.transition_deadline());
    }
    void report() { std::fputs(news_->read(wd_.page()).c_str(), stderr); }
    void drain_efd() {
        std::uint64_t v;
        while (::read(sh_.efd, &v, sizeof v) > 0) {
        }
    }

    const RunOptions& o_;
    Shared& sh_;
    const int sfd_;
    Watchdog& wd_;
    MutexContendService& service_;
    MetricsFile& metrics_;
    std::int64_t fence_ = 0;  // of the tenure CMD runs in
    bool lost_ = false;       // said: the lease was lost while CMD ran
    int wd_status_ = 0;
    std::optional<WatchdogNews> news_;  // from when CMD starts
};

std::optional<int> Runner::wait_for_lease() {
    const auto started = SteadyClock::now();
    // With --wait 0 the lease is ours already: allow the service a connect's time to renew it.
    const auto until = !o_.wait ? SteadyClock::time_point::max()
                                : started + (o_.wait->count() == 0 ? microseconds(std::chrono::seconds(10)) : *o_.wait);
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(sh_.m);
            if (sh_.owner && service_.is_owner()) {
                fence_ = sh_.fence;
                sh_.lost = false;
                sh_.tenures = 1;  // counted from the tenure CMD runs in
                return std::nullopt;
            }
        }
        auto now = SteadyClock::now();
        if (now >= until) return give_up();
        if (metrics_.due() <= now) metrics_.write();
        pollfd fds[2] = {{sfd_, POLLIN, 0}, {sh_.efd, POLLIN, 0}};
        ::poll(fds, 2, wait_ms(std::min(until, metrics_.due())));
        drain_efd();
        if (auto rc = read_signals_while_waiting()) return rc;
    }
}

int Runner::give_up() {
    auto holder = service_.state().after;
    service_.stop();
    metrics_.write();
    if (o_.wait->count() == 0) {
        std::fprintf(stderr, "simba run: could not confirm the lease on %s within 10s (connection trouble?)\n",
                     o_.mutex.c_str());
        return unavailable;
    }
    std::fprintf(stderr, "simba run: gave up after %s waiting for %s (%s)\n", format_duration(*o_.wait).c_str(),
                 o_.mutex.c_str(),
                 holder.has_owner() ? ("held by " + holder.owner_id + ", fence " + std::to_string(holder.fence)).c_str()
                                    : "not held at the last attempt");
    return busy;
}

// Signals while waiting: SIGCHLD can only be the watchdog's (it has no CMD
// yet), SIGUSR1/2 are for CMD, any other stops simba run (128 + the signal).
std::optional<int> Runner::read_signals_while_waiting() {
    signalfd_siginfo si;
    while (::read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        int sig = static_cast<int>(si.ssi_signo);
        if (sig == SIGCHLD) {
            if (::waitpid(wd_.pid(), nullptr, WNOHANG) == wd_.pid()) {
                service_.stop();
                throw Failure(software, "the watchdog (pid " + std::to_string(wd_.pid()) + ") died before CMD started");
            }
            continue;
        }
        if (sig == SIGUSR1 || sig == SIGUSR2) continue;
        say(o_.verbose, std::string("got ") + strsignal(sig) + " while waiting: stopping");
        service_.stop();
        metrics_.write();
        return 128 + sig;
    }
    return std::nullopt;
}

// Whether the tenure CMD runs in has ended, by the callbacks or the service.
bool Runner::lease_gone() {
    bool gone;
    {
        std::lock_guard<std::mutex> lock(sh_.m);
        gone = sh_.lost || !sh_.owner || sh_.fence != fence_;
    }
    return gone || !service_.is_owner();
}

// The watchdog starts CMD and enforces the lease on it; this loop only feeds
// it the lease end the library proves after each renewal, passes signals on
// and reports. Nothing here is on the path that kills CMD in time
// (docs/design.md, "simba run"). Returns when the watchdog has exited.
void Runner::supervise() {
    extend_lease();
    {
        std::lock_guard<std::mutex> lock(sh_.m);
        wd_.extend(sh_.end);
    }
    wd_.start(fence_);
    news_.emplace(o_, fence_);
    const std::string& cmd = o_.cmd[0];
    for (bool wd_exited = false; !wd_exited;) {
        const bool gone = lease_gone();
        if (gone && !lost_) {
            lost_ = true;
            wd_.kill_now();  // the watchdog signals; we log after
            std::fprintf(stderr, "simba run: lost the lock on %s (fence %lld) while %s ran\n", o_.mutex.c_str(),
                         static_cast<long long>(fence_), cmd.c_str());
        } else if (!gone) {
            extend_lease();
        }
        report();
        auto now = SteadyClock::now();
        if (metrics_.due() <= now) metrics_.write();
        pollfd fds[3] = {{sfd_, POLLIN, 0}, {sh_.efd, POLLIN, 0}, {wd_.news_fd(), POLLIN, 0}};
        ::poll(fds, 3, wait_ms(std::min(metrics_.due(), now + o_.check_every)));
        drain_efd();
        wd_.drain();
        signalfd_siginfo si;
        while (::read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
            int sig = static_cast<int>(si.ssi_signo);
            if (sig != SIGCHLD) {
                wd_.forward(sig);
                say(o_.verbose, std::string("forwarding ") + strsignal(sig) + " to " + cmd);
            }
        }
        // Checked whether or not a SIGCHLD was seen (signals coalesce).
        if (::waitpid(wd_.pid(), &wd_status_, WNOHANG) == wd_.pid()) wd_exited = true;
    }
}

// After the watchdog exited: its own death, a failed fork, or CMD's end
// (its status, or 76 if the lease ended before all its processes did).
int Runner::finish() {
    const auto& page = wd_.page();
    const std::string& cmd = o_.cmd[0];
    if (!(WIFEXITED(wd_status_) && WEXITSTATUS(wd_status_) == 0 && page.done.load())) {
        // The watchdog was killed: CMD died with it (PR_SET_PDEATHSIG); what
        // it left is reparented to us (a subreaper too).
        kill_all_children();
        service_.stop();
        metrics_.write();
        std::fprintf(stderr, "simba run: the watchdog (pid %d) died (%s): killed %s and its processes\n",
                     static_cast<int>(wd_.pid()),
                     WIFSIGNALED(wd_status_) ? strsignal(WTERMSIG(wd_status_))
                                             : ("status " + std::to_string(WEXITSTATUS(wd_status_))).c_str(),
                     cmd.c_str());
        return software;
    }
    if (page.cmd_pid.load() < 0) {
        service_.stop();
        throw Failure(software, std::string("fork: ") + std::strerror(-page.cmd_pid.load()));
    }
    report();
    // SIGKILLed, or SIGTERMed for failing renewals with no renewal after it
    // (CMD may have exited by the SIGTERM): either way the lock was lost, 76.
    const bool killed = page.kill_sent_ns.load() != 0 || page.term_pending.load() != 0;
    bool ended;
    {
        std::lock_guard<std::mutex> lock(sh_.m);
        ended = sh_.lost || sh_.fence != fence_ || !service_.is_owner();
    }
    // Every process CMD started is gone: only now may the lock pass on.
    // stop() runs the callbacks still queued: a lapse the library bridged
    // with a new tenure (simba run was stopped past its lease) shows there.
    service_.stop();
    {
        std::lock_guard<std::mutex> lock(sh_.m);
        ended = ended || sh_.tenures > 1 || sh_.fence != fence_;
    }
    if (!lost_ && !killed && ended) {
        lost_ = true;  // the lease ended before CMD's processes did: they finished after it ended
        std::fprintf(stderr, "simba run: %s finished after the lease on %s had ended\n", cmd.c_str(), o_.mutex.c_str());
    }
    metrics_.write();
    const int rc = exit_code_of(page.cmd_status.load());
    if (lost_ || killed) {
        say(o_.verbose, cmd + " ended (status " + std::to_string(rc) + ") after the lock was lost: exit 76");
        return lost_lock;
    }
    say(o_.verbose, cmd + " exited with status " + std::to_string(rc) + "; released " + o_.mutex);
    return rc;
}

int Runner::run_cmd() {
    supervise();
    return finish();
}

}  // namespace

int cmd_run(const Args& a) {
    const RunOptions o = parse_run_options(a);
    sigset_t cmd_mask;
    const int sfd = block_signals(cmd_mask);
    auto sh = std::make_shared<Shared>();
    sh->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sfd < 0 || sh->efd < 0) throw Failure(software, std::string("signalfd/eventfd: ") + std::strerror(errno));

    set_log_handler([verbose = o.verbose](LogLevel level, const std::string& msg) {
        if (level == LogLevel::debug || (level == LogLevel::info && !verbose)) return;
        std::fprintf(stderr, "simba run: [%s] %s\n", to_string(level), msg.c_str());
    });
    if (auto held = check_server(a.dsn, o)) return *held;

    // Forked now, while this process has a single thread (the factory below
    // starts the library's); a subreaper, like the watchdog, so that what CMD
    // leaves comes to us should the watchdog be killed.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    WatchdogConfig wcfg;
    wcfg.argv = o.cmd;
    wcfg.mutex = o.mutex;
    wcfg.contender = o.contender;
    wcfg.margin = o.margin;
    wcfg.grace = o.grace;
    wcfg.cmd_mask = cmd_mask;
    Watchdog wd(std::move(wcfg), {sfd, sh->efd});

    auto contender = make_contender(sh, o);
    pg::FactoryOptions fopts;
    fopts.application_name = "simba-run";
    pg::ContendServiceFactory factory(a.dsn, fopts);
    auto service = factory.create(contender, o.lease);
    MetricsFile metrics(o, factory);
    Runner runner(o, *sh, sfd, wd, *service, metrics);

    service->start();
    say(o.verbose, "waiting for mutex " + o.mutex + " as " + o.contender);
    if (auto rc = runner.wait_for_lease()) return *rc;
    return runner.run_cmd();
}

}  // namespace simba::cli
