// Locker: RAII mutual exclusion across processes, with the fence passed to
// the writes it protects. Three rounds of acquire / fenced work / release.
#include <simba/simba.hpp>

#include <cstdio>

using namespace std::chrono_literals;

int main() {
    simba::pg::ContendServiceFactory factory;  // libpq environment
    std::int64_t last_fence = 0;
    for (int round = 0; round < 3; ++round) {
        simba::Locker lock(factory, "nightly-export");
        try {
            lock.acquire(10s);  // throws simba::TimeoutError after 10 s
        } catch (const simba::TimeoutError& e) {
            std::fprintf(stderr, "%s\n", e.what());
            return 1;
        }
        // Pass lock.fence() to whatever you write; inside PostgreSQL call
        // simba_fence_check(mutex, contender_id, fence) in the same
        // transaction to make the write conditional on still holding it.
        std::printf("round %d: holding %s as %s, fence %lld\n", round, lock.mutex().c_str(),
                    lock.contender_id().c_str(), static_cast<long long>(lock.fence()));
        if (lock.fence() <= last_fence) return 1;  // fences only grow
        last_fence = lock.fence();
    }  // ~Locker releases
    // Bad arguments fail before any round trip, with the server's wording.
    try {
        simba::Locker bad(factory, "");
    } catch (const simba::InvalidArgumentError& e) {
        std::printf("rejected: %s (SQLSTATE %s)\n", e.what(), e.sqlstate().c_str());
        return 0;
    }
    return 1;
}
