// Compiled against the installed libsimba-client-dev (test/package/smoke.sh):
// one Locker hold on the throwaway cluster through the libpq environment.
#include <simba/simba.hpp>

#include <chrono>
#include <cstdio>

int main() {
    simba::pg::ContendServiceFactory factory;
    simba::Locker lock(factory, "package-smoke");
    lock.acquire(std::chrono::seconds(10));
    std::printf("held %s, fence %lld\n", lock.mutex().c_str(), static_cast<long long>(lock.fence()));
    return lock.fence() > 0 ? 0 : 1;
}
