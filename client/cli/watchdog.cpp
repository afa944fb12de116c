#include "watchdog.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cli.hpp"
#include "run_plan.hpp"

extern char** environ;

namespace simba::cli {

namespace {

std::int64_t boot_ns() { return BootClock::now().time_since_epoch().count(); }

// What a terminal, a shell or a stray `kill` sends simba run's group must not
// take the enforcer away (SIGKILL and SIGSTOP cannot be ignored).
constexpr int kIgnored[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGUSR1, SIGUSR2,
                            SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE, SIGALRM};

void poke_fd(int fd) {
    const char b = 1;
    [[maybe_unused]] auto n = ::write(fd, &b, 1);  // non-blocking: a full pipe already means "look"
}

// The watchdog process (never returns).
class Keeper {
public:
    Keeper(const WatchdogConfig& cfg, WatchdogPage& page, int life_r, int news_w)
        : cfg_(cfg), page_(page), life_r_(life_r), news_w_(news_w) {}

    [[noreturn]] void run() {
        become_watchdog();
        for (;;) {
            if (!started_ && parent_gone_) ::_exit(0);
            if (!started_ && page_.start.load()) start_cmd();
            arm(started_ ? enforce() : LLONG_MAX);
            wait_for_events();
        }
    }

private:
    // Out of simba run's reach (its process group, the signals aimed at it),
    // the reaper of CMD's orphans, with a signalfd for SIGCHLD and a timer.
    void become_watchdog() {
        ::prctl(PR_SET_NAME, "simba-watchdog");
        ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphans of CMD's tree come to us, daemons included
        ::setpgid(0, 0);  // out of simba run's group: a stop or kill aimed at that group misses us
        struct sigaction ign {};
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        for (int s : kIgnored) ::sigaction(s, &ign, &saved_[s]);
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        ::sigprocmask(SIG_SETMASK, &chld, nullptr);
        sfd_ = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
        tfd_ = ::timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);
        if (sfd_ < 0 || tfd_ < 0) ::_exit(software);
        self_ = ::getpid();
    }

    /// One look at the lease once CMD runs: sends what keeper_step says is
    /// due, publishes it, forwards signals, reaps (exits when nothing is
    /// left). Returns when to look again.
    std::int64_t enforce() {
        const std::int64_t now = boot_ns(), end = page_.lease_end_ns.load();
        const KeeperStep step =
            keeper_step({now, end, killing_, parent_gone_, page_.kill_now.load() != 0}, cfg_.margin, cfg_.grace);
        if (step.begins != KillReason::none) {
            killing_ = true;
            page_.kill_reason.store(static_cast<int>(step.begins));
        }
        if (step.action == KeeperStep::kill) {
            sweep(SIGKILL);  // signal first; simba run logs it
            if (page_.kill_sent_ns.load() == 0) {
                page_.kill_left_ns.store(end - now);
                page_.kill_sent_ns.store(now);
                news();
            }
            check_ = true;
        } else if (step.action == KeeperStep::term) {
            if (!termed_) {
                sweep(SIGTERM);
                termed_ = true;
                page_.term_pending.store(1);
                page_.term_left_ns.store(end - now);
                page_.term_sent_ns.store(now);
                news();
            }
        } else {
            termed_ = false;  // a renewal came after all
            page_.term_pending.store(0);
        }
        if (!killing_)
            for (std::uint64_t f = page_.forward.exchange(0); f; f &= f - 1) sweep(__builtin_ctzll(f));
        if (check_) {
            check_ = false;
            if (reap()) {
                page_.done.store(1);
                news();
                ::_exit(0);
            }
        }
        return step.wake;
    }

    /// Sleeps until simba run writes or dies, a child changes or the timer fires.
    void wait_for_events() {
        pollfd fds[3] = {{life_r_, POLLIN, 0}, {sfd_, POLLIN, 0}, {tfd_, POLLIN, 0}};
        ::poll(fds, 3, -1);
        char buf[64];
        for (;;) {
            auto n = ::read(life_r_, buf, sizeof buf);
            if (n == 0) parent_gone_ = true;
            if (n <= 0) break;
        }
        signalfd_siginfo si;
        while (::read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) check_ = true;
        std::uint64_t ticks;
        [[maybe_unused]] auto n = ::read(tfd_, &ticks, sizeof ticks);
    }

    void news() { poke_fd(news_w_); }

    void arm(std::int64_t at) {
        itimerspec its{};
        if (at != LLONG_MAX) {
            at = std::max<std::int64_t>(at, 1);  // 0 would disarm
            its.it_value.tv_sec = at / 1000000000;
            its.it_value.tv_nsec = at % 1000000000;
        }
        ::timerfd_settime(tfd_, TFD_TIMER_ABSTIME, &its, nullptr);
    }

    void start_cmd() {
        started_ = true;
        std::vector<std::string> env;
        for (char** e = environ; *e; ++e) {
            std::string kv = *e;
            if (kv.rfind("SIMBA_MUTEX=", 0) == 0 || kv.rfind("SIMBA_CONTENDER=", 0) == 0 ||
                kv.rfind("SIMBA_FENCE=", 0) == 0)
                continue;
            env.push_back(std::move(kv));
        }
        env.push_back("SIMBA_MUTEX=" + cfg_.mutex);
        env.push_back("SIMBA_CONTENDER=" + cfg_.contender);
        env.push_back("SIMBA_FENCE=" + std::to_string(page_.fence.load()));
        std::vector<char*> envp, argv;
        for (auto& s : env) envp.push_back(s.data());
        envp.push_back(nullptr);
        for (auto& s : cfg_.argv) argv.push_back(const_cast<char*>(s.c_str()));
        argv.push_back(nullptr);
        const std::string not_found = "simba run: " + cfg_.argv[0] + ": command not found\n";
        const std::string cannot = "simba run: " + cfg_.argv[0] + ": cannot execute\n";
        const pid_t c = ::fork();
        if (c == 0) {
            ::setpgid(0, 0);
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // if the watchdog is killed, CMD goes too
            if (::getppid() != self_) ::_exit(cannot_execute);
            for (int s : kIgnored) ::sigaction(s, &saved_[s], nullptr);
            ::sigprocmask(SIG_SETMASK, &cfg_.cmd_mask, nullptr);
            ::execvpe(argv[0], argv.data(), envp.data());
            const int err = errno;
            const std::string& msg = err == ENOENT ? not_found : cannot;
            [[maybe_unused]] auto n = ::write(2, msg.data(), msg.size());
            ::_exit(err == ENOENT ? static_cast<int>(Exit::not_found) : static_cast<int>(Exit::cannot_execute));
        }
        if (c < 0) {
            page_.cmd_pid.store(-errno);
            page_.done.store(1);
            news();
            ::_exit(0);
        }
        ::setpgid(c, c);  // also here: no window in which a signal misses the group
        cmd_ = c;
        page_.cmd_pid.store(c);
        news();
    }

    /// `sig` to CMD's process group and to every child of ours outside it
    /// (orphans reparented to us: background children, daemons).
    void sweep(int sig) {
        if (!cmd_reaped_) ::kill(-cmd_, sig);
        for (pid_t k : children_of(self_)) {
            if (k == cmd_ || (!cmd_reaped_ && ::getpgid(k) == cmd_)) continue;
            ::kill(k, sig);
        }
    }

    /// Reaps what has exited; true once no descendant is left. CMD stays a
    /// zombie until then: its pid, the group id we signal, cannot be reused.
    bool reap() {
        siginfo_t si{};
        const bool exited = !cmd_exited_ &&
                            ::waitid(P_PID, static_cast<id_t>(cmd_), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                            si.si_pid == cmd_;
        // A child reaped here may have had children the scan saw under it,
        // not yet under us: scan again until a scan reaps nothing.
        int left;
        for (bool reaped = true; reaped;) {
            left = 0;
            reaped = false;
            for (pid_t k : children_of(self_)) {
                if (k == cmd_) continue;
                const pid_t r = ::waitpid(k, nullptr, WNOHANG);
                if (r == 0) ++left;
                reaped = reaped || r == k;
            }
        }
        bool changed = page_.lingering.exchange(left) != left;
        if (exited) {  // published after `lingering`: simba run reads both at once
            cmd_exited_ = changed = true;
            page_.cmd_status.store(si.si_code == CLD_EXITED ? (si.si_status & 0xff) << 8 : (si.si_status & 0x7f));
            page_.cmd_exited.store(1);
        }
        if (changed) news();
        if (!cmd_exited_ || left > 0) return false;
        if (!cmd_reaped_) {
            ::waitpid(cmd_, nullptr, 0);
            cmd_reaped_ = true;
        }
        // The children list is a /proc scan; the kernel's own answer decides.
        for (;;) {
            const pid_t r = ::waitpid(-1, nullptr, WNOHANG);
            if (r < 0 && errno == ECHILD) return true;
            if (r <= 0) return false;
        }
    }

    const WatchdogConfig& cfg_;
    WatchdogPage& page_;
    int life_r_, news_w_;
    int sfd_ = -1, tfd_ = -1;
    pid_t self_ = -1, cmd_ = -1;
    bool started_ = false, parent_gone_ = false, killing_ = false, termed_ = false, check_ = false;
    bool cmd_exited_ = false, cmd_reaped_ = false;
    struct sigaction saved_[NSIG] {};
};

}  // namespace

std::vector<pid_t> children_of(pid_t parent) {
    std::vector<pid_t> out;
    DIR* d = ::opendir("/proc");
    if (!d) return out;
    char path[64], buf[512];
    while (dirent* e = ::readdir(d)) {
        char* end = nullptr;
        const long pid = std::strtol(e->d_name, &end, 10);
        if (pid <= 0 || *end) continue;
        std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        const auto n = ::read(fd, buf, sizeof buf - 1);
        ::close(fd);
        if (n <= 0) continue;
        buf[n] = 0;
        const char* p = std::strrchr(buf, ')');  // comm may hold spaces and ')'
        char state;
        int ppid;
        if (p && std::sscanf(p + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) out.push_back(static_cast<pid_t>(pid));
    }
    ::closedir(d);
    return out;
}

void kill_all_children() {
    for (;;) {
        for (pid_t k : children_of(::getpid())) {
            ::kill(k, SIGKILL);
            ::waitpid(k, nullptr, 0);
        }
        const pid_t r = ::waitpid(-1, nullptr, WNOHANG);
        if (r < 0 && errno == ECHILD) return;
        if (r == 0) {
            timespec ts{0, 5000000};
            ::nanosleep(&ts, nullptr);  // a child the scan missed: it is alive, scan again
        }
    }
}

Watchdog::Watchdog(WatchdogConfig config, const std::vector<int>& close_in_child) {
    void* mem = ::mmap(nullptr, sizeof(WatchdogPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) throw Failure(software, std::string("mmap: ") + std::strerror(errno));
    page_ = new (mem) WatchdogPage();
    int life[2], news[2];
    if (::pipe2(life, O_CLOEXEC | O_NONBLOCK) != 0 || ::pipe2(news, O_CLOEXEC | O_NONBLOCK) != 0)
        throw Failure(software, std::string("pipe: ") + std::strerror(errno));
    pid_ = ::fork();
    if (pid_ < 0) throw Failure(software, std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
        ::close(life[1]);
        ::close(news[0]);
        for (int fd : close_in_child) ::close(fd);
        // Never returns into simba run's code: this process must not act as it.
        try {
            static WatchdogConfig cfg;  // outlives this frame: run() never returns
            cfg = std::move(config);
            Keeper(cfg, *page_, life[0], news[1]).run();
        } catch (...) {
        }
        ::_exit(software);
    }
    ::close(life[0]);
    ::close(news[1]);
    life_w_ = life[1];
    news_r_ = news[0];
}

Watchdog::~Watchdog() {
    ::close(life_w_);
    ::close(news_r_);
    ::munmap(page_, sizeof(WatchdogPage));
}

void Watchdog::drain() {
    char buf[64];
    while (::read(news_r_, buf, sizeof buf) > 0) {
    }
}

void Watchdog::poke() { poke_fd(life_w_); }

void Watchdog::extend(SteadyClock::time_point end) {
    const std::int64_t ns = end.time_since_epoch().count();
    if (ns > page_->lease_end_ns.load()) page_->lease_end_ns.store(ns);  // only we write it
}

void Watchdog::start(std::int64_t fence) {
    page_->fence.store(fence);
    page_->start.store(1);
    poke();
}

void Watchdog::kill_now() {
    page_->kill_now.store(1);
    poke();
}

void Watchdog::forward(int sig) {
    page_->forward.fetch_or(std::uint64_t{1} << sig);
    poke();
}

}  // namespace simba::cli
