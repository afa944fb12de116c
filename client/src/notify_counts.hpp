// simba client (internal): how many `NOTIFY simba, name` a factory received
// for the names someone waits on (the semaphore's acquire()). A name is
// counted from its first watch() to its last unwatch(); nothing is kept for
// names nobody watches.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "simba/clock.hpp"

namespace simba::pg::detail {

class NotifyCounts {
public:
    void watch(const std::string& name) {
        std::lock_guard<std::mutex> lock(m_);
        ++counts_[name].watchers;
    }
    void unwatch(const std::string& name) {
        std::lock_guard<std::mutex> lock(m_);
        auto it = counts_.find(name);
        if (it != counts_.end() && --it->second.watchers <= 0) counts_.erase(it);
    }
    [[nodiscard]] std::uint64_t count(const std::string& name) const {
        std::lock_guard<std::mutex> lock(m_);
        auto it = counts_.find(name);
        return it == counts_.end() ? 0 : it->second.count;
    }
    /// Waits until count(name) differs from `seen`, or `until`; true if it does.
    bool wait_change(const std::string& name, std::uint64_t seen, SteadyClock::time_point until) {
        std::unique_lock<std::mutex> lock(m_);
        return simba::wait_until(cv_, lock, until, [&] {
            auto it = counts_.find(name);
            return it != counts_.end() && it->second.count != seen;
        });
    }
    /// NOTIFYs received: counts the watched names among them, wakes waiters.
    void add(const std::vector<std::string>& names) {
        {
            std::lock_guard<std::mutex> lock(m_);
            for (auto& name : names) {
                auto it = counts_.find(name);
                if (it != counts_.end()) ++it->second.count;
            }
        }
        cv_.notify_all();
    }

private:
    struct Entry {
        std::uint64_t count = 0;
        int watchers = 0;
    };
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::unordered_map<std::string, Entry> counts_;
};

}  // namespace simba::pg::detail
