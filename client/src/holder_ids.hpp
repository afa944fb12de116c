// simba client (internal): HolderIds, the (name, contender id) pairs alive
// in one factory: services, Lockers and MultiLockers' mutexes, and
// SharedLockers' read-write locks apart. One id is one holder to the
// server, so a second holder of the same pair in the process is refused.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pg_io.hpp"
#include "simba/errors.hpp"
#include "thread_annotations.hpp"

namespace simba::pg::detail {

class HolderIds {
public:
    /// Takes every pair of `names` with `id`, or none: IllegalStateError
    /// naming the first already taken.
    void reserve(Io::Names kind, const std::vector<std::string>& names, const std::string& id) EXCLUDES(m_) {
        MutexLock lock(m_);
        auto& taken = of(kind);
        for (auto& n : names)
            if (taken.count({n, id}))
                throw IllegalStateError("this factory already has a holder of " +
                                        std::string(kind == Io::Names::rwlock ? "read-write lock " : "mutex ") + n +
                                        " with contender id " + id +
                                        ": contender ids must be unique (one id is one holder to the server)");
        for (auto& n : names) taken.emplace(n, id);
    }

    void release(Io::Names kind, const std::vector<std::string>& names, const std::string& id) EXCLUDES(m_) {
        MutexLock lock(m_);
        auto& taken = of(kind);
        for (auto& n : names) taken.erase({n, id});
    }

private:
    using Pairs = std::set<std::pair<std::string, std::string>>;
    Pairs& of(Io::Names kind) REQUIRES(m_) { return kind == Io::Names::rwlock ? rwlocks_ : mutexes_; }

    Mutex m_;
    Pairs mutexes_ GUARDED_BY(m_);
    Pairs rwlocks_ GUARDED_BY(m_);
};

}  // namespace simba::pg::detail
