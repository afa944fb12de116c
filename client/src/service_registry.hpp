// simba client (internal): the running services of a factory, by mutex, the
// shortest lease among them, and the filter that lets the I/O thread drop
// most NOTIFYs without io_state. Every operation is O(log N) in the number of
// services: a factory may run 100,000.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "io_state.hpp"
#include "service_state.hpp"
#include "thread_annotations.hpp"

namespace simba::pg::detail {

class ServiceRegistry {
public:
    /// Adds and removes running services.
    void add(const ServicePtr& svc) REQUIRES(io_state) {
        if (!services_.insert(svc).second) return;
        by_mutex_[svc->mutex].insert(svc);
        ++leases_[svc->duration()];
        MutexLock lock(names_m_);
        ++names_[svc->mutex];
    }
    void remove(const ServicePtr& svc) REQUIRES(io_state) {
        if (!services_.erase(svc)) return;
        auto it = by_mutex_.find(svc->mutex);
        if (it != by_mutex_.end()) {
            it->second.erase(svc);
            if (it->second.empty()) by_mutex_.erase(it);
        }
        auto lease = leases_.find(svc->duration());
        if (lease != leases_.end() && --lease->second == 0) leases_.erase(lease);
        MutexLock lock(names_m_);
        if (--names_[svc->mutex] == 0) names_.erase(svc->mutex);
    }

    const std::set<ServicePtr>& all() const REQUIRES(io_state) { return services_; }
    /// The shortest lease (ttl + transition) of a running service; nullopt
    /// if none runs.
    std::optional<SteadyClock::duration> shortest_lease() const REQUIRES(io_state) {
        if (leases_.empty()) return std::nullopt;
        return leases_.begin()->first;
    }
    const std::set<ServicePtr>* of(const std::string& mutex) const REQUIRES(io_state) {
        auto it = by_mutex_.find(mutex);
        return it == by_mutex_.end() ? nullptr : &it->second;
    }

    /// Keeps in `names` those some running service contends for. Without
    /// io_state: most releases are of mutexes nobody here waits for (our own
    /// included), and those must never hold up a caller.
    void keep_ours(std::vector<std::string>& names) const EXCLUDES(names_m_) {
        MutexLock lock(names_m_);
        // remove_if by hand: a predicate lambda would read names_ where the
        // analysis does not see the lock.
        std::size_t kept = 0;
        for (std::size_t i = 0; i < names.size(); ++i) {
            if (names_.count(names[i]) == 0) continue;
            if (kept != i) names[kept] = std::move(names[i]);
            ++kept;
        }
        names.resize(kept);
    }

private:
    std::set<ServicePtr> services_ GUARDED_BY(io_state);
    std::unordered_map<std::string, std::set<ServicePtr>> by_mutex_ GUARDED_BY(io_state);
    // Lease durations of the running services, counted: the statement
    // timeout follows the shortest without a scan of every service.
    std::map<SteadyClock::duration, std::size_t> leases_ GUARDED_BY(io_state);
    // Changed with io_state held and names_m_, read under names_m_ alone.
    mutable Mutex names_m_ ACQUIRED_AFTER(io_state);
    std::unordered_map<std::string, int> names_ GUARDED_BY(names_m_);
};

}  // namespace simba::pg::detail
