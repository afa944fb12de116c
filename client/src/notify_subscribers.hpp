// simba client (internal): what a factory does with the `NOTIFY simba, name`
// it hears besides waking its services. NotifySubscribers: callbacks on the
// I/O thread for the names of the holds of SharedLockers, MultiLockers and
// semaphore permits (lock_hold.hpp), told whether it was only their own
// registration taking effect.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "thread_annotations.hpp"

namespace simba::pg::detail {

/// Its own mutex (a leaf): subscribe() and unsubscribe() come from any
/// thread; heard() from the I/O thread while it reads the LISTEN
/// connection, run() from it afterwards, with no lock held while a
/// callback runs (one may unsubscribe).
class NotifySubscribers {
public:
    /// fn(registered): registered when only a registration of one of the
    /// names took effect (ListenConnection::want_name), no NOTIFY.
    std::uint64_t subscribe(std::vector<std::string> names, std::function<void(bool)> fn) {
        MutexLock lock(m_);
        const auto id = ++last_;
        for (auto& n : names) by_name_[n].push_back(id);
        subs_.emplace(id, Sub{std::move(names), std::move(fn)});
        return id;
    }
    void unsubscribe(std::uint64_t id) {
        MutexLock lock(m_);
        auto it = subs_.find(id);
        if (it == subs_.end()) return;
        for (auto& n : it->second.names) {
            auto& ids = by_name_[n];
            ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
            if (ids.empty()) by_name_.erase(n);
        }
        subs_.erase(it);
    }
    /// Notes the subscriptions `names` concern (NOTIFYs, or `registered`:
    /// registrations that took effect); true if there are any.
    bool heard(const std::vector<std::string>& names, bool registered = false) {
        MutexLock lock(m_);
        for (auto& n : names) {
            auto it = by_name_.find(n);
            if (it != by_name_.end())
                for (auto id : it->second) due_.emplace_back(id, registered);
        }
        return !due_.empty();
    }
    /// Runs the callbacks heard() noted, each once (as for a NOTIFY if one
    /// of its entries was one: those sort first).
    void run() {
        std::vector<std::pair<std::function<void(bool)>, bool>> fns;
        {
            MutexLock lock(m_);
            std::sort(due_.begin(), due_.end());
            due_.erase(std::unique(due_.begin(), due_.end(), [](auto& a, auto& b) { return a.first == b.first; }),
                       due_.end());
            for (auto [id, registered] : due_)
                if (auto it = subs_.find(id); it != subs_.end()) fns.emplace_back(it->second.fn, registered);
            due_.clear();
        }
        for (auto& [fn, registered] : fns) fn(registered);
    }

private:
    struct Sub {
        std::vector<std::string> names;
        std::function<void(bool)> fn;
    };
    Mutex m_;
    std::uint64_t last_ GUARDED_BY(m_) = 0;
    std::map<std::uint64_t, Sub> subs_ GUARDED_BY(m_);
    std::unordered_map<std::string, std::vector<std::uint64_t>> by_name_ GUARDED_BY(m_);
    std::vector<std::pair<std::uint64_t, bool>> due_ GUARDED_BY(m_);  // (id, registered)
};

}  // namespace simba::pg::detail
