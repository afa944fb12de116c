// simba client (internal): a factory's metrics: the cells of its services
// (metrics_cell.hpp), the statement counters, and the gauges read from the
// services still alive (metrics()).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "metrics_cell.hpp"
#include "service_state.hpp"
#include "simba/metrics.hpp"
#include "thread_annotations.hpp"

namespace simba::pg::detail {

class FactoryMetrics {
public:
    /// A new service: its cell, and its gauges from now on.
    void track(const ServicePtr& svc) EXCLUDES(m_);
    /// The service `svc` is gone: its cell folds into the mutex's entry.
    void untrack(const ServicePtr& svc) { cells_.untrack(svc->mutex, svc->id); }
    /// Keeps `svc`'s cell apart until let_go(), even past its service's
    /// end: a release posted to the I/O thread is still to be counted in it.
    void keep(const ServicePtr& svc) { (void)cells_.track(svc->mutex, svc->id); }
    void let_go(const ServicePtr& svc) { untrack(svc); }
    /// One acquire statement of `calls` attempts was sent.
    void count_statement(std::size_t calls) {
        statements_.fetch_add(1, std::memory_order_relaxed);
        calls_.fetch_add(calls, std::memory_order_relaxed);
    }
    /// One release statement of `calls` simba_release calls was sent.
    void count_release_statement(std::size_t calls) {
        release_statements_.fetch_add(1, std::memory_order_relaxed);
        release_calls_.fetch_add(calls, std::memory_order_relaxed);
    }
    /// A session statement (open, keepalive, close: sessions.hpp).
    void count_session_statement() { session_statements_.fetch_add(1, std::memory_order_relaxed); }
    Metrics snapshot() EXCLUDES(m_);

private:
    simba::detail::MetricCells cells_;
    std::atomic<std::uint64_t> statements_{0}, calls_{0}, session_statements_{0};
    std::atomic<std::uint64_t> release_statements_{0}, release_calls_{0};
    // Services for the gauges (weak: a destroyed one is pruned). Lock order:
    // m_ -> ServiceState::m, in prose: ACQUIRED_BEFORE would need an
    // expression naming each service's mutex.
    Mutex m_;
    std::vector<std::weak_ptr<ServiceState>> services_ GUARDED_BY(m_);
    std::size_t prune_at_ GUARDED_BY(m_) = 64;
};

}  // namespace simba::pg::detail
