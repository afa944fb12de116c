// The client guide's quick start: a leader-elected worker (README.md).
#include <simba/simba.hpp>

#include <cstdio>
#include <thread>

int main() {
    simba::pg::ContendServiceFactory factory;  // connection from PGHOST, PGDATABASE, ...
    auto service = factory.create(std::make_shared<simba::FunctionContender>(
        "my-job",
        [](const simba::MutexState& s) { std::printf("leader, fence %lld\n", (long long)s.after.fence); },
        [](const simba::MutexState&) { std::printf("not leader any more\n"); }));
    service->start();
    for (int tick = 0; tick < 20; ++tick) {  // your main loop
        if (service->is_owner()) std::printf("working, tick %d\n", tick);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    service->stop();  // releases the lock; another instance takes over at once
}
