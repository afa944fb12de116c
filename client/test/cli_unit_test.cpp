// Unit tests of the CLI's pure parts (simba_cli_core, no server): --help,
// `simba metrics`' text from rows, simba run's options and margins, what it
// reports from the watchdog's page, and the watchdog's decisions.
#include <gtest/gtest.h>

#include "cli.hpp"
#include "metrics_text.hpp"
#include "prom_check.hpp"
#include "run_plan.hpp"
#include "simba/contend_period.hpp"
#include "simba/errors.hpp"

namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------- help

TEST(Help, EachCommandHasItsOwnTextAndAnythingElseTheOverview) {
    for (const char* command : {"run", "status", "acquire", "release", "owner", "metrics", "top"}) {
        const std::string text = simba::cli::help_for(command);
        EXPECT_EQ(text.rfind(std::string("usage: simba ") + command + " ", 0), 0u) << text;
    }
    const std::string overview = simba::cli::help_for("");
    EXPECT_EQ(overview.rfind("usage: simba COMMAND [options]\n", 0), 0u) << overview;
    EXPECT_EQ(std::string(simba::cli::help_for("nope")), overview);
    EXPECT_NE(overview.find("  top       a live view"), std::string::npos);
}

// ---------------------------------------------------------------- metrics text

simba::cli::ServerRows sample_rows() {
    simba::cli::ServerRows rows;
    rows.mutexes = {{"a", std::string("w1"), "held", 4.5, 7, 30},
                    {"b", std::string("w2"), "transition", 0.5, 3, 12},
                    {"c", std::string("w3"), "free", 0, 9, 40},
                    {"d", std::nullopt, "free", 0, 0, 1}};
    rows.semaphores = {{"pool", 2, 5, 11}};
    rows.sessions = {{"ended", 0, 0, 0, 0}, {"held", 3, 2, 1, 4}, {"transition", 1, 0, 0, 0}};
    rows.rwlocks = {{"cfg", 2, 0, 1, 6}};
    rows.stats = {{"a", "w1", 5, 4, 1, 2, 1, 1700000000}};
    rows.history = true;
    return rows;
}

TEST(ServerMetricsText, OneSampleOfEachRowPerFamily) {
    const auto r = prom_check::check(simba::cli::server_metrics_text(sample_rows()));
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(r.value("simba_mutex_held", {{"mutex", "a"}}), 1);
    EXPECT_EQ(r.value("simba_mutex_held", {{"mutex", "b"}}), 1);  // transition: still held
    EXPECT_EQ(r.value("simba_mutex_held", {{"mutex", "c"}}), 0);
    EXPECT_EQ(r.value("simba_mutex_in_transition", {{"mutex", "a"}}), 0);
    EXPECT_EQ(r.value("simba_mutex_in_transition", {{"mutex", "b"}}), 1);
    EXPECT_EQ(r.value("simba_mutex_time_left_seconds", {{"mutex", "a"}}), 4.5);
    EXPECT_EQ(r.value("simba_mutex_fence", {{"mutex", "c"}}), 9);
    EXPECT_EQ(r.value("simba_mutex_version", {{"mutex", "d"}}), 1);
    EXPECT_EQ(r.value("simba_semaphore_permits_held", {{"key", "pool"}}), 2);
    EXPECT_EQ(r.value("simba_semaphore_permits_limit", {{"key", "pool"}}), 5);
    EXPECT_EQ(r.value("simba_semaphore_fence", {{"key", "pool"}}), 11);
    EXPECT_EQ(r.value("simba_session_count", {{"state", "held"}}), 3);
    EXPECT_EQ(r.value("simba_session_rwlocks", {{"state", "held"}}), 4);
    EXPECT_EQ(r.value("simba_rwlock_readers", {{"rwlock", "cfg"}}), 2);
    EXPECT_EQ(r.value("simba_rwlock_waiting_writers", {{"rwlock", "cfg"}}), 1);
    EXPECT_EQ(r.value("simba_rwlock_write_fence", {{"rwlock", "cfg"}}), 6);
    EXPECT_EQ(r.value("simba_history_enabled"), 1);
    EXPECT_EQ(r.value("simba_mutex_late_releases_total", {{"mutex", "a"}, {"holder", "w1"}}), 1);
    EXPECT_EQ(r.value("simba_mutex_last_event_timestamp_seconds", {{"holder", "w1"}}), 1700000000);
    EXPECT_EQ(r.types.at("simba_mutex_acquisitions_total"), "counter");
}

TEST(ServerMetricsText, ExactLinesOfAMutex) {
    simba::cli::ServerRows rows;
    rows.mutexes = {{"a \"x\"", std::string("w1"), "transition", 0.25, 7, 30}};
    const std::string text = simba::cli::server_metrics_text(rows);
    const std::string want =
        "# HELP simba_mutex_held 1 while the mutex has an owner whose lease has not ended (held or transition).\n"
        "# TYPE simba_mutex_held gauge\n"
        "simba_mutex_held{mutex=\"a \\\"x\\\"\"} 1\n"
        "# HELP simba_mutex_in_transition 1 while the owner's ttl has passed but its transition has not.\n"
        "# TYPE simba_mutex_in_transition gauge\n"
        "simba_mutex_in_transition{mutex=\"a \\\"x\\\"\"} 1\n"
        "# HELP simba_mutex_time_left_seconds Seconds until others may take the mutex (0 when free).\n"
        "# TYPE simba_mutex_time_left_seconds gauge\n"
        "simba_mutex_time_left_seconds{mutex=\"a \\\"x\\\"\"} 0.25\n";
    EXPECT_EQ(text.substr(0, want.size()), want);
    EXPECT_NE(text.find("simba_mutex_owner_info{mutex=\"a \\\"x\\\"\",owner=\"w1\"} 1\n"), std::string::npos);
}

TEST(ServerMetricsText, OwnerInfoOnlyForHeldMutexes) {
    const auto r = prom_check::check(simba::cli::server_metrics_text(sample_rows()));
    int owners = 0;
    for (const auto& s : r.samples)
        if (s.name == "simba_mutex_owner_info") ++owners;
    EXPECT_EQ(owners, 2);  // c is free though its row keeps w3; d has no owner
    EXPECT_EQ(r.value("simba_mutex_owner_info", {{"mutex", "b"}, {"owner", "w2"}}), 1);
}

TEST(ServerMetricsText, FamiliesInTheirOrderAndUnreadViewsSaid) {
    simba::cli::ServerRows rows;  // nothing held, no history, no session or rwlock view
    rows.sessions_error = "permission denied for view simba_session_status";
    rows.rwlocks_error = "relation \"simba_rwlock_status\" does not exist";
    const std::string text = simba::cli::server_metrics_text(rows);
    EXPECT_TRUE(prom_check::check(text).ok()) << prom_check::check(text).error_text();
    const std::string order[] = {"# TYPE simba_mutex_held gauge",
                                 "# TYPE simba_mutex_owner_info gauge",
                                 "# TYPE simba_semaphore_fence gauge",
                                 "# simba_session_status unavailable: permission denied for view simba_session_status",
                                 "# TYPE simba_session_count gauge",
                                 "# simba_rwlock_status unavailable: relation \"simba_rwlock_status\" does not exist",
                                 "# TYPE simba_rwlock_readers gauge",
                                 "simba_history_enabled 0\n",
                                 "# TYPE simba_mutex_acquisitions_total counter"};
    std::size_t at = 0;
    for (const auto& line : order) {
        const auto found = text.find(line, at);
        ASSERT_NE(found, std::string::npos) << line << "\nin:\n" << text;
        at = found;
    }
    EXPECT_EQ(text.find("simba_mutex_stats unavailable"), std::string::npos);
    rows.stats_error = "permission denied for view simba_mutex_stats";
    const std::string with_stats = simba::cli::server_metrics_text(rows);
    const auto said = with_stats.find("# simba_mutex_stats unavailable: permission denied for view simba_mutex_stats\n");
    ASSERT_NE(said, std::string::npos) << with_stats;
    EXPECT_LT(with_stats.find("simba_history_enabled 0\n"), said);
    EXPECT_LT(said, with_stats.find("# TYPE simba_mutex_acquisitions_total counter"));
}

// ---------------------------------------------------------------- run options

using simba::cli::Args;
using simba::cli::KillReason;
using simba::cli::parse_run_options;
using simba::cli::UsageError;

Args run_args() {
    Args a;
    a.mutex = "nightly";
    a.contender = "me";
    a.cmd = {"true"};
    return a;
}

// The UsageError's text, or "" when none was thrown.
std::string usage_error(const Args& a) {
    try {
        (void)parse_run_options(a);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "";
}

TEST(RunOptions, Defaults) {
    const auto o = parse_run_options(run_args());
    EXPECT_EQ(o.mutex, "nightly");
    EXPECT_EQ(o.contender, "me");
    EXPECT_EQ(o.lease.ttl, 10s);
    EXPECT_EQ(o.lease.transition, 6s);
    EXPECT_FALSE(o.wait.has_value());  // forever
    EXPECT_EQ(o.metrics_interval, 5s);
    EXPECT_EQ(o.metrics_file, "");
    EXPECT_EQ(o.margin, 508ms);         // 500 ms (a tenth of 16 s is more) + 500 ppm of 16 s
    EXPECT_EQ(o.grace, 2s);             // a third of the 6 s renewal window
    EXPECT_EQ(o.check_every, 100ms);    // a twentieth of the window, at most 100 ms
    EXPECT_EQ(o.cmd, std::vector<std::string>{"true"});
}

TEST(RunOptions, ParsesWhatIsGiven) {
    Args a = run_args();
    a.ttl = "2s";
    a.transition = "0";
    a.wait = "1.5s";
    a.metrics_interval = "250ms";
    a.metrics_file = "/tmp/m.prom";
    a.verbose = true;
    const auto o = parse_run_options(a);
    EXPECT_EQ(o.lease.ttl, 2s);
    EXPECT_EQ(o.lease.transition, 0s);
    EXPECT_EQ(o.wait, std::optional<std::chrono::microseconds>(1500ms));
    EXPECT_EQ(o.metrics_interval, 250ms);
    EXPECT_EQ(o.metrics_file, "/tmp/m.prom");
    EXPECT_TRUE(o.verbose);
    EXPECT_EQ(o.margin, 201ms);                            // a tenth of 2 s + 1 ms of drift
    EXPECT_EQ(o.grace, std::chrono::microseconds(166666));  // a third of ttl / 4 (no transition)
    EXPECT_EQ(o.check_every, 25ms);
    a.wait = "forever";
    EXPECT_FALSE(parse_run_options(a).wait.has_value());
    a.wait = "0";
    EXPECT_EQ(parse_run_options(a).wait, std::optional<std::chrono::microseconds>(0s));
}

TEST(RunOptions, UsageErrorsSayWhatIsWrong) {
    Args a = run_args();
    a.mutex.reset();
    EXPECT_EQ(usage_error(a), "simba run: --mutex NAME is required");
    a = run_args();
    a.cmd.clear();
    EXPECT_EQ(usage_error(a), "simba run: no command given: simba run --mutex NAME -- CMD [ARGS...]");
    a = run_args();
    a.ttl = "ten";
    EXPECT_EQ(usage_error(a), "invalid --ttl \"ten\": use a duration like 10s, 500ms, 1.5s, 2m");
    a = run_args();
    a.metrics_interval = "0s";
    EXPECT_EQ(usage_error(a), "--metrics-interval must be greater than 0");
    a = run_args();
    a.mutex = "";
    EXPECT_THROW((void)parse_run_options(a), simba::InvalidArgumentError);
}

TEST(RunOptions, GraceMustFitBetweenTheFirstRenewalAndTheKill) {
    Args a = run_args();
    a.grace = "4.8s";  // at most 6 s - 508 ms - 600 ms = 4.892 s
    EXPECT_EQ(parse_run_options(a).grace, 4800ms);
    a.grace = "4.9s";
    EXPECT_EQ(usage_error(a),
              "--grace 4.9s does not fit in the lease: CMD gets SIGTERM --grace before the watchdog's SIGKILL, which "
              "comes 508ms before the lease ends, and renewals start 6.0s before it (--transition, or a quarter of "
              "ttl + transition if more); with a tenth of that left for renewing, --grace can be at most 4.9s: lower "
              "--grace or raise --transition");
}

// ---------------------------------------------------------------- margins

TEST(RunMargins, KillMarginIsTheLibrarysRuleWithHalfASecond) {
    using std::chrono::microseconds;
    EXPECT_EQ(simba::cli::kill_margin(16s, 500), 508ms);                  // 500 ms + 500 ppm of 16 s
    EXPECT_EQ(simba::cli::kill_margin(300s, 500), 650ms);                 // 500 ms + 150 ms of drift room
    EXPECT_EQ(simba::cli::kill_margin(1s, 500), microseconds(100500));    // a tenth of 1 s + 500 µs
    EXPECT_EQ(simba::cli::kill_margin(100ms, 0), 10ms);                   // the fixed part is capped at a tenth
    EXPECT_EQ(simba::cli::kill_margin(7777s, 500), 500ms + microseconds(3888500));
}

TEST(RunMargins, RenewalWindowIsWhenTheLibraryFirstRenews) {
    const std::pair<std::chrono::seconds, std::chrono::seconds> cases[] = {{10s, 6s}, {10s, 0s}, {30s, 1s}, {1s, 5s}};
    for (auto [ttl, transition] : cases) {
        simba::ContendOptions c;
        c.ttl = ttl;
        c.transition = transition;
        simba::MutexOwner owner;
        owner.owner_id = "me";
        owner.acquired_at = owner.current_at = simba::ServerTime(1000000);
        owner.ttl_at = owner.acquired_at + ttl;
        owner.transition_at = owner.ttl_at + transition;
        const auto now = simba::SteadyClock::now();
        owner.anchor = now;
        const auto renew_at = now + simba::ContendPeriod::owner_delay(owner, now);
        EXPECT_EQ(owner.transition_deadline() - renew_at, simba::cli::renewal_window(c))
            << ttl.count() << " s + " << transition.count() << " s";
    }
}

TEST(RunExit, CodeOfAWaitStatus) {
    EXPECT_EQ(simba::cli::exit_code_of(3 << 8), 3);    // exited 3
    EXPECT_EQ(simba::cli::exit_code_of(SIGKILL), 137);  // killed
    EXPECT_EQ(simba::cli::exit_code_of(0x7f), simba::cli::software);  // stopped: neither
}

// ---------------------------------------------------------------- watchdog news

struct NewsTest : ::testing::Test {
    simba::cli::RunOptions o = parse_run_options(run_args());
    simba::cli::WatchdogPage page;
    simba::cli::WatchdogNews news{o, 42};
    NewsTest() { page.cmd_pid.store(100); }
};

TEST_F(NewsTest, NothingBeforeTheWatchdogActs) { EXPECT_EQ(news.read(page), ""); }

TEST_F(NewsTest, SigtermOncePerSending) {
    page.term_sent_ns.store(5);
    page.term_left_ns.store(2500000000);
    const std::string said =
        "simba run: renewals of nightly are failing: sent SIGTERM to true's processes 2.5s before the lease ends "
        "(--grace 2.0s before the SIGKILL)\n";
    EXPECT_EQ(news.read(page), said);
    EXPECT_EQ(news.read(page), "");
    page.term_sent_ns.store(9);  // a second SIGTERM after a renewal came in between
    EXPECT_EQ(news.read(page), said);
}

TEST_F(NewsTest, KillSaysWhy) {
    page.kill_sent_ns.store(7);
    page.kill_left_ns.store(508000000);
    page.kill_reason.store(static_cast<int>(KillReason::deadline));
    EXPECT_EQ(news.read(page),
              "simba run: no renewal of nightly (fence 42) came in time: killed (SIGKILL) true's processes 508ms "
              "before the lease ends\n");
    page.kill_sent_ns.store(8);
    page.kill_reason.store(static_cast<int>(KillReason::lost));
    EXPECT_EQ(news.read(page), "simba run: killed (SIGKILL) true's processes\n");
    page.kill_sent_ns.store(9);
    page.kill_reason.store(static_cast<int>(KillReason::orphaned));  // no one left to read it
    EXPECT_EQ(news.read(page), "");
}

TEST_F(NewsTest, LingeringProcessesOnceAndNotAfterAKill) {
    page.cmd_exited.store(1);
    page.cmd_status.store(3 << 8);
    EXPECT_EQ(news.read(page), "");  // nothing left behind: nothing to say
    page.lingering.store(2);
    EXPECT_EQ(news.read(page),
              "simba run: true exited (status 3) and left 2 process(es) running: holding nightly until they exit\n");
    EXPECT_EQ(news.read(page), "");
}

TEST_F(NewsTest, NothingWhenCmdCouldNotStart) {
    page.cmd_pid.store(-12);  // -ENOMEM: run.cpp reports the fork failure
    page.term_sent_ns.store(5);
    EXPECT_EQ(news.read(page), "");
}

// ---------------------------------------------------------------- keeper

using simba::cli::KeeperStep;

constexpr std::chrono::nanoseconds margin = 500ms, grace = 2s;
constexpr std::int64_t end = 100'000'000'000;  // the proven lease end
constexpr std::int64_t kill_at = end - 500'000'000, term_at = kill_at - 2'000'000'000;

KeeperStep step_at(std::int64_t now, bool killing = false, bool orphaned = false, bool lease_gone = false) {
    return simba::cli::keeper_step({now, end, killing, orphaned, lease_gone}, margin, grace);
}

TEST(KeeperStep, WaitsUntilTheSigtermIsDue) {
    const auto s = step_at(term_at - 1);
    EXPECT_EQ(s.action, KeeperStep::wait);
    EXPECT_EQ(s.begins, KillReason::none);
    EXPECT_EQ(s.wake, term_at);
}

TEST(KeeperStep, SigtermFromGraceBeforeTheKill) {
    for (auto now : {term_at, kill_at - 1}) {
        const auto s = step_at(now);
        EXPECT_EQ(s.action, KeeperStep::term);
        EXPECT_EQ(s.begins, KillReason::none);
        EXPECT_EQ(s.wake, kill_at);
    }
}

TEST(KeeperStep, KillsAtTheMarginBeforeTheEnd) {
    const auto s = step_at(kill_at);
    EXPECT_EQ(s.action, KeeperStep::kill);
    EXPECT_EQ(s.begins, KillReason::deadline);
    EXPECT_EQ(s.wake, kill_at + 5'000'000);  // sweeps again for reparented children
}

TEST(KeeperStep, KillsAtOnceWhenOrphanedOrTheLeaseIsGone) {
    EXPECT_EQ(step_at(0, false, true).begins, KillReason::orphaned);
    EXPECT_EQ(step_at(0, false, false, true).begins, KillReason::lost);
    EXPECT_EQ(step_at(0, false, true, true).begins, KillReason::orphaned);  // orphaned says more
    EXPECT_EQ(step_at(0, false, false, true).action, KeeperStep::kill);
}

TEST(KeeperStep, AKillNeverStopsAndIsNotBegunTwice) {
    const auto s = step_at(0, true);  // a renewal moved the end far ahead meanwhile
    EXPECT_EQ(s.action, KeeperStep::kill);
    EXPECT_EQ(s.begins, KillReason::none);
}

}  // namespace
