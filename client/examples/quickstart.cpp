// The client guide's quick start: a lock across processes, held the
// standard C++ way (client/README.md).
#include <simba/simba.hpp>

#include <cstdio>
#include <mutex>

using namespace std::chrono_literals;

int main() try {
    simba::pg::ContendServiceFactory factory;  // connection from PGHOST, PGDATABASE, ...
    simba::Locker report(factory, "nightly-report");
    {
        std::unique_lock<simba::Locker> hold(report, 10s);  // try_lock_for(10s)
        if (!hold) {
            std::fprintf(stderr, "another instance held nightly-report for 10 s\n");
            return 1;
        }
        // Yours on every machine until the block ends; pass the fence to
        // what you write (simba_fence_check makes a write conditional on it).
        std::printf("holding %s, fence %lld\n", report.mutex().c_str(), static_cast<long long>(report.fence()));
    }  // unlock(): another instance may take it at once
    std::printf("released\n");
    return 0;
} catch (const simba::Error& e) {  // a setup mistake: no server, no extension, no grant
    std::fprintf(stderr, "%s (SQLSTATE %s)\n", e.what(), e.sqlstate().c_str());
    return 1;
}
