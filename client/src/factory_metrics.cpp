#include "factory_metrics.hpp"

#include <algorithm>
#include <tuple>

namespace simba::pg::detail {

void FactoryMetrics::track(const ServicePtr& svc) {
    svc->metrics = cells_.track(svc->mutex, svc->id);
    MutexLock lock(m_);
    if (services_.size() >= prune_at_) {  // drop destroyed services, amortized O(1)
        services_.erase(std::remove_if(services_.begin(), services_.end(),
                                       [](const std::weak_ptr<ServiceState>& w) { return w.expired(); }),
                        services_.end());
        prune_at_ = std::max<std::size_t>(64, 2 * services_.size());
    }
    services_.push_back(svc);
}

Metrics FactoryMetrics::snapshot() {
    Metrics out;
    out.acquire_statements = statements_.load(std::memory_order_relaxed);
    out.acquire_calls = calls_.load(std::memory_order_relaxed);
    out.session_statements = session_statements_.load(std::memory_order_relaxed);
    out.release_statements = release_statements_.load(std::memory_order_relaxed);
    out.release_calls = release_calls_.load(std::memory_order_relaxed);
    out.mutexes = cells_.snapshot();
    MutexLock lock(m_);
    for (auto& w : services_) {
        auto s = w.lock();
        if (!s) continue;
        MutexLock slock(s->m);
        const auto held = s->ownership.lease(SteadyClock::now());
        if (!held) continue;
        // out.mutexes is sorted by (mutex, contender).
        auto it = std::lower_bound(out.mutexes.begin(), out.mutexes.end(), std::tie(s->mutex, s->id),
                                   [](const MutexMetrics& m, const std::tuple<const std::string&, const std::string&>& k) {
                                       return std::tie(m.mutex, m.contender) < k;
                                   });
        if (it != out.mutexes.end() && it->mutex == s->mutex && it->contender == s->id) {
            it->is_owner = true;
            it->fence = held->fence;
        }
    }
    return out;
}

}  // namespace simba::pg::detail
