// simba client: metrics of the contend services of one factory.
//
//   simba::Metrics m = factory.metrics();          // a snapshot, cheap to take
//   std::cout << simba::to_prometheus(m, {{"job", "exporter"}});
//
// Counters are cumulative for the life of the factory, per (mutex, contender
// id), and survive stop()/start() of the services. When the last service of
// an id is destroyed, its counters move to the entry of contender "" of that
// mutex (departed contenders): per-mutex totals never go back, and a process
// that creates a Locker per job with a fresh id keeps one entry per mutex.
// The gauges describe the present. Histograms have fixed buckets
// (Histogram::bounds, in seconds).
// Thread-safety: Metrics, MutexMetrics and Histogram are plain values (a
// factory's metrics() snapshot may be taken from any thread); a
// PrometheusText is used by one thread at a time; the free functions may
// be called from any threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace simba {

/// A latency histogram with fixed bucket bounds (seconds).
struct Histogram {
    static constexpr std::size_t bucket_count = 14;
    /// Upper bounds of the buckets, seconds; an implicit +Inf bucket follows.
    static constexpr std::array<double, bucket_count> bounds = {
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    /// Observations per bucket, NOT cumulative: counts[i] fell in
    /// (bounds[i-1], bounds[i]]; counts[bucket_count] is above the last bound.
    std::array<std::uint64_t, bucket_count + 1> counts{};
    std::uint64_t count = 0;   ///< observations (= sum of counts)
    double sum_seconds = 0;    ///< sum of the observed values

    void observe(double seconds);
};

/// What one contender id of this process did on one mutex.
struct MutexMetrics {
    std::string mutex;
    std::string contender;
    // counters
    std::uint64_t attempts = 0;          ///< simba_acquire calls made while not the owner (failed calls included)
    std::uint64_t busy = 0;              ///< ... answered "someone else holds it"
    std::uint64_t acquired = 0;          ///< tenures begun (each with a new fence)
    std::uint64_t released = 0;          ///< releases (stop()) the server confirmed
    std::uint64_t late_releases = 0;     ///< releases that found the lease already ended: finished after the lease ended
    std::uint64_t renewals = 0;          ///< successful renewals by the owner
    std::uint64_t renewal_failures = 0;  ///< renewal calls that failed (error, timeout, connection lost)
    std::uint64_t suspensions = 0;       ///< held tenures whose renewals began failing (on_suspended)
    std::uint64_t lost = 0;              ///< tenures that ended other than by our release (expired, taken over)
    // gauges
    bool is_owner = false;               ///< a running service of this id proves ownership now
    std::int64_t fence = 0;              ///< fence of the current tenure (0 if not owner)
    // histograms
    Histogram acquire_latency;           ///< start of waiting (start() or a loss) -> acquired
    Histogram handoff_latency;           ///< previous tenure ended (release NOTIFY, or its lease end) -> acquired
};

/// A snapshot of a factory's metrics, sorted by (mutex, contender).
struct Metrics {
    std::vector<MutexMetrics> mutexes;
    /// Factory-wide: statements that carried simba_acquire calls (a batch of
    /// attempts counts once), and the calls they carried.
    std::uint64_t acquire_statements = 0;
    std::uint64_t acquire_calls = 0;
    /// Factory-wide: session statements (open, keepalive, close): with
    /// sessions, what renews every tenure, one keepalive per session per period.
    std::uint64_t session_statements = 0;
    /// Factory-wide: statements that carried simba_release calls (a stop of
    /// many services at once counts once: ContendServiceFactory::stop), and
    /// the calls they carried.
    std::uint64_t release_statements = 0;
    std::uint64_t release_calls = 0;
    /// The entry for (mutex, contender), or nullptr.
    [[nodiscard]] const MutexMetrics* find(const std::string& mutex, const std::string& contender) const;
    /// Entries of `mutex` summed over contender ids (gauges: any owner / the owner's fence).
    [[nodiscard]] MutexMetrics total(const std::string& mutex) const;
};

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

/// A Prometheus text exposition (format 0.0.4) written family by family:
/// what to_prometheus() writes with, for series of one's own (`simba
/// metrics` writes the server's with it). Label values are escaped; names
/// are the caller's to get right.
class PrometheusText {
public:
    /// The HELP and TYPE lines of a family ("counter", "gauge", "histogram");
    /// its samples follow.
    void family(const std::string& name, const std::string& type, const std::string& help);
    /// One sample: `name{labels} value`.
    void sample(const std::string& name, const MetricLabels& labels, double value);
    /// A `# ` comment line (newlines in `text` become spaces).
    void comment(const std::string& text);
    [[nodiscard]] const std::string& str() const { return out_; }

private:
    std::string out_;
};

/// Prometheus text exposition (format 0.0.4) of `metrics`: HELP and TYPE
/// lines, then `simba_client_<name>{<labels>,mutex="...",contender="..."}`.
/// `labels` (e.g. {"instance", "host-7"}) are added to every series; names
/// must match [a-zA-Z_][a-zA-Z0-9_]*, values are escaped.
[[nodiscard]] std::string to_prometheus(const Metrics& metrics, const MetricLabels& labels = {});

/// A label value escaped for the exposition format (\\, \", \n).
[[nodiscard]] std::string escape_label_value(const std::string& value);
/// A sample value as the exposition format writes it (+Inf, -Inf, NaN, shortest round-trip decimal).
[[nodiscard]] std::string format_sample_value(double value);

}  // namespace simba
