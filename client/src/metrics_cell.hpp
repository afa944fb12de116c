// simba client (internal): the live counters behind simba::Metrics. One cell
// per (mutex, contender id) of a factory (MetricCells), shared by the
// services of that id (folded into contender "" when the last is destroyed);
// updated with relaxed atomics from the I/O and handle threads, read by
// ContendServiceFactory::metrics() without stopping them.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "simba/metrics.hpp"
#include "thread_annotations.hpp"

namespace simba::detail {

struct AtomicHistogram {
    std::array<std::atomic<std::uint64_t>, Histogram::bucket_count + 1> counts{};
    std::atomic<std::uint64_t> sum_us{0};

    void observe(std::chrono::microseconds d) {
        if (d.count() < 0) d = std::chrono::microseconds(0);
        const double s = static_cast<double>(d.count()) / 1e6;
        std::size_t i = 0;
        while (i < Histogram::bucket_count && s > Histogram::bounds[i]) ++i;
        counts[i].fetch_add(1, std::memory_order_relaxed);
        sum_us.fetch_add(static_cast<std::uint64_t>(d.count()), std::memory_order_relaxed);
    }
    void add(const AtomicHistogram& o) {
        for (std::size_t i = 0; i < counts.size(); ++i)
            counts[i].fetch_add(o.counts[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
        sum_us.fetch_add(o.sum_us.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    Histogram snapshot() const {
        Histogram h;
        for (std::size_t i = 0; i < counts.size(); ++i) {
            h.counts[i] = counts[i].load(std::memory_order_relaxed);
            h.count += h.counts[i];
        }
        h.sum_seconds = static_cast<double>(sum_us.load(std::memory_order_relaxed)) / 1e6;
        return h;
    }
};

struct MetricsCell {
    MetricsCell(std::string m, std::string c) : mutex(std::move(m)), contender(std::move(c)) {}
    const std::string mutex;
    const std::string contender;
    std::atomic<std::uint64_t> attempts{0}, busy{0}, acquired{0}, released{0}, late_releases{0},
        renewals{0}, renewal_failures{0}, suspensions{0}, lost{0};
    AtomicHistogram acquire_latency, handoff_latency;

    static void inc(std::atomic<std::uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

    /// Adds another cell's counters and histograms to this one's.
    void add(const MetricsCell& o) {
        auto plus = [](std::atomic<std::uint64_t>& to, const std::atomic<std::uint64_t>& from) {
            to.fetch_add(from.load(std::memory_order_relaxed), std::memory_order_relaxed);
        };
        plus(attempts, o.attempts);
        plus(busy, o.busy);
        plus(acquired, o.acquired);
        plus(released, o.released);
        plus(late_releases, o.late_releases);
        plus(renewals, o.renewals);
        plus(renewal_failures, o.renewal_failures);
        plus(suspensions, o.suspensions);
        plus(lost, o.lost);
        acquire_latency.add(o.acquire_latency);
        handoff_latency.add(o.handoff_latency);
    }

    /// Counters and histograms; the caller fills the gauges.
    MutexMetrics snapshot() const {
        MutexMetrics m;
        m.mutex = mutex;
        m.contender = contender;
        m.attempts = attempts.load(std::memory_order_relaxed);
        m.busy = busy.load(std::memory_order_relaxed);
        m.acquired = acquired.load(std::memory_order_relaxed);
        m.released = released.load(std::memory_order_relaxed);
        m.late_releases = late_releases.load(std::memory_order_relaxed);
        m.renewals = renewals.load(std::memory_order_relaxed);
        m.renewal_failures = renewal_failures.load(std::memory_order_relaxed);
        m.suspensions = suspensions.load(std::memory_order_relaxed);
        m.lost = lost.load(std::memory_order_relaxed);
        m.acquire_latency = acquire_latency.snapshot();
        m.handoff_latency = handoff_latency.snapshot();
        return m;
    }
};

/// The cells of one factory: one per (mutex, contender id) while a service
/// of that id exists. When the last of them is destroyed, its counters fold
/// into the mutex's cell of contender "" (departed contenders), so a process
/// that makes a Locker per job keeps one series per mutex, not one per job.
class MetricCells {
public:
    /// The cell of a new service of (mutex, id).
    std::shared_ptr<MetricsCell> track(const std::string& mutex, const std::string& id) EXCLUDES(m_) {
        MutexLock lock(m_);
        auto& e = entry(mutex, id);
        ++e.services;
        return e.cell;
    }
    /// A service of (mutex, id) is gone.
    void untrack(const std::string& mutex, const std::string& id) EXCLUDES(m_) {
        MutexLock lock(m_);
        auto it = cells_.find({mutex, id});
        if (it == cells_.end() || --it->second.services > 0) return;
        entry(mutex, "").cell->add(*it->second.cell);
        cells_.erase(it);
    }
    /// Every cell's counters, sorted by (mutex, contender); gauges unset.
    std::vector<MutexMetrics> snapshot() const EXCLUDES(m_) {
        MutexLock lock(m_);
        std::vector<MutexMetrics> out;
        out.reserve(cells_.size());
        for (auto& [key, e] : cells_) out.push_back(e.cell->snapshot());
        return out;
    }

private:
    struct Entry {
        std::shared_ptr<MetricsCell> cell;
        int services = 0;
    };
    Entry& entry(const std::string& mutex, const std::string& id) REQUIRES(m_) {
        auto& e = cells_[{mutex, id}];
        if (!e.cell) e.cell = std::make_shared<MetricsCell>(mutex, id);
        return e;
    }
    mutable Mutex m_;
    std::map<std::pair<std::string, std::string>, Entry> cells_ GUARDED_BY(m_);
};

}  // namespace simba::detail
