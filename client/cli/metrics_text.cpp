#include "metrics_text.hpp"

#include "simba/metrics.hpp"

namespace simba::cli {

namespace {

/// A family whose samples are one number of each row, `value` of Row.
template <class Row>
struct Family {
    const char* name;
    const char* type;
    const char* help;
    double Row::*value;
};

/// The families in order, each with one sample per row labelled by `labels`.
template <class Row, std::size_t N, class Labels>
void write_families(PrometheusText& x, const Family<Row> (&families)[N], const std::vector<Row>& rows, Labels labels) {
    for (const auto& f : families) {
        x.family(f.name, f.type, f.help);
        for (const auto& r : rows) x.sample(f.name, labels(r), r.*f.value);
    }
}

void write_mutexes(PrometheusText& x, const std::vector<ServerRows::Mutex>& rows) {
    using M = ServerRows::Mutex;
    auto by_mutex = [](const M& r) { return MetricLabels{{"mutex", r.mutex}}; };
    x.family("simba_mutex_held", "gauge", "1 while the mutex has an owner whose lease has not ended (held or transition).");
    for (const auto& r : rows)
        x.sample("simba_mutex_held", by_mutex(r), (r.state == "held" || r.state == "transition") ? 1 : 0);
    x.family("simba_mutex_in_transition", "gauge", "1 while the owner's ttl has passed but its transition has not.");
    for (const auto& r : rows) x.sample("simba_mutex_in_transition", by_mutex(r), r.state == "transition" ? 1 : 0);
    const Family<M> numbers[] = {
        {"simba_mutex_time_left_seconds", "gauge", "Seconds until others may take the mutex (0 when free).", &M::time_left},
        {"simba_mutex_fence", "gauge", "Fence of the latest tenure of the mutex.", &M::fence},
        {"simba_mutex_version", "gauge", "Change counter of the mutex row (acquisitions, renewals, releases).", &M::version},
    };
    write_families(x, numbers, rows, by_mutex);
    x.family("simba_mutex_owner_info", "gauge", "1 for the current owner of each held mutex (owner as a label).");
    for (const auto& r : rows)
        if (r.owner && r.state != "free") x.sample("simba_mutex_owner_info", {{"mutex", r.mutex}, {"owner", *r.owner}}, 1);
}

void write_semaphores_sessions_rwlocks(PrometheusText& x, const ServerRows& rows) {
    using S = ServerRows::Semaphore;
    const Family<S> sems[] = {
        {"simba_semaphore_permits_held", "gauge", "Live permits of the semaphore key.", &S::permits_held},
        {"simba_semaphore_permits_limit", "gauge", "The permits limit of the latest acquire of the key.", &S::permits_limit},
        {"simba_semaphore_fence", "gauge", "Highest fence among the live permits of the key.", &S::fence},
    };
    write_families(x, sems, rows.semaphores, [](const S& r) { return MetricLabels{{"key", r.key}}; });

    using Se = ServerRows::Session;
    if (!rows.sessions_error.empty()) x.comment("simba_session_status unavailable: " + rows.sessions_error);
    const Family<Se> sessions[] = {
        {"simba_session_count", "gauge",
         "Sessions by state: held, transition (its keepalive is late), ended (not yet collected).", &Se::count},
        {"simba_session_mutexes", "gauge", "Mutexes held under the sessions of each state.", &Se::mutexes},
        {"simba_session_permits", "gauge", "Semaphore permits held under the sessions of each state.", &Se::permits},
        {"simba_session_rwlocks", "gauge", "Read-write lock holds under the sessions of each state.", &Se::rwlocks},
    };
    write_families(x, sessions, rows.sessions, [](const Se& r) { return MetricLabels{{"state", r.state}}; });

    using R = ServerRows::Rwlock;
    if (!rows.rwlocks_error.empty()) x.comment("simba_rwlock_status unavailable: " + rows.rwlocks_error);
    const Family<R> rwlocks[] = {
        {"simba_rwlock_readers", "gauge", "Live read holds of the read-write lock.", &R::readers},
        {"simba_rwlock_write_held", "gauge", "1 while a writer holds the read-write lock.", &R::write_held},
        {"simba_rwlock_waiting_writers", "gauge", "Writers queued for the read-write lock (new readers wait).",
         &R::waiting_writers},
        {"simba_rwlock_write_fence", "gauge", "Fence of the latest writer: the write epoch readers read under.",
         &R::write_fence},
    };
    write_families(x, rwlocks, rows.rwlocks, [](const R& r) { return MetricLabels{{"rwlock", r.rwlock}}; });
}

void write_history(PrometheusText& x, const ServerRows& rows) {
    x.family("simba_history_enabled", "gauge",
             "1 when simba.history is on for this database (the *_total per-holder counters need it).");
    x.sample("simba_history_enabled", {}, rows.history ? 1 : 0);
    if (!rows.stats_error.empty()) x.comment("simba_mutex_stats unavailable: " + rows.stats_error);
    using H = ServerRows::Stats;
    const Family<H> stats[] = {
        {"simba_mutex_acquisitions_total", "counter", "Tenures begun by the holder (from simba_mutex_history).",
         &H::acquisitions},
        {"simba_mutex_releases_total", "counter", "Releases by the holder.", &H::releases},
        {"simba_mutex_late_releases_total", "counter",
         "Releases by the holder that found its lease already ended (finished after the lease ended).",
         &H::late_releases},
        {"simba_mutex_expired_total", "counter", "Tenures of the holder that ended by expiry (lease lost).", &H::expired},
        {"simba_mutex_forced_releases_total", "counter", "Tenures of the holder ended by simba_force_release.",
         &H::forced_releases},
        {"simba_mutex_last_event_timestamp_seconds", "gauge", "Unix time of the holder's latest history event.",
         &H::last_event},
    };
    write_families(x, stats, rows.stats, [](const H& r) { return MetricLabels{{"mutex", r.mutex}, {"holder", r.holder}}; });
}

}  // namespace

std::string server_metrics_text(const ServerRows& rows) {
    PrometheusText x;
    write_mutexes(x, rows.mutexes);
    write_semaphores_sessions_rwlocks(x, rows);
    write_history(x, rows);
    return x.str();
}

}  // namespace simba::cli
