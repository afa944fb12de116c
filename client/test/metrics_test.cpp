// Unit tests of simba::Metrics, to_prometheus and the format checker the CLI
// tests use (prom_check.hpp): the checker must catch broken expositions, and
// the library's exposition must pass it.
#include <gtest/gtest.h>

#include "prom_check.hpp"
#include "simba/errors.hpp"
#include "simba/metrics.hpp"

namespace {

simba::Metrics sample_metrics() {
    simba::Metrics m;
    simba::MutexMetrics a;
    a.mutex = "orders \"eu\"\\west\nline";
    a.contender = "0:42@host-1";
    a.attempts = 7;
    a.busy = 5;
    a.acquired = 2;
    a.released = 1;
    a.late_releases = 1;
    a.renewals = 30;
    a.renewal_failures = 3;
    a.suspensions = 2;
    a.lost = 1;
    a.is_owner = true;
    a.fence = 12;
    a.acquire_latency.observe(0.0005);
    a.acquire_latency.observe(0.3);
    a.acquire_latency.observe(100);
    a.handoff_latency.observe(0.002);
    simba::MutexMetrics b;
    b.mutex = "reports";
    b.contender = "w2";
    m.mutexes = {a, b};
    return m;
}

TEST(Metrics, HistogramBuckets) {
    simba::Histogram h;
    h.observe(0.001);   // le 0.001 (upper bound inclusive)
    h.observe(0.0011);  // le 0.005
    h.observe(61);      // +Inf
    h.observe(-1);      // clamped to 0
    EXPECT_EQ(h.count, 4u);
    EXPECT_EQ(h.counts[0], 2u);
    EXPECT_EQ(h.counts[1], 1u);
    EXPECT_EQ(h.counts[simba::Histogram::bucket_count], 1u);
    EXPECT_NEAR(h.sum_seconds, 61.0021, 1e-9);
}

TEST(Metrics, ExpositionPassesTheChecker) {
    auto text = simba::to_prometheus(sample_metrics(), {{"instance", "db \"1\""}});
    auto r = prom_check::check(text);
    ASSERT_TRUE(r.ok()) << r.error_text() << text;
    const std::map<std::string, std::string> a = {{"mutex", "orders \"eu\"\\west\nline"}, {"contender", "0:42@host-1"}};
    EXPECT_EQ(r.value("simba_client_attempts_total", a), 7);
    EXPECT_EQ(r.value("simba_client_busy_total", a), 5);
    EXPECT_EQ(r.value("simba_client_acquired_total", a), 2);
    EXPECT_EQ(r.value("simba_client_released_total", a), 1);
    EXPECT_EQ(r.value("simba_client_late_releases_total", a), 1);
    EXPECT_EQ(r.value("simba_client_renewals_total", a), 30);
    EXPECT_EQ(r.value("simba_client_renewal_failures_total", a), 3);
    EXPECT_EQ(r.value("simba_client_suspensions_total", a), 2);
    EXPECT_EQ(r.value("simba_client_lost_total", a), 1);
    EXPECT_EQ(r.value("simba_client_is_owner", a), 1);
    EXPECT_EQ(r.value("simba_client_fence", a), 12);
    EXPECT_EQ(r.value("simba_client_is_owner", {{"mutex", "reports"}}), 0);
    EXPECT_EQ(r.value("simba_client_attempts_total", {{"instance", "db \"1\""}, {"mutex", "reports"}}), 0);
    auto le = [&](const char* bound) {
        auto l = a;
        l["le"] = bound;
        return r.value("simba_client_acquire_latency_seconds_bucket", l);
    };
    EXPECT_EQ(le("0.001"), 1);
    EXPECT_EQ(le("0.25"), 1);
    EXPECT_EQ(le("0.5"), 2);
    EXPECT_EQ(le("60"), 2);
    EXPECT_EQ(le("+Inf"), 3);
    EXPECT_EQ(r.value("simba_client_acquire_latency_seconds_count", a), 3);
    EXPECT_NEAR(r.value("simba_client_acquire_latency_seconds_sum", a), 100.3005, 1e-9);
    EXPECT_EQ(r.types["simba_client_handoff_latency_seconds"], "histogram");
    // The escapes, literally.
    EXPECT_NE(text.find("mutex=\"orders \\\"eu\\\"\\\\west\\nline\""), std::string::npos);
}

TEST(Metrics, EmptySnapshotIsValid) {
    auto r = prom_check::check(simba::to_prometheus({}));
    EXPECT_TRUE(r.ok()) << r.error_text();
    // Only the five factory-wide counters, at zero.
    EXPECT_EQ(r.samples.size(), 5u);
    EXPECT_EQ(r.value("simba_client_acquire_statements_total", {}), 0);
    EXPECT_EQ(r.value("simba_client_acquire_calls_total", {}), 0);
    EXPECT_EQ(r.value("simba_client_session_statements_total", {}), 0);
    EXPECT_EQ(r.value("simba_client_release_statements_total", {}), 0);
    EXPECT_EQ(r.value("simba_client_release_calls_total", {}), 0);
    EXPECT_EQ(r.types.size(), 18u);
}

TEST(Metrics, BadLabelNamesRejected) {
    EXPECT_THROW((void)simba::to_prometheus({}, {{"bad-name", "x"}}), simba::InvalidArgumentError);
    EXPECT_THROW((void)simba::to_prometheus({}, {{"mutex", "x"}}), simba::InvalidArgumentError);
    EXPECT_THROW((void)simba::to_prometheus({}, {{"__reserved", "x"}}), simba::InvalidArgumentError);
}

TEST(Metrics, SampleValues) {
    EXPECT_EQ(simba::format_sample_value(0.1), "0.1");
    EXPECT_EQ(simba::format_sample_value(12), "12");
    EXPECT_EQ(simba::format_sample_value(1.0 / 0.0), "+Inf");
    EXPECT_EQ(std::strtod(simba::format_sample_value(1.0 / 3).c_str(), nullptr), 1.0 / 3);
}

TEST(Metrics, TotalsAcrossContenders) {
    auto m = sample_metrics();
    auto b = m.mutexes[0];
    b.contender = "other";
    b.is_owner = false;
    m.mutexes.push_back(b);
    auto t = m.total(m.mutexes[0].mutex);
    EXPECT_EQ(t.attempts, 14u);
    EXPECT_TRUE(t.is_owner);
    EXPECT_EQ(t.fence, 12);
    EXPECT_EQ(t.acquire_latency.count, 6u);
    ASSERT_NE(m.find("reports", "w2"), nullptr);
    EXPECT_EQ(m.find("reports", "nobody"), nullptr);
}

// The writer to_prometheus uses, for series of one's own (simba metrics).
TEST(Metrics, PrometheusTextWritesFamiliesSamplesAndComments) {
    simba::PrometheusText x;
    x.family("demo_held", "gauge", "1 while held.");
    x.sample("demo_held", {{"mutex", "a \"b\"\\c\nd"}, {"owner", "w1"}}, 1);
    x.sample("demo_held", {{"mutex", "e"}, {"owner", "w2"}}, 0);
    x.comment("two\nlines");
    x.family("demo_enabled", "gauge", "No labels.");
    x.sample("demo_enabled", {}, 1);
    EXPECT_EQ(x.str(),
              "# HELP demo_held 1 while held.\n# TYPE demo_held gauge\n"
              "demo_held{mutex=\"a \\\"b\\\"\\\\c\\nd\",owner=\"w1\"} 1\n"
              "demo_held{mutex=\"e\",owner=\"w2\"} 0\n"
              "# two lines\n"
              "# HELP demo_enabled No labels.\n# TYPE demo_enabled gauge\ndemo_enabled 1\n");
    auto r = prom_check::check(x.str());
    ASSERT_TRUE(r.ok()) << r.error_text() << x.str();
    EXPECT_EQ(r.value("demo_held", {{"mutex", "a \"b\"\\c\nd"}, {"owner", "w1"}}), 1);
    EXPECT_EQ(r.value("demo_enabled", {}), 1);
}

// The checker itself: each broken exposition must be caught.
TEST(PromCheck, CatchesBrokenExpositions) {
    const char* bad[] = {
        "x_total 1\n",                                                      // no TYPE
        "# TYPE x_total counter\nx_total{a=\"1\"} 1\nx_total{a=\"1\"} 2\n", // duplicate series
        "# TYPE x counter\nx 1\n",                                          // counter without _total
        "# TYPE x_total counter\nx_total{a=\"1} 1\n",                       // unterminated label value
        "# TYPE x_total counter\nx_total{a=\"\\t\"} 1\n",                   // bad escape
        "# TYPE x_total counter\nx_total{1a=\"v\"} 1\n",                    // bad label name
        "# TYPE x_total counter\nx_total abc\n",                            // bad value
        "# TYPE x_total counter\nx_total -1\n",                             // negative counter
        "# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{l=\"2\"} 1\n",         // not contiguous
        "# TYPE a gauge\n# TYPE a gauge\na 1\n",                            // second TYPE
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",  // not cumulative
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",  // count != +Inf
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",                           // no +Inf
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",           // no _sum
        "# TYPE a gauge\na 1",                                              // no final newline
    };
    for (const char* t : bad) EXPECT_FALSE(prom_check::check(t).ok()) << t;
    auto good = prom_check::check(
        "# HELP a A thing.\n# TYPE a gauge\na{l=\"x\\\"y\"} 1.5 1700000000000\n# plain comment\n"
        "# TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n");
    EXPECT_TRUE(good.ok()) << good.error_text();
    EXPECT_EQ(good.value("a", {{"l", "x\"y"}}), 1.5);
}

}  // namespace
