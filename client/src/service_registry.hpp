// simba client (internal): the running services of a factory, by mutex, and
// the filter that lets the I/O thread drop most NOTIFYs without io_m.
#pragma once

#include <algorithm>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "service_core.hpp"

namespace simba::pg::detail {

class ServiceRegistry {
public:
    /// Adds and removes running services (I/O state: io_m held).
    void add(const ServicePtr& svc) {
        if (!services_.insert(svc).second) return;
        by_mutex_[svc->mutex].insert(svc);
        std::lock_guard<std::mutex> lock(names_m_);
        ++names_[svc->mutex];
    }
    void remove(const ServicePtr& svc) {
        if (!services_.erase(svc)) return;
        auto it = by_mutex_.find(svc->mutex);
        if (it != by_mutex_.end()) {
            it->second.erase(svc);
            if (it->second.empty()) by_mutex_.erase(it);
        }
        std::lock_guard<std::mutex> lock(names_m_);
        if (--names_[svc->mutex] == 0) names_.erase(svc->mutex);
    }

    /// io_m held.
    const std::set<ServicePtr>& all() const { return services_; }
    const std::set<ServicePtr>* of(const std::string& mutex) const {
        auto it = by_mutex_.find(mutex);
        return it == by_mutex_.end() ? nullptr : &it->second;
    }

    /// Keeps in `names` those some running service contends for. Without
    /// io_m: most releases are of mutexes nobody here waits for (our own
    /// included), and those must never hold up a caller.
    void keep_ours(std::vector<std::string>& names) const {
        std::lock_guard<std::mutex> lock(names_m_);
        names.erase(std::remove_if(names.begin(), names.end(),
                                   [&](const std::string& n) { return names_.count(n) == 0; }),
                    names.end());
    }

private:
    std::set<ServicePtr> services_;
    std::unordered_map<std::string, std::set<ServicePtr>> by_mutex_;
    // Changed under io_m and names_m_, read under names_m_ alone.
    mutable std::mutex names_m_;
    std::unordered_map<std::string, int> names_;
};

}  // namespace simba::pg::detail
