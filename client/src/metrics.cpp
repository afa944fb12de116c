// simba client: Metrics snapshot helpers and the Prometheus text exposition.
#include "simba/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "simba/errors.hpp"

namespace simba {

void Histogram::observe(double seconds) {
    if (!(seconds >= 0)) seconds = 0;
    std::size_t i = 0;
    while (i < bucket_count && seconds > bounds[i]) ++i;
    ++counts[i];
    ++count;
    sum_seconds += seconds;
}

const MutexMetrics* Metrics::find(const std::string& mutex, const std::string& contender) const {
    for (auto& m : mutexes)
        if (m.mutex == mutex && m.contender == contender) return &m;
    return nullptr;
}

namespace {
void add(Histogram& to, const Histogram& h) {
    for (std::size_t i = 0; i < to.counts.size(); ++i) to.counts[i] += h.counts[i];
    to.count += h.count;
    to.sum_seconds += h.sum_seconds;
}
}  // namespace

MutexMetrics Metrics::total(const std::string& mutex) const {
    MutexMetrics t;
    t.mutex = mutex;
    for (auto& m : mutexes) {
        if (m.mutex != mutex) continue;
        t.attempts += m.attempts;
        t.busy += m.busy;
        t.acquired += m.acquired;
        t.released += m.released;
        t.late_releases += m.late_releases;
        t.renewals += m.renewals;
        t.renewal_failures += m.renewal_failures;
        t.suspensions += m.suspensions;
        t.lost += m.lost;
        if (m.is_owner) {
            t.is_owner = true;
            t.fence = m.fence;
            t.contender = m.contender;
        }
        add(t.acquire_latency, m.acquire_latency);
        add(t.handoff_latency, m.handoff_latency);
    }
    return t;
}

std::string escape_label_value(const std::string& value) {
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

std::string format_sample_value(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char buf[64];
    for (int precision = 1; precision <= 17; ++precision) {  // shortest form that reads back exactly
        std::snprintf(buf, sizeof buf, "%.*g", precision, v);
        const bool exponent = std::strchr(buf, 'e') != nullptr;
        const double a = std::fabs(v);
        if (std::strtod(buf, nullptr) == v && (!exponent || a < 1e-4 || a >= 1e15)) break;
    }
    return buf;
}

void PrometheusText::family(const std::string& name, const std::string& type, const std::string& help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void PrometheusText::sample(const std::string& name, const MetricLabels& labels, double value) {
    out_ += name;
    if (!labels.empty()) {
        char sep = '{';
        for (auto& [k, v] : labels) {
            out_ += sep;
            out_ += k + "=\"" + escape_label_value(v) + "\"";
            sep = ',';
        }
        out_ += '}';
    }
    out_ += ' ' + format_sample_value(value) + '\n';
}

void PrometheusText::comment(const std::string& text) {
    std::string line = text;
    std::replace(line.begin(), line.end(), '\n', ' ');
    out_ += "# " + line + "\n";
}

namespace {

bool valid_label_name(const std::string& n) {
    if (n.empty() || n.compare(0, 2, "__") == 0) return false;
    for (std::size_t i = 0; i < n.size(); ++i) {
        char c = n[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}

struct Writer {
    PrometheusText text;
    MetricLabels base;  // the caller's labels, on every series

    MetricLabels labels(const MutexMetrics& m, const std::string* le = nullptr) const {
        MetricLabels l = base;
        l.emplace_back("mutex", m.mutex);
        l.emplace_back("contender", m.contender);
        if (le) l.emplace_back("le", *le);
        return l;
    }
    void family(const Metrics& ms, const char* name, const char* type, const char* help,
                const std::function<double(const MutexMetrics&)>& value) {
        text.family(name, type, help);
        for (auto& m : ms.mutexes) text.sample(name, labels(m), value(m));
    }
    void scalar(const char* name, const char* type, const char* help, double value) {
        text.family(name, type, help);
        text.sample(name, base, value);
    }
    void histogram(const Metrics& ms, const std::string& name, const char* help,
                   const std::function<const Histogram&(const MutexMetrics&)>& pick) {
        text.family(name, "histogram", help);
        for (auto& m : ms.mutexes) {
            const Histogram& h = pick(m);
            std::uint64_t cumulative = 0;
            for (std::size_t i = 0; i <= Histogram::bucket_count; ++i) {
                cumulative += h.counts[i];
                const std::string le = i < Histogram::bucket_count ? format_sample_value(Histogram::bounds[i]) : "+Inf";
                text.sample(name + "_bucket", labels(m, &le), static_cast<double>(cumulative));
            }
            text.sample(name + "_sum", labels(m), h.sum_seconds);
            text.sample(name + "_count", labels(m), static_cast<double>(cumulative));
        }
    }
};

double n(std::uint64_t v) { return static_cast<double>(v); }

}  // namespace

std::string to_prometheus(const Metrics& metrics, const MetricLabels& labels) {
    Writer w;
    for (auto& [k, v] : labels)
        if (!valid_label_name(k) || k == "mutex" || k == "contender" || k == "le")
            throw InvalidArgumentError("invalid metric label name \"" + k + "\"", "22023");
    w.base = labels;
    w.scalar("simba_client_acquire_statements_total", "counter",
             "Statements that carried simba_acquire calls (a batch of attempts counts once).",
             n(metrics.acquire_statements));
    w.scalar("simba_client_acquire_calls_total", "counter", "simba_acquire calls sent (renewals included).",
             n(metrics.acquire_calls));
    w.scalar("simba_client_session_statements_total", "counter",
             "Session statements sent (open, keepalive, close): one keepalive renews every tenure under a session.",
             n(metrics.session_statements));
    w.scalar("simba_client_release_statements_total", "counter",
             "Statements that carried simba_release calls (stopping many services at once counts once).",
             n(metrics.release_statements));
    w.scalar("simba_client_release_calls_total", "counter", "simba_release calls sent (give-backs included).",
             n(metrics.release_calls));
    w.family(metrics, "simba_client_attempts_total", "counter",
             "simba_acquire calls made while not the owner (failed calls included).",
             [](const MutexMetrics& m) { return n(m.attempts); });
    w.family(metrics, "simba_client_busy_total", "counter",
             "Acquisition attempts answered with another owner holding the mutex.",
             [](const MutexMetrics& m) { return n(m.busy); });
    w.family(metrics, "simba_client_acquired_total", "counter", "Tenures begun (each with a new fence).",
             [](const MutexMetrics& m) { return n(m.acquired); });
    w.family(metrics, "simba_client_released_total", "counter", "Releases the server confirmed.",
             [](const MutexMetrics& m) { return n(m.released); });
    w.family(metrics, "simba_client_late_releases_total", "counter",
             "Releases that found the lease already ended (finished after the lease ended).",
             [](const MutexMetrics& m) { return n(m.late_releases); });
    w.family(metrics, "simba_client_renewals_total", "counter", "Successful lease renewals by the owner.",
             [](const MutexMetrics& m) { return n(m.renewals); });
    w.family(metrics, "simba_client_renewal_failures_total", "counter",
             "Renewal calls that failed (error, statement timeout, connection lost).",
             [](const MutexMetrics& m) { return n(m.renewal_failures); });
    w.family(metrics, "simba_client_suspensions_total", "counter",
             "Held tenures whose renewals began failing (on_suspended), whether they resumed or ended.",
             [](const MutexMetrics& m) { return n(m.suspensions); });
    w.family(metrics, "simba_client_lost_total", "counter",
             "Tenures that ended other than by a release of ours (lease deadline passed, taken over).",
             [](const MutexMetrics& m) { return n(m.lost); });
    w.family(metrics, "simba_client_is_owner", "gauge", "1 while this contender proves ownership of the mutex.",
             [](const MutexMetrics& m) { return m.is_owner ? 1.0 : 0.0; });
    w.family(metrics, "simba_client_fence", "gauge", "Fence of the current tenure, 0 when not the owner.",
             [](const MutexMetrics& m) { return static_cast<double>(m.fence); });
    w.histogram(metrics, "simba_client_acquire_latency_seconds",
                "Time from starting to wait (start or a loss) to acquiring the mutex.",
                [](const MutexMetrics& m) -> const Histogram& { return m.acquire_latency; });
    w.histogram(metrics, "simba_client_handoff_latency_seconds",
                "Time from the end of the previous tenure (release NOTIFY, or its lease end) to acquiring.",
                [](const MutexMetrics& m) -> const Histogram& { return m.handoff_latency; });
    return w.text.str();
}

}  // namespace simba
