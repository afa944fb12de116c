// CLI tests: drive the real `simba` binary (path in $SIMBA_CLI) against the
// throwaway cluster (test/pg-run.sh), and the factory's metrics against the
// same server. Every wait is a condition with a deadline; the CMDs that
// simba run starts check exclusivity themselves (mkdir is atomic).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "pg_support.hpp"
#include "prom_check.hpp"

using namespace simba_test;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

std::string cli() {
    const char* p = std::getenv("SIMBA_CLI");
    return p ? p : "simba";
}

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> lines(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);)
        if (!l.empty()) out.push_back(l);
    return out;
}

struct TempDir {
    std::string path;
    TempDir() {
        char t[] = "/tmp/simba-cli-XXXXXX";
        path = ::mkdtemp(t);
    }
    ~TempDir() { [[maybe_unused]] int rc = std::system(("rm -rf '" + path + "'").c_str()); }
};

/// A child process running the simba binary, stdout/stderr to files.
class Proc {
public:
    Proc(std::vector<std::string> args, std::vector<std::string> env = {}) {
        static int n = 0;
        base_ = "/tmp/simba-cli-out-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
        started_ = SteadyClock::now();
        pid_ = ::fork();
        if (pid_ == 0) {
            int o = ::open((base_ + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            int e = ::open((base_ + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            ::dup2(o, 1);
            ::dup2(e, 2);
            for (auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
            std::vector<char*> argv;
            std::string bin = cli();
            argv.push_back(bin.data());
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            ::execv(bin.c_str(), argv.data());
            ::_exit(250);
        }
    }
    ~Proc() {
        if (!reaped_) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        std::remove((base_ + ".out").c_str());
        std::remove((base_ + ".err").c_str());
    }
    pid_t pid() const { return pid_; }
    /// Exit status as a shell reports it; -1 if still running after `timeout`.
    int wait(milliseconds timeout = milliseconds(30000)) {
        if (reaped_) return rc_;
        auto deadline = SteadyClock::now() + timeout;
        for (;;) {
            int st = 0;
            pid_t r = ::waitpid(pid_, &st, WNOHANG);
            if (r == pid_) {
                reaped_ = true;
                ended_ = SteadyClock::now();
                rc_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                return rc_;
            }
            if (SteadyClock::now() >= deadline) return -1;
            std::this_thread::sleep_for(2ms);
        }
    }
    milliseconds elapsed() const { return duration_cast<milliseconds>(ended_ - started_); }
    std::string out() const { return slurp(base_ + ".out"); }
    std::string err() const { return slurp(base_ + ".err"); }

private:
    std::string base_;
    pid_t pid_ = -1;
    bool reaped_ = false;
    int rc_ = -1;
    SteadyClock::time_point started_, ended_;
};

struct Ran {
    int rc;
    std::string out, err;
    milliseconds elapsed;
};

Ran run(std::vector<std::string> args, std::vector<std::string> env = {}) {
    Proc p(std::move(args), std::move(env));
    int rc = p.wait();
    return {rc, p.out(), p.err(), p.elapsed()};
}

std::string owner_of(const std::string& mutex) {
    auto c = admin();
    pqxx::nontransaction tx(*c);
    auto r = tx.exec_params("SELECT owner_id FROM simba_mutex_status WHERE mutex = $1 AND state <> 'free'", mutex);
    return r.empty() || r[0][0].is_null() ? std::string() : r[0][0].as<std::string>();
}

/// Alive: in /proc and not a zombie (a killed process its parent has not reaped yet).
bool alive(pid_t pid) {
    auto st = slurp("/proc/" + std::to_string(pid) + "/stat");  // "pid (comm) S ..."
    auto p = st.rfind(')');
    return p != std::string::npos && p + 2 < st.size() && st[p + 2] != 'Z';
}

/// The pid a CMD wrote to `path` (waits for the whole line).
pid_t pid_in(const std::string& path) {
    std::string s;
    if (!eventually([&] { return !(s = slurp(path)).empty() && s.back() == '\n'; }, 10000ms)) return -1;
    return static_cast<pid_t>(std::stol(s));
}

/// simba run's watchdog: its child named simba-watchdog.
pid_t watchdog_of(pid_t runner) {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
        const auto name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        auto st = slurp(e.path().string() + "/stat");
        auto open = st.find('('), close = st.rfind(')');
        if (open == std::string::npos || close == std::string::npos) continue;
        std::istringstream rest(st.substr(close + 2));
        char state;
        long ppid = 0;
        rest >> state >> ppid;
        if (ppid == runner && st.substr(open + 1, close - open - 1) == "simba-watchdog") return std::stoi(name);
    }
    return -1;
}

using WallClock = std::chrono::system_clock;

/// When CMD's last process exited, on the wall clock (the server's clock on
/// this machine). CMD opens the FIFO `$D/family` for writing as fd 3 and
/// every process it starts inherits it; the kernel closes a dying process's
/// files before it turns zombie, so the reader sees POLLHUP the moment the
/// last of them is gone: no polling interval in the measurement.
class FamilyWatch {
public:
    explicit FamilyWatch(const std::string& dir) : path_(dir + "/family") {
        ::mkfifo(path_.c_str(), 0600);
        fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // before any writer: HUP only after one left
    }
    ~FamilyWatch() { ::close(fd_); }
    std::optional<WallClock::time_point> gone_at(milliseconds timeout) {
        const auto until = SteadyClock::now() + timeout;
        for (;;) {
            const auto left = duration_cast<milliseconds>(until - SteadyClock::now()).count();
            if (left <= 0 || fd_ < 0) return std::nullopt;
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left)) > 0 && (p.revents & POLLHUP)) return WallClock::now();
            char buf[64];
            while (::read(fd_, buf, sizeof buf) > 0) {
            }
        }
    }

private:
    std::string path_;
    int fd_ = -1;
};

/// The server's end of the lease on `mutex` (transition_at), read once the
/// server's clock has passed it, so no late renewal can move it any more.
std::optional<WallClock::time_point> lease_end(pqxx::connection& c, const std::string& mutex) {
    std::optional<WallClock::time_point> end;
    eventually([&] {
        pqxx::nontransaction tx(c);
        auto r = tx.exec_params("SELECT extract(epoch FROM transition_at)::float8, clock_timestamp() > transition_at"
                                " FROM simba_mutex_status WHERE mutex = $1",
                                mutex);
        if (r.empty() || r[0][0].is_null() || !r[0][1].as<bool>()) return false;
        end = WallClock::time_point(duration_cast<WallClock::duration>(std::chrono::duration<double>(r[0][0].as<double>())));
        return true;
    }, 10000ms);
    return end;
}

long long ms_between(WallClock::time_point a, WallClock::time_point b) { return duration_cast<milliseconds>(b - a).count(); }

/// A CMD that leaves processes behind: a background child in its group and a
/// daemon (setsid, its parent gone) that ignores SIGTERM; their pids in $D,
/// all holding $D/family (FamilyWatch).
const std::string kFamily =
    "exec 3> \"$D/family\"; "
    "sleep 60 & echo $! > \"$D/bg\"; "
    "setsid sh -c 'trap \"\" TERM; sleep 60 & echo $! > \"$D/daemon\"' & "
    "echo $$ > \"$D/cmd\"; ";

}  // namespace

// ------------------------------------------------------------------- run

TEST(CliRun, FiveRunnersOnlyOneCommandAtATime) {
    TempDir d;
    const auto mutex = unique_name("cli-exclusive");
    // The CMD checks exclusivity itself: mkdir fails if another CMD is inside.
    const std::string body =
        "mkdir \"$D/inside\" 2>/dev/null || { echo \"overlap $SIMBA_CONTENDER\" >> \"$D/violations\"; exit 3; }; "
        "echo \"$SIMBA_FENCE $SIMBA_CONTENDER\" >> \"$D/log\"; sleep 0.2; "
        "rmdir \"$D/inside\"";
    std::vector<std::unique_ptr<Proc>> runners;
    for (int i = 0; i < 5; ++i)
        runners.push_back(std::make_unique<Proc>(
            std::vector<std::string>{"run", "--mutex", mutex, "--contender", "runner-" + std::to_string(i), "--ttl",
                                     "2s", "--transition", "1s", "--metrics-file",
                                     d.path + "/m" + std::to_string(i) + ".prom", "--", "sh", "-c", body},
            std::vector<std::string>{"D=" + d.path}));
    for (auto& r : runners) EXPECT_EQ(r->wait(), 0) << r->err();
    EXPECT_FALSE(exists(d.path + "/violations")) << slurp(d.path + "/violations");
    auto log = lines(slurp(d.path + "/log"));
    ASSERT_EQ(log.size(), 5u);
    std::set<std::string> who;
    long long last = 0;
    for (auto& l : log) {
        long long fence = std::stoll(l.substr(0, l.find(' ')));
        EXPECT_GT(fence, last) << "fences must increase from one holder to the next";
        last = fence;
        who.insert(l.substr(l.find(' ') + 1));
    }
    EXPECT_EQ(who.size(), 5u);
    EXPECT_EQ(owner_of(mutex), "") << "the last runner released on exit";
    // Each runner's --metrics-file: valid exposition, one tenure, one release.
    for (int i = 0; i < 5; ++i) {
        auto r = prom_check::check(slurp(d.path + "/m" + std::to_string(i) + ".prom"));
        ASSERT_TRUE(r.ok()) << r.error_text();
        std::map<std::string, std::string> l = {{"mutex", mutex}, {"contender", "runner-" + std::to_string(i)}};
        EXPECT_EQ(r.value("simba_client_acquired_total", l), 1);
        EXPECT_EQ(r.value("simba_client_released_total", l), 1);
        EXPECT_EQ(r.value("simba_client_lost_total", l), 0);
        EXPECT_EQ(r.value("simba_client_is_owner", l), 0);
        EXPECT_GE(r.value("simba_client_attempts_total", l), 1);
        EXPECT_EQ(r.value("simba_client_acquire_latency_seconds_count", l), 1);
    }
}

TEST(CliRun, ForcedReleaseKillsACommandThatIgnoresSigterm) {
    TempDir d;
    const auto mutex = unique_name("cli-grace");
    // CMD ignores SIGTERM and leaves a background process in its group.
    Proc runner({"run", "--mutex", mutex, "--ttl", "1s", "--transition", "500ms", "--grace", "200ms", "--", "sh", "-c",
                 "trap '' TERM; sh -c 'echo $$ > \"$D/bg.pid\"; exec sleep 100' & "
                 "echo up > \"$D/started\"; while :; do sleep 0.05; done"},
                {"D=" + d.path});
    ASSERT_TRUE(eventually([&] { return exists(d.path + "/started") && !slurp(d.path + "/bg.pid").empty(); }, 10000ms))
        << runner.err();
    const pid_t bg = pid_in(d.path + "/bg.pid");
    ASSERT_TRUE(alive(bg));
    auto forced = run({"release", "--force", "--mutex", mutex});
    ASSERT_EQ(forced.rc, 0) << forced.err;
    EXPECT_EQ(runner.wait(), 76) << runner.err();
    EXPECT_NE(runner.err().find("SIGKILL"), std::string::npos) << runner.err();
    EXPECT_FALSE(alive(bg)) << "CMD's group is killed before simba run exits";
    EXPECT_EQ(owner_of(mutex), "");
}

TEST(CliRun, ExitCodesAndEnvironment) {
    const auto mutex = unique_name("cli-codes");
    auto r = run({"run", "-m", mutex, "-c", "env-check", "--", "sh", "-c",
                  "echo \"$SIMBA_MUTEX|$SIMBA_CONTENDER|$SIMBA_FENCE\"; exit 7"});
    EXPECT_EQ(r.rc, 7) << r.err;
    {
        auto c = admin();
        pqxx::nontransaction tx(*c);
        auto fence = tx.exec_params1("SELECT fence FROM simba_mutex_status WHERE mutex = $1", mutex)[0].as<long long>();
        EXPECT_EQ(r.out, mutex + "|env-check|" + std::to_string(fence) + "\n");
    }
    EXPECT_EQ(run({"owner", "-m", mutex}).rc, 1) << "released when CMD exited";
    EXPECT_EQ(run({"run", "-m", mutex, "--", "sh", "-c", "kill -KILL $$"}).rc, 128 + SIGKILL);
    auto nf = run({"run", "-m", mutex, "--", "simba-no-such-command"});
    EXPECT_EQ(nf.rc, 127);
    EXPECT_NE(nf.err.find("command not found"), std::string::npos) << nf.err;
    EXPECT_EQ(run({"run", "-m", mutex, "--", "/etc/passwd"}).rc, 126);
    // Usage errors: 64, with what to do.
    auto u1 = run({"run", "--", "true"});
    EXPECT_EQ(u1.rc, 64);
    EXPECT_NE(u1.err.find("--mutex NAME is required"), std::string::npos) << u1.err;
    EXPECT_EQ(run({"run", "-m", mutex}).rc, 64);
    auto u3 = run({"run", "-m", mutex, "--ttl", "soon", "--", "true"});
    EXPECT_EQ(u3.rc, 64);
    EXPECT_NE(u3.err.find("10s, 500ms"), std::string::npos) << u3.err;
    // --grace is CMD's time before the lease ends: it must fit in the renewal window.
    auto u4 = run({"run", "-m", mutex, "--ttl", "1s", "--transition", "500ms", "--grace", "1s", "--", "true"});
    EXPECT_EQ(u4.rc, 64);
    EXPECT_NE(u4.err.find("--grace 1.0s does not fit in the lease"), std::string::npos) << u4.err;
    EXPECT_NE(u4.err.find("at most 299ms"), std::string::npos) << u4.err;
    EXPECT_EQ(run({"run", "-m", mutex, "--ttl", "1s", "--transition", "500ms", "--grace", "299ms", "--", "true"}).rc, 0);
    EXPECT_EQ(run({"run", "-m", mutex, "--bogus", "--", "true"}).rc, 64);
    EXPECT_EQ(run({"frobnicate"}).rc, 64);
    // --help on every command: exit 0, usage on stdout.
    for (const char* c : {"run", "status", "acquire", "release", "owner", "metrics", "top"}) {
        auto h = run({c, "--help"});
        EXPECT_EQ(h.rc, 0) << c;
        EXPECT_EQ(h.out.rfind(std::string("usage: simba ") + c, 0), 0u) << h.out;
    }
    // Could not connect: 69, with a hint.
    auto nc = run({"run", "-m", mutex, "--dsn", "host=/nonexistent-simba-dir", "--", "true"});
    EXPECT_EQ(nc.rc, 69);
    EXPECT_NE(nc.err.find("hint: set PGHOST"), std::string::npos) << nc.err;
    EXPECT_EQ(run({"status", "--dsn", "host=/nonexistent-simba-dir"}).rc, 69);
    // Busy: --wait 0 exits 75 at once, --wait 300ms after 300 ms; CMD never runs.
    ASSERT_EQ(run({"acquire", "-m", mutex, "-c", "holder", "--ttl", "30s"}).rc, 0);
    auto b0 = run({"run", "-m", mutex, "--wait", "0", "--", "sh", "-c", "echo ran"});
    EXPECT_EQ(b0.rc, 75);
    EXPECT_EQ(b0.out, "");
    EXPECT_NE(b0.err.find("held by holder"), std::string::npos) << b0.err;
    auto b1 = run({"run", "-m", mutex, "--wait", "300ms", "--", "sh", "-c", "echo ran"});
    EXPECT_EQ(b1.rc, 75);
    EXPECT_EQ(b1.out, "");
    EXPECT_GE(b1.elapsed, 300ms);
    EXPECT_EQ(owner_of(mutex), "holder");
    // --wait 0 on a free mutex runs CMD.
    const auto free_mutex = unique_name("cli-codes-free");
    EXPECT_EQ(run({"run", "-m", free_mutex, "--wait", "0", "--", "true"}).rc, 0);
}

TEST(CliRun, SignalsAreForwardedToTheCommand) {
    TempDir d;
    const auto mutex = unique_name("cli-signals");
    Proc runner({"run", "-m", mutex, "--", "sh", "-c",
                 "trap 'echo USR1 >> \"$D/sig\"' USR1; trap 'echo TERM >> \"$D/sig\"; exit 5' TERM; "
                 "echo up > \"$D/started\"; while :; do sleep 0.05; done"},
                {"D=" + d.path});
    ASSERT_TRUE(eventually([&] { return exists(d.path + "/started"); }, 10000ms)) << runner.err();
    ::kill(runner.pid(), SIGUSR1);
    ASSERT_TRUE(eventually([&] { return slurp(d.path + "/sig") == "USR1\n"; }, 5000ms));
    ::kill(runner.pid(), SIGTERM);
    EXPECT_EQ(runner.wait(), 5) << "CMD's own status: " << runner.err();
    EXPECT_EQ(slurp(d.path + "/sig"), "USR1\nTERM\n");
    EXPECT_EQ(owner_of(mutex), "");
    // A signal while still waiting: simba run stops waiting, 128+N.
    ASSERT_EQ(run({"acquire", "-m", mutex, "-c", "holder", "--ttl", "30s"}).rc, 0);
    Proc waiter({"run", "-m", mutex, "-v", "--", "true"});
    ASSERT_TRUE(eventually([&] { return waiter.err().find("waiting for mutex") != std::string::npos; }, 5000ms));
    ::kill(waiter.pid(), SIGINT);
    EXPECT_EQ(waiter.wait(), 128 + SIGINT);
}

// ---------------------------------------------- run: CMD inside the lease
// CMD and everything it started must be gone before the server's lease end
// (transition_at), whatever happens to simba run. Judged by /proc and the
// row's transition_at on the server's clock (the same machine's clock).

TEST(CliRunLease, StoppedRunnerCannotKeepItsCommandPastTheLease) {
    TempDir d;
    auto c = admin();  // the extension exists before simba run looks
    const auto mutex = unique_name("cli-stopped");
    FamilyWatch watch(d.path);
    Proc runner({"run", "--mutex", mutex, "--contender", "stopped", "--ttl", "1s", "--transition", "500ms",
                 "--metrics-file", d.path + "/m.prom", "--", "sh", "-c", kFamily + "while :; do sleep 0.05; done"},
                {"D=" + d.path});
    const std::vector<pid_t> family = {pid_in(d.path + "/cmd"), pid_in(d.path + "/bg"), pid_in(d.path + "/daemon")};
    for (pid_t p : family) ASSERT_GT(p, 0) << runner.err();
    for (pid_t p : family) ASSERT_TRUE(alive(p));
    // Frozen simba run: no renewal, and it cannot signal anything either.
    ASSERT_EQ(::kill(runner.pid(), SIGSTOP), 0);
    auto gone = watch.gone_at(10000ms);
    ASSERT_TRUE(gone) << "CMD's processes outlived a stopped simba run";
    for (pid_t p : family) EXPECT_TRUE(eventually([&] { return !alive(p); }, 2000ms)) << "pid " << p << " per /proc";
    auto end = lease_end(*c, mutex);
    ASSERT_TRUE(end);
    EXPECT_LT(*gone, *end) << "gone " << ms_between(*end, *gone) << " ms after the lease end";
    std::printf("stopped runner: CMD's processes gone %lld ms before the lease end\n", ms_between(*gone, *end));
    // Another contender takes over; the woken simba run finds the lease lost.
    ASSERT_EQ(run({"acquire", "--mutex", mutex, "--contender", "thief", "--ttl", "30s"}).rc, 0);
    ASSERT_EQ(::kill(runner.pid(), SIGCONT), 0);
    EXPECT_EQ(runner.wait(), 76) << runner.err();
    std::printf("%s", runner.err().c_str());
    EXPECT_NE(runner.err().find("sent SIGTERM"), std::string::npos) << runner.err();
    EXPECT_NE(runner.err().find("killed (SIGKILL)"), std::string::npos) << "the daemon ignores SIGTERM: " << runner.err();
    EXPECT_EQ(owner_of(mutex), "thief") << "the late release must not disturb the new holder";
    auto r = prom_check::check(slurp(d.path + "/m.prom"));
    ASSERT_TRUE(r.ok()) << r.error_text();
    std::map<std::string, std::string> l = {{"mutex", mutex}, {"contender", "stopped"}};
    // Lost at the deadline, or (if simba run's release got there first) a late release.
    EXPECT_GE(r.value("simba_client_lost_total", l) + r.value("simba_client_late_releases_total", l), 1);
    EXPECT_EQ(r.value("simba_client_released_total", l), 0);
    EXPECT_EQ(r.value("simba_client_is_owner", l), 0);
}

TEST(CliRunLease, FailingRenewalsTerminateThenKillBeforeTheLeaseEnds) {
    TempDir d;
    auto root = admin();
    ScratchDatabase db(*root, "cli-outage");
    auto c = admin(db.conninfo());  // stays connected through the outage: reads the row
    const auto mutex = unique_name("cli-outage");
    // CMD and its background child ignore SIGTERM (CMD notes when it came).
    FamilyWatch watch(d.path);
    Proc runner({"run", "--dsn", db.conninfo(), "--mutex", mutex, "--ttl", "2s", "--transition", "1s", "--grace",
                 "500ms", "--", "sh", "-c",
                 "trap '' TERM; " + kFamily + "trap 'date +%s.%N >> \"$D/term\"' TERM; while :; do sleep 0.05; done"},
                {"D=" + d.path});
    const std::vector<pid_t> family = {pid_in(d.path + "/cmd"), pid_in(d.path + "/bg"), pid_in(d.path + "/daemon")};
    for (pid_t p : family) ASSERT_GT(p, 0) << runner.err();
    // The outage: logins refused, simba run's connections cut.
    db.refuse_connections();
    {
        pqxx::nontransaction tx(*c);
        tx.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                 " WHERE datname = current_database() AND pid <> pg_backend_pid()");
    }
    auto gone = watch.gone_at(10000ms);
    ASSERT_TRUE(gone) << runner.err();
    for (pid_t p : family) EXPECT_TRUE(eventually([&] { return !alive(p); }, 2000ms)) << "pid " << p << " per /proc";
    auto end = lease_end(*c, mutex);
    ASSERT_TRUE(end);
    EXPECT_LT(*gone, *end) << "gone " << ms_between(*end, *gone) << " ms after the lease end";
    // SIGTERM came --grace before the SIGKILL (which comes 301 ms before the end).
    const auto term = slurp(d.path + "/term");
    ASSERT_FALSE(term.empty()) << "no SIGTERM before the SIGKILL: " << runner.err();
    const WallClock::time_point term_at(duration_cast<WallClock::duration>(std::chrono::duration<double>(std::stod(term))));
    EXPECT_LT(term_at, *gone);
    EXPECT_LE(term_at, *end - 300ms) << "SIGTERM must leave CMD --grace before the lease ends";
    std::printf("failing renewals: SIGTERM seen %lld ms, processes gone %lld ms before the lease end\n",
                ms_between(term_at, *end), ms_between(*gone, *end));
    EXPECT_EQ(runner.wait(), 76) << runner.err();
    std::printf("%s", runner.err().c_str());
    EXPECT_NE(runner.err().find("renewals of mutex " + mutex + " are failing: the lease ends in "), std::string::npos)
        << "on_suspended is logged: " << runner.err();
    EXPECT_NE(runner.err().find("renewals of " + mutex + " are failing: sent SIGTERM"), std::string::npos) << runner.err();
    EXPECT_NE(runner.err().find("killed (SIGKILL)"), std::string::npos) << runner.err();
}

// The usual CMD exits by the SIGTERM that failing renewals bring: simba run
// still reports the lost lock (76), not CMD's status (143), although CMD
// was gone before the lease ended. Found by the Patroni suite (test/ha).
TEST(CliRunLease, ACommandEndedByTheSigtermOfFailingRenewalsExits76) {
    TempDir d;
    auto root = admin();
    ScratchDatabase db(*root, "cli-outage-term");
    auto c = admin(db.conninfo());
    const auto mutex = unique_name("cli-outage-term");
    Proc runner({"run", "-v", "--dsn", db.conninfo(), "--mutex", mutex, "--ttl", "2s", "--transition", "1s",
                 "--grace", "590ms", "--", "sh", "-c", "echo $$ > \"$D/cmd\"; exec sleep 600"},
                {"D=" + d.path});
    const pid_t cmd = pid_in(d.path + "/cmd");
    ASSERT_GT(cmd, 0) << runner.err();
    db.refuse_connections();
    {
        pqxx::nontransaction tx(*c);
        tx.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()");
    }
    EXPECT_EQ(runner.wait(), 76) << runner.err();
    EXPECT_FALSE(alive(cmd));
    EXPECT_NE(runner.err().find("are failing: sent SIGTERM"), std::string::npos) << runner.err();
    EXPECT_EQ(runner.err().find("killed (SIGKILL)"), std::string::npos) << "CMD obeyed the SIGTERM: " << runner.err();
}

TEST(CliRunLease, ARenewalAfterTheSigtermCallsOffTheSigkill) {
    TempDir d;
    auto c = admin();
    const auto mutex = unique_name("cli-recovered");
    Proc runner({"run", "--mutex", mutex, "--ttl", "2s", "--transition", "1s", "--grace", "500ms", "--", "sh", "-c",
                 "trap 'echo TERM >> \"$D/term\"' TERM; trap 'exit 0' USR1; echo $$ > \"$D/cmd\"; "
                 "while :; do sleep 0.05; done"},
                {"D=" + d.path});
    const pid_t cmd = pid_in(d.path + "/cmd");
    ASSERT_GT(cmd, 0) << runner.err();
    // Stopped until renewals have failed long enough for the SIGTERM ...
    ASSERT_EQ(::kill(runner.pid(), SIGSTOP), 0);
    ASSERT_TRUE(eventually([&] { return !slurp(d.path + "/term").empty(); }, 10000ms)) << "no SIGTERM";
    auto transition_at = [&] {
        pqxx::nontransaction tx(*c);
        auto r = tx.exec_params1("SELECT extract(epoch FROM transition_at)::float8 FROM simba_mutex_status WHERE mutex = $1", mutex);
        return WallClock::time_point(duration_cast<WallClock::duration>(std::chrono::duration<double>(r[0].as<double>())));
    };
    const auto old_end = transition_at();  // the SIGKILL was due 301 ms before it
    ASSERT_EQ(::kill(runner.pid(), SIGCONT), 0);
    // ... then it renews within the grace: past the old lease end CMD still runs.
    ASSERT_TRUE(eventually([&] { return transition_at() > old_end && WallClock::now() > old_end; }, 10000ms))
        << runner.err();
    EXPECT_TRUE(alive(cmd)) << "SIGKILLed although the lease was renewed: " << runner.err();
    EXPECT_EQ(runner.wait(0ms), -1);
    ASSERT_EQ(::kill(runner.pid(), SIGUSR1), 0);  // forwarded: CMD exits 0
    EXPECT_EQ(runner.wait(), 0) << runner.err();
    EXPECT_EQ(slurp(d.path + "/term"), "TERM\n");
    EXPECT_NE(runner.err().find("sent SIGTERM"), std::string::npos) << runner.err();
    EXPECT_EQ(runner.err().find("killed (SIGKILL)"), std::string::npos) << runner.err();
    EXPECT_EQ(owner_of(mutex), "");
}

TEST(CliRunLease, BackgroundProcessesKeepTheLockUntilTheyExit) {
    TempDir d;
    auto c = admin();  // the extension exists before simba run looks
    const auto mutex = unique_name("cli-background");
    Proc runner({"run", "--mutex", mutex, "--contender", "bg-holder", "--ttl", "1s", "--transition", "500ms", "--",
                 "sh", "-c", kFamily + "exit 0"},
                {"D=" + d.path});
    const pid_t cmd = pid_in(d.path + "/cmd"), bg = pid_in(d.path + "/bg"), daemon = pid_in(d.path + "/daemon");
    ASSERT_GT(cmd, 0);
    ASSERT_GT(bg, 0);
    ASSERT_GT(daemon, 0);
    ASSERT_TRUE(eventually([&] { return !alive(cmd); }, 10000ms));
    const auto cmd_exited = WallClock::now();
    // Held, and renewed past the lease CMD's own tenure proved, while they run.
    bool held = true;
    ASSERT_TRUE(eventually([&] {
        pqxx::nontransaction tx(*c);
        auto r = tx.exec_params1("SELECT coalesce(owner_id, ''), extract(epoch FROM transition_at)::float8"
                                 " FROM simba_mutex_status WHERE mutex = $1",
                                 mutex);
        if (runner.wait(0ms) != -1 || r[0].as<std::string>() != "bg-holder" || !alive(bg) || !alive(daemon)) {
            held = false;
            return true;
        }
        const WallClock::time_point transition_at(
            duration_cast<WallClock::duration>(std::chrono::duration<double>(r[1].as<double>())));
        return transition_at > cmd_exited + 1500ms;
    }, 10000ms));
    EXPECT_TRUE(held) << "released, or its processes killed, while CMD's processes ran: " << runner.err();
    // One left: still held.
    ASSERT_EQ(::kill(bg, SIGKILL), 0);
    ASSERT_TRUE(eventually([&] { return !exists("/proc/" + std::to_string(bg)); }, 5000ms)) << "reaped by the watchdog";
    EXPECT_EQ(runner.wait(0ms), -1);
    EXPECT_EQ(owner_of(mutex), "bg-holder");
    // The last one exits: released, CMD's status.
    ASSERT_EQ(::kill(daemon, SIGKILL), 0);
    EXPECT_EQ(runner.wait(), 0) << runner.err();
    EXPECT_EQ(owner_of(mutex), "");
    EXPECT_NE(runner.err().find("left 2 process(es) running: holding " + mutex), std::string::npos) << runner.err();
}

TEST(CliRunLease, KilledRunnerTakesTheCommandsProcessesWithIt) {
    TempDir d;
    auto c = admin();  // the extension exists before simba run looks
    const auto mutex = unique_name("cli-killed");
    FamilyWatch watch(d.path);
    Proc runner({"run", "--mutex", mutex, "--ttl", "1s", "--transition", "500ms", "--", "sh", "-c",
                 kFamily + "while :; do sleep 0.05; done"},
                {"D=" + d.path});
    std::vector<pid_t> family = {pid_in(d.path + "/cmd"), pid_in(d.path + "/bg"), pid_in(d.path + "/daemon")};
    for (pid_t p : family) ASSERT_GT(p, 0) << runner.err();
    const pid_t watchdog = watchdog_of(runner.pid());
    ASSERT_GT(watchdog, 0);
    family.push_back(watchdog);  // which exits once it has killed them
    ASSERT_EQ(::kill(runner.pid(), SIGKILL), 0);
    const auto killed = WallClock::now();
    EXPECT_EQ(runner.wait(), 128 + SIGKILL);
    auto gone = watch.gone_at(10000ms);
    ASSERT_TRUE(gone);
    for (pid_t p : family) EXPECT_TRUE(eventually([&] { return !alive(p); }, 2000ms)) << "pid " << p << " per /proc";
    auto end = lease_end(*c, mutex);
    ASSERT_TRUE(end);
    EXPECT_LT(*gone, *end) << "gone " << ms_between(*end, *gone) << " ms after the lease end";
    std::printf("killed runner: processes gone %lld ms after the SIGKILL, %lld ms before the lease end\n",
                ms_between(killed, *gone), ms_between(*gone, *end));
}

TEST(CliRunLease, KilledWatchdogTakesTheCommandsProcessesWithIt) {
    TempDir d;
    auto c = admin();
    const auto mutex = unique_name("cli-watchdog");
    FamilyWatch watch(d.path);
    Proc runner({"run", "--mutex", mutex, "--contender", "guarded", "--ttl", "2s", "--transition", "1s", "--", "sh",
                 "-c", kFamily + "while :; do sleep 0.05; done"},
                {"D=" + d.path});
    const std::vector<pid_t> family = {pid_in(d.path + "/cmd"), pid_in(d.path + "/bg"), pid_in(d.path + "/daemon")};
    for (pid_t p : family) ASSERT_GT(p, 0) << runner.err();
    const pid_t watchdog = watchdog_of(runner.pid());
    ASSERT_GT(watchdog, 0);
    // CMD dies with it (PR_SET_PDEATHSIG); simba run, a subreaper too, kills what is left.
    ASSERT_EQ(::kill(watchdog, SIGKILL), 0);
    ASSERT_TRUE(watch.gone_at(10000ms)) << runner.err();
    for (pid_t p : family) EXPECT_TRUE(eventually([&] { return !alive(p); }, 2000ms)) << "pid " << p << " per /proc";
    EXPECT_EQ(runner.wait(), 70) << runner.err();
    EXPECT_NE(runner.err().find("the watchdog (pid " + std::to_string(watchdog) + ") died (Killed)"), std::string::npos)
        << runner.err();
    EXPECT_EQ(owner_of(mutex), "") << "released once nothing of CMD's is left";
}

// ------------------------------------------------------------- options

TEST(CliUsage, OptionFormsTyposAndCommandWords) {
    const auto mutex = unique_name("cli-usage");
    // Typos in options and commands are usage errors that name the word.
    auto typo = run({"status", "--jsn"});
    EXPECT_EQ(typo.rc, 64);
    EXPECT_NE(typo.err.find("--jsn"), std::string::npos) << typo.err;
    EXPECT_EQ(run({"owner", "-m", mutex, "extra"}).rc, 64);
    EXPECT_EQ(run({"stauts"}).rc, 64);
    EXPECT_EQ(run({"status", "--", "x"}).rc, 64) << "only run takes a command";
    // --name=value, a repeated option (the last counts), --dsn before the command.
    ASSERT_EQ(run({"acquire", "--mutex=" + mutex, "-c", "someone", "-c", "usage", "--ttl=30s"}).rc, 0);
    auto o = run({"owner", "-m", "cli-usage-unused", "--mutex", mutex});
    EXPECT_EQ(o.rc, 0);
    EXPECT_EQ(o.out, "usage\n");
    EXPECT_EQ(run({"--dsn", "host=/nonexistent-simba-dir", "owner", "-m", mutex}).rc, 69);
    EXPECT_EQ(run({"release", "-m", mutex, "-c", "usage"}).rc, 0);
    // --version: the release, from extension/simba.control through CMake.
    auto v = run({"--version"});
    EXPECT_EQ(v.rc, 0);
    EXPECT_EQ(v.out, "simba " SIMBA_VERSION "\n");
    // CMD's words are CMD's, options of simba run's and `--` included, with or without a `--` first.
    auto w1 = run({"run", "-m", mutex, "sh", "-c", "echo \"$*\"", "sh", "-v", "--dsn", "--", "-m"});
    EXPECT_EQ(w1.rc, 0) << w1.err;
    EXPECT_EQ(w1.out, "-v --dsn -- -m\n");
    auto w2 = run({"run", "-m", mutex, "--", "sh", "-c", "echo \"$*\"", "sh", "--", "-c"});
    EXPECT_EQ(w2.rc, 0) << w2.err;
    EXPECT_EQ(w2.out, "-- -c\n");
}

// ---------------------------------------------------- one-shot and status

TEST(CliOneShot, AcquireOwnerReleaseAndForce) {
    const auto mutex = unique_name("cli-oneshot");
    auto a = run({"acquire", "-m", mutex, "-c", "a", "--ttl", "30s"});
    ASSERT_EQ(a.rc, 0) << a.err;
    const long long fence = std::stoll(a.out);
    EXPECT_GT(fence, 0);
    EXPECT_EQ(run({"acquire", "-m", mutex, "-c", "b"}).rc, 75);
    auto o = run({"owner", "-m", mutex});
    EXPECT_EQ(o.rc, 0);
    EXPECT_EQ(o.out, "a\n");
    auto rb = run({"release", "-m", mutex, "-c", "b"});
    EXPECT_EQ(rb.rc, 1);
    EXPECT_NE(rb.err.find("held by a"), std::string::npos) << rb.err;
    // The default contender id: $SIMBA_CONTENDER.
    EXPECT_EQ(run({"release", "-m", mutex}, {"SIMBA_CONTENDER=a"}).rc, 0);
    EXPECT_EQ(run({"owner", "-m", mutex}).rc, 1);
    // --force: an application role lacks the privilege (77, with the GRANT to run) ...
    auto a2 = run({"acquire", "-m", mutex, "-c", "a", "--ttl", "30s"});
    ASSERT_EQ(a2.rc, 0) << a2.err;
    const long long second_fence = std::stoll(a2.out);
    EXPECT_GT(second_fence, fence);
    {
        auto c = admin();
        pqxx::nontransaction tx(*c);
        tx.exec0("DO $$ BEGIN CREATE ROLE regress_simba_cli_app LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$");
        tx.exec("SELECT simba_grant('regress_simba_cli_app')");
    }
    auto denied = run({"release", "--force", "-m", mutex, "--dsn", "user=regress_simba_cli_app"});
    EXPECT_EQ(denied.rc, 77) << denied.err;
    EXPECT_NE(denied.err.find("GRANT EXECUTE ON FUNCTION simba_force_release"), std::string::npos) << denied.err;
    EXPECT_EQ(owner_of(mutex), "a");
    // ... the superuser has it: the owner is cleared and the next holder gets the next fence.
    EXPECT_EQ(run({"release", "--force", "-m", mutex}).rc, 0);
    EXPECT_EQ(run({"release", "--force", "-m", mutex}).rc, 1) << "already free";
    auto b = run({"acquire", "-m", mutex, "-c", "b"});
    ASSERT_EQ(b.rc, 0);
    EXPECT_GT(std::stoll(b.out), second_fence) << "a new holder gets a greater fence";
    EXPECT_EQ(run({"release", "-m", mutex, "-c", "b"}).rc, 0);
}

// A server that does not answer (here: a long transaction locks the row
// simba_acquire must update) no longer holds a command for good: it gives up
// at answer_deadline (10 s) with exit 69, and says why.
TEST(CliOneShot, NoAnswerWithinTheDeadlineExits69) {
    const auto mutex = unique_name("cli-noanswer");
    ASSERT_EQ(run({"acquire", "-m", mutex, "-c", "a"}).rc, 0);
    ASSERT_EQ(run({"release", "-m", mutex, "-c", "a"}).rc, 0);  // free: simba_acquire must update the row
    auto c = admin();
    pqxx::work locker(*c);
    locker.exec_params("SELECT 1 FROM simba_mutex WHERE mutex = $1 FOR UPDATE", mutex);
    auto r = run({"acquire", "-m", mutex, "-c", "b"});
    locker.abort();
    EXPECT_EQ(r.rc, 69) << r.err;
    EXPECT_NE(r.err.find("no answer from the server within 10"), std::string::npos) << r.err;
    EXPECT_GE(r.elapsed, milliseconds(10000));
    EXPECT_LT(r.elapsed, milliseconds(15000)) << "the deadline, plus a shared machine's slack";
}

TEST(CliStatus, JsonParsesAndWatchRedraws) {
    const auto mutex = unique_name("cli-json \"quoted\"\\");
    ASSERT_EQ(run({"acquire", "-m", mutex, "-c", "json-holder", "--ttl", "30s"}).rc, 0);
    const auto key = unique_name("cli-json-sem");
    {
        auto c = admin();
        pqxx::nontransaction tx(*c);
        tx.exec_params("SELECT simba_semaphore_acquire($1, 'sem-holder', 3, '30s', 'ctx \"q\"\n2')", key);
    }
    auto s = run({"status", "--json"});
    ASSERT_EQ(s.rc, 0) << s.err;
    const nlohmann::json v = nlohmann::json::parse(s.out);  // strict: throws on malformed JSON
    bool found = false;
    for (auto& m : v.at("mutexes")) {
        if (m.at("mutex").get<std::string>() != mutex) continue;
        found = true;
        EXPECT_EQ(m.at("owner").get<std::string>(), "json-holder");
        EXPECT_EQ(m.at("state").get<std::string>(), "held");
        EXPECT_GT(m.at("fence").get<double>(), 0);
        EXPECT_GT(m.at("time_left_seconds").get<double>(), 20);
        EXPECT_LE(m.at("time_left_seconds").get<double>(), 36.5);
        EXPECT_TRUE(m.at("acquired_at").is_string());
    }
    EXPECT_TRUE(found) << s.out;
    found = false;
    for (auto& p : v.at("semaphores")) {
        if (p.at("key").get<std::string>() != key) continue;
        found = true;
        EXPECT_EQ(p.at("holder").get<std::string>(), "sem-holder");
        EXPECT_EQ(p.at("context").get<std::string>(), "ctx \"q\"\n2");
        EXPECT_EQ(p.at("permits").get<double>(), 3);
    }
    EXPECT_TRUE(found) << s.out;
    auto o = run({"owner", "-m", mutex, "--json"});
    EXPECT_EQ(o.rc, 0);
    EXPECT_EQ(nlohmann::json::parse(o.out).at("owner").get<std::string>(), "json-holder");
    auto a = run({"acquire", "-m", mutex, "-c", "other", "--json"});
    EXPECT_EQ(a.rc, 75);
    EXPECT_FALSE(nlohmann::json::parse(a.out).at("acquired").get<bool>());
    // The table view names the holder; --watch redraws until interrupted.
    auto t = run({"status", "--mutex", mutex});
    EXPECT_NE(t.out.find("json-holder"), std::string::npos) << t.out;
    Proc watch({"status", "--watch", "--interval", "100ms", "--mutex", mutex});
    auto redraws = [&] {
        auto out = watch.out();
        std::size_t n = 0;
        for (auto p = out.find("Every 100ms"); p != std::string::npos; p = out.find("Every 100ms", p + 1)) ++n;
        return n;
    };
    ASSERT_TRUE(eventually([&] { return redraws() >= 3; }, 5000ms)) << watch.out();
    ::kill(watch.pid(), SIGINT);
    EXPECT_EQ(watch.wait(), 0);
    EXPECT_EQ(run({"release", "-m", mutex, "-c", "json-holder"}).rc, 0);
}

// What status and top show by default: what is held, waited for or changed
// lately, not every name ever used (issue 39, item 3). A database of its
// own, so that the counts are this test's: 500 rows idle for two hours, and
// one of each thing that must show.
TEST(CliStatus, ShowsWhatIsLiveNotEveryIdleRow) {
    auto root = admin();
    ScratchDatabase db(*root, "simba_cli_status");
    const std::string dsn = db.conninfo();
    std::string session;
    {
        auto c = admin(dsn);
        pqxx::nontransaction tx(*c);
        tx.exec0("INSERT INTO simba_mutex (mutex, version, fence, released_at)"
                 " SELECT 'idle-' || i, 1, i, now() - interval '2 hours' FROM generate_series(1, 500) i");
        tx.exec("SELECT simba_acquire('job-held', 'worker-1', '1h', '1h')");
        tx.exec("SELECT simba_acquire('job-done', 'worker-2', '1h', '1h')");
        tx.exec("SELECT simba_release('job-done', 'worker-2')");
        tx.exec("SELECT simba_fair_acquire('fair-m', 'h', '1h', '1h')");
        tx.exec("SELECT simba_fair_acquire('fair-m', 'queued-w', '1h', '1h')");
        // a plain release hands nothing over: free, with a waiter queued
        tx.exec("SELECT simba_release('fair-m', 'h')");
        tx.exec("SELECT simba_rwlock_acquire('rw-read', 'reader-1', 'read', '1h', '1h')");
        tx.exec("SELECT simba_rwlock_acquire('rw-free', 'reader-2', 'read', '1h', '1h')");
        tx.exec("SELECT simba_rwlock_release('rw-free', 'reader-2')");
        tx.exec("SELECT simba_semaphore_acquire('sem-k', 'permit-holder', 2, '1h')");
        session = tx.exec1("SELECT session_id FROM simba_session_open('1h', '1h')")[0].as<std::string>();
        tx.exec_params("SELECT simba_acquire('sess-m', 'worker-3', session_id => $1)", session);
    }
    const auto has = [](const std::string& out, const std::string& what) {
        return out.find(what) != std::string::npos;
    };

    // By default: each live thing once, the idle rows counted in one line.
    auto s = run({"status", "--dsn", dsn});
    ASSERT_EQ(s.rc, 0) << s.err;
    for (const char* live : {"job-held", "worker-1", "job-done", "fair-m", "rw-read", "reader-1", "sem-k",
                             "permit-holder", "sess-m"})
        EXPECT_TRUE(has(s.out, live)) << live << " missing:\n" << s.out;
    EXPECT_TRUE(has(s.out, session)) << s.out;
    EXPECT_FALSE(has(s.out, "idle-")) << s.out;
    EXPECT_FALSE(has(s.out, "rw-free")) << s.out;
    EXPECT_TRUE(has(s.out, "(not shown: 500 idle mutexes, 1 free read-write locks; --all shows them)")) << s.out;
    EXPECT_LT(lines(s.out).size(), 25u) << s.out;
    // The fair waiter is counted on its mutex.
    for (auto& l : lines(s.out))
        if (l.rfind("fair-m ", 0) == 0) {
            EXPECT_EQ(l.back(), '1') << l;
        }

    // --all: every row; --pattern: by name (a glob), sessions left out.
    auto all = run({"status", "--all", "--dsn", dsn});
    ASSERT_EQ(all.rc, 0) << all.err;
    EXPECT_TRUE(has(all.out, "idle-500")) << all.out.substr(0, 2000);
    EXPECT_TRUE(has(all.out, "rw-free"));
    EXPECT_FALSE(has(all.out, "not shown"));
    EXPECT_GT(lines(all.out).size(), 500u);
    auto jobs = run({"status", "--pattern", "job-*", "--dsn", dsn});
    ASSERT_EQ(jobs.rc, 0) << jobs.err;
    EXPECT_TRUE(has(jobs.out, "job-held") && has(jobs.out, "job-done")) << jobs.out;
    EXPECT_FALSE(has(jobs.out, "fair-m") || has(jobs.out, "rw-read") || has(jobs.out, session)) << jobs.out;
    auto only_idle = run({"status", "--pattern", "idle-*", "--dsn", dsn});  // nothing to show, all counted
    ASSERT_EQ(only_idle.rc, 0) << only_idle.err;
    EXPECT_FALSE(has(only_idle.out, "idle-")) << only_idle.out;
    EXPECT_TRUE(has(only_idle.out, "(not shown: 500 idle mutexes; --all shows them)")) << only_idle.out;
    auto tens = run({"status", "--all", "--pattern", "idle-1?", "--dsn", dsn});
    ASSERT_EQ(tens.rc, 0) << tens.err;
    std::size_t idle_rows = 0;
    for (auto& l : lines(tens.out)) idle_rows += l.rfind("idle-1", 0) == 0;
    EXPECT_EQ(idle_rows, 10u) << tens.out;
    // --recent 0s: the mutex released a moment ago counts as idle too.
    auto now_only = run({"status", "--recent", "0s", "--dsn", dsn});
    ASSERT_EQ(now_only.rc, 0) << now_only.err;
    EXPECT_FALSE(has(now_only.out, "job-done")) << now_only.out;
    EXPECT_TRUE(has(now_only.out, "501 idle mutexes")) << now_only.out;

    // JSON: the same filter, every kind, and what was left out.
    auto j = run({"status", "--json", "--dsn", dsn});
    ASSERT_EQ(j.rc, 0) << j.err;
    const auto v = nlohmann::json::parse(j.out);
    std::vector<std::string> names;
    for (auto& m : v.at("mutexes")) names.push_back(m.at("mutex").get<std::string>());
    // held first, then free with a waiter, then lately freed
    EXPECT_EQ(names, (std::vector<std::string>{"job-held", "sess-m", "fair-m", "job-done"})) << j.out;
    for (auto& m : v.at("mutexes")) {
        if (m.at("mutex") == "fair-m") {
            EXPECT_EQ(m.at("waiting").get<int>(), 1);
        } else if (m.at("mutex") == "job-done") {
            EXPECT_TRUE(m.at("idle_since").is_string());
        } else if (m.at("mutex") == "job-held") {
            EXPECT_TRUE(m.at("idle_since").is_null());
        }
    }
    ASSERT_EQ(v.at("rwlocks").size(), 1u) << j.out;
    EXPECT_EQ(v.at("rwlocks")[0].at("holders"), nlohmann::json::array({"reader-1"}));
    ASSERT_EQ(v.at("sessions").size(), 1u) << j.out;
    EXPECT_EQ(v.at("sessions")[0].at("session_id").get<std::string>(), session);
    EXPECT_EQ(v.at("sessions")[0].at("mutexes").get<int>(), 1);
    EXPECT_EQ(v.at("not_shown").at("mutexes").get<int>(), 500);
    EXPECT_EQ(v.at("semaphores").size(), 1u);

    // top, once (stdout is not a terminal): the same things, short.
    auto t = run({"top", "--dsn", dsn});
    ASSERT_EQ(t.rc, 0) << t.err;
    for (const char* live : {"job-held", "job-done", "fair-m", "rw-read", "sem-k", "sess-m"})
        EXPECT_TRUE(has(t.out, live)) << live << " missing:\n" << t.out;
    EXPECT_TRUE(has(t.out, session)) << t.out;
    EXPECT_FALSE(has(t.out, "idle-")) << t.out;
    EXPECT_TRUE(has(t.out, "not shown: 500 idle mutexes")) << t.out;
    EXPECT_LT(lines(t.out).size(), 25u) << t.out;
    auto t_all = run({"top", "--all", "--pattern", "idle-*", "--dsn", dsn});
    ASSERT_EQ(t_all.rc, 0) << t_all.err;
    std::size_t top_idle = 0;
    for (auto& l : lines(t_all.out)) top_idle += l.rfind("idle-", 0) == 0;
    EXPECT_EQ(top_idle, 500u);

    // The DBA's gc takes the idle rows and nothing live.
    {
        auto c = admin(dsn);
        pqxx::nontransaction tx(*c);
        EXPECT_EQ(tx.exec1("SELECT simba_mutex_gc('1 hour')")[0].as<long long>(), 500);
    }
    auto after = run({"status", "--all", "--dsn", dsn});
    ASSERT_EQ(after.rc, 0) << after.err;
    EXPECT_FALSE(has(after.out, "idle-")) << after.out;
    EXPECT_TRUE(has(after.out, "job-held") && has(after.out, "fair-m") && has(after.out, "sess-m")) << after.out;

    // Bad options: usage errors.
    EXPECT_EQ(run({"status", "--pattern", "", "--dsn", dsn}).rc, 64);
    EXPECT_EQ(run({"status", "--recent", "soon", "--dsn", dsn}).rc, 64);
    EXPECT_EQ(run({"top", "--recent", "-1s", "--dsn", dsn}).rc, 64);
}

// ---------------------------------------------------------------- metrics

TEST(CliMetrics, ServerExpositionParsesAndCounts) {
    // A database of its own with simba.history on (the per-holder counters).
    const std::string db = "simba_cli_metrics_" + std::to_string(::getpid());
    {
        auto c = admin();
        pqxx::nontransaction tx(*c);
        tx.exec0("DROP DATABASE IF EXISTS " + db);
        tx.exec0("CREATE DATABASE " + db);
        tx.exec0("ALTER DATABASE " + db + " SET simba.history = on");
    }
    const std::string dsn = "dbname=" + db;
    {
        auto c = admin(dsn);
    }
    const std::string m = "metrics \"q\"";
    ASSERT_EQ(run({"acquire", "-m", m, "-c", "a", "--dsn", dsn}).rc, 0);
    ASSERT_EQ(run({"acquire", "-m", m, "-c", "b", "--dsn", dsn}).rc, 75);
    ASSERT_EQ(run({"release", "-m", m, "-c", "a", "--dsn", dsn}).rc, 0);
    ASSERT_EQ(run({"acquire", "-m", m, "-c", "b", "--ttl", "100ms", "--transition", "0", "--dsn", dsn}).rc, 0);
    ASSERT_TRUE(eventually([&] { return run({"owner", "-m", m, "--dsn", dsn}).rc == 1; }, 5000ms));
    auto late = run({"release", "-m", m, "-c", "b", "--dsn", dsn});
    EXPECT_EQ(late.rc, 1);
    EXPECT_NE(late.err.find("finished after the lease ended"), std::string::npos) << late.err;
    ASSERT_EQ(run({"acquire", "-m", m, "-c", "a", "--ttl", "30s", "--dsn", dsn}).rc, 0);
    {
        auto c = admin(dsn);
        pqxx::nontransaction tx(*c);
        tx.exec("SELECT simba_acquire('under a session', 's', session_id => (simba_session_open()).session_id)");
    }

    auto x = run({"metrics", "--dsn", dsn});
    ASSERT_EQ(x.rc, 0) << x.err;
    auto r = prom_check::check(x.out);
    ASSERT_TRUE(r.ok()) << r.error_text() << x.out;
    EXPECT_EQ(r.value("simba_history_enabled"), 1);
    EXPECT_EQ(r.value("simba_mutex_held", {{"mutex", m}}), 1);
    EXPECT_EQ(r.value("simba_mutex_fence", {{"mutex", m}}), 3);
    EXPECT_GT(r.value("simba_mutex_time_left_seconds", {{"mutex", m}}), 20);
    EXPECT_EQ(r.value("simba_mutex_owner_info", {{"mutex", m}, {"owner", "a"}}), 1);
    EXPECT_EQ(r.value("simba_mutex_acquisitions_total", {{"mutex", m}, {"holder", "a"}}), 2);
    EXPECT_EQ(r.value("simba_mutex_releases_total", {{"mutex", m}, {"holder", "a"}}), 1);
    EXPECT_EQ(r.value("simba_mutex_acquisitions_total", {{"mutex", m}, {"holder", "b"}}), 1);
    EXPECT_EQ(r.value("simba_mutex_late_releases_total", {{"mutex", m}, {"holder", "b"}}), 1);
    EXPECT_EQ(r.value("simba_mutex_releases_total", {{"mutex", m}, {"holder", "b"}}), 0);
    EXPECT_EQ(r.value("simba_mutex_forced_releases_total", {{"mutex", m}, {"holder", "a"}}), 0);
    EXPECT_GT(r.value("simba_mutex_last_event_timestamp_seconds", {{"mutex", m}, {"holder", "a"}}), 1.7e9);
    EXPECT_EQ(r.value("simba_session_count", {{"state", "held"}}), 1);
    EXPECT_EQ(r.value("simba_session_mutexes", {{"state", "held"}}), 1);
    EXPECT_EQ(r.value("simba_session_count", {{"state", "ended"}}), 0);  // every state, also when empty
    {
        auto c = admin();
        pqxx::nontransaction tx(*c);
        tx.exec0("DROP DATABASE " + db + " WITH (FORCE)");
    }
}

// --listen: a bad address is a usage error, a port in use exit 69 (the
// serving itself is test/ops/prometheus.py's, through Prometheus).
TEST(CliMetrics, ListenRefusesABadAddressAndAPortInUse) {
    for (const char* bad : {"9808", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:http"}) {
        auto r = run({"metrics", "--listen", bad});
        EXPECT_EQ(r.rc, 64) << bad << ": " << r.err;
        EXPECT_NE(r.err.find("--listen"), std::string::npos) << r.err;
    }
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(s, 1), 0);
    socklen_t len = sizeof a;
    ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
    auto r = run({"metrics", "--listen", "127.0.0.1:" + std::to_string(ntohs(a.sin_port))});
    ::close(s);
    EXPECT_EQ(r.rc, 69) << r.err;
    EXPECT_NE(r.err.find("could not listen on 127.0.0.1:"), std::string::npos) << r.err;
}

// The factory's own metrics (what simba run --metrics-file exports).
TEST(ClientMetrics, CountersGaugesAndHandoff) {
    simba::pg::ContendServiceFactory factory({}, test_options("metrics"));
    const auto mutex = unique_name("client-metrics");
    simba::ContendOptions opts;
    opts.ttl = 300ms;
    opts.transition = 200ms;
    auto a = std::make_shared<Recorder>(mutex, "a");
    auto b = std::make_shared<Recorder>(mutex, "b");
    auto sa = factory.create(a, opts);
    auto sb = factory.create(b, opts);
    sa->start();
    ASSERT_TRUE(a->wait([](auto& e) { return e.size() == 1; }, 5000ms));
    sb->start();
    // b finds it busy; a renews a few times.
    ASSERT_TRUE(eventually([&] {
        auto m = factory.metrics();
        auto* mb = m.find(mutex, "b");
        auto* ma = m.find(mutex, "a");
        return mb && mb->busy >= 1 && ma && ma->renewals >= 2;
    }, 5000ms));
    auto m1 = factory.metrics();
    const auto* ma = m1.find(mutex, "a");
    ASSERT_NE(ma, nullptr);
    EXPECT_TRUE(ma->is_owner);
    EXPECT_EQ(ma->fence, sa->state().after.fence);
    EXPECT_EQ(ma->acquired, 1u);
    EXPECT_EQ(ma->attempts, 1u) << "renewals are not acquisition attempts";
    EXPECT_EQ(ma->acquire_latency.count, 1u);
    EXPECT_EQ(ma->handoff_latency.count, 0u) << "the mutex was free: no handoff";
    EXPECT_FALSE(m1.find(mutex, "b")->is_owner);
    // a stops: released; b acquires through the NOTIFY: one handoff, quick.
    sa->stop();
    ASSERT_TRUE(b->wait([](auto& e) { return e.size() == 1 && e[0].acquired; }, 5000ms));
    auto m2 = factory.metrics();
    const auto* a2 = m2.find(mutex, "a");
    const auto* b2 = m2.find(mutex, "b");
    EXPECT_EQ(a2->released, 1u);
    EXPECT_EQ(a2->lost, 0u);
    EXPECT_FALSE(a2->is_owner);
    EXPECT_EQ(a2->fence, 0);
    EXPECT_EQ(b2->acquired, 1u);
    EXPECT_TRUE(b2->is_owner);
    EXPECT_GT(b2->fence, ma->fence);
    ASSERT_EQ(b2->handoff_latency.count, 1u);
    EXPECT_LT(b2->handoff_latency.sum_seconds, 0.25) << "a NOTIFY handoff, not a poll";
    EXPECT_GE(b2->attempts, b2->busy + 1);
    // A forced release: b's renewal finds the mutex free and takes a new tenure -> lost 1, acquired 2.
    {
        auto c = admin();
        pqxx::nontransaction tx(*c);
        ASSERT_TRUE(tx.exec_params1("SELECT simba_force_release($1)", mutex)[0].as<bool>());
    }
    ASSERT_TRUE(eventually([&] { return factory.metrics().find(mutex, "b")->acquired == 2; }, 5000ms));
    auto m3 = factory.metrics();
    EXPECT_EQ(m3.find(mutex, "b")->lost, 1u);
    EXPECT_TRUE(m3.find(mutex, "b")->is_owner);
    sb->stop();
    auto m4 = factory.metrics();
    EXPECT_EQ(m4.find(mutex, "b")->released, 1u);
    EXPECT_FALSE(m4.find(mutex, "b")->is_owner);
    auto text = simba::to_prometheus(m4, {{"instance", "test"}});
    auto r = prom_check::check(text);
    EXPECT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(r.value("simba_client_acquired_total", {{"mutex", mutex}, {"contender", "b"}}), 2);
}
