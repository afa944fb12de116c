// Locker: a distributed mutex used through the standard lock types
// (it is Lockable and TimedLockable), with the fence passed to the writes
// it protects.
#include <simba/simba.hpp>

#include <cstdio>
#include <mutex>

using namespace std::chrono_literals;

int main() try {
    simba::pg::ContendServiceFactory factory;  // libpq environment
    simba::Locker exporter(factory, "nightly-export");

    // 1. Blocking: std::lock_guard calls lock() and unlock(). Every hold has
    //    a new, larger fence.
    std::int64_t last_fence = 0;
    for (int round = 0; round < 3; ++round) {
        std::lock_guard<simba::Locker> hold(exporter);
        std::printf("round %d: holding %s as %s, fence %lld\n", round, exporter.mutex().c_str(),
                    exporter.contender_id().c_str(), static_cast<long long>(exporter.fence()));
        if (exporter.fence() <= last_fence) return 1;  // fences only grow
        last_fence = exporter.fence();
    }

    // 2. Bounded: a timeout is false, not an exception.
    {
        std::unique_lock<simba::Locker> hold(exporter);
        simba::Locker other(factory, "nightly-export");  // another contender (its own id)
        std::unique_lock<simba::Locker> attempt(other, std::defer_lock);
        if (attempt.try_lock_for(200ms)) return 1;
        std::printf("%s is held: try_lock_for(200ms) returned false\n", other.mutex().c_str());
    }

    // 3. Two locks at once, without deadlock against a process that takes
    //    them in the other order.
    {
        simba::Locker orders(factory, "orders"), invoices(factory, "invoices");
        std::scoped_lock both(orders, invoices);
        std::printf("holding orders (fence %lld) and invoices (fence %lld)\n",
                    static_cast<long long>(orders.fence()), static_cast<long long>(invoices.fence()));
    }

    // 4. Bad arguments fail before any round trip, with the server's wording.
    try {
        simba::Locker bad(factory, "");
    } catch (const simba::InvalidArgumentError& e) {
        std::printf("rejected: %s (SQLSTATE %s)\n", e.what(), e.sqlstate().c_str());
        return 0;
    }
    return 1;
} catch (const simba::Error& e) {  // a setup mistake: no server, no extension, no grant
    std::fprintf(stderr, "%s (SQLSTATE %s)\n", e.what(), e.sqlstate().c_str());
    return 1;
}
