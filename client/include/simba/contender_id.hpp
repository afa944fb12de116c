// simba client: contender id generators. Both may be called from any
// threads at once.
#pragma once

#include <string>

namespace simba {

struct ContenderId {
    /// "{counter}:{pid}@{host}": counter is process-wide, starting at 0, so
    /// two contenders in one process never share an id.
    [[nodiscard]] static std::string host();
    /// 32 lower-case hex characters of randomness (a UUID without dashes).
    [[nodiscard]] static std::string uuid();
};

}  // namespace simba
