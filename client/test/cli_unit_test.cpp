// Unit tests of the CLI's pure parts (simba_cli_core, no server): --help
// and `simba metrics`' text from rows.
#include <gtest/gtest.h>

#include "cli.hpp"
#include "metrics_text.hpp"
#include "prom_check.hpp"

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

}  // namespace
