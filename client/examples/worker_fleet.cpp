// "At most 2 instances of worker foo across the cluster": 5 workers (threads
// here, processes or hosts in real life) share a 2-permit semaphore. Each
// waits for a permit, works while it holds it, and gives it back.
#include <simba/simba.hpp>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
    simba::pg::ContendServiceFactory factory;  // connection from PGHOST, PGDATABASE, ...
    std::atomic<int> working{0}, most{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < 5; ++w) {
        workers.emplace_back([&, w] {
            simba::Semaphore fleet(factory, "worker-" + std::to_string(w));
            auto permit = fleet.acquire("worker-foo", 2, std::chrono::seconds(30), std::chrono::seconds(30));
            int now = ++working;
            for (int seen = most; now > seen && !most.compare_exchange_weak(seen, now);) {
            }
            std::printf("worker %d working with permit %d (fence %lld)\n", w, permit.slot(), (long long)permit.fence());
            std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the work
            --working;
            permit.release();  // the next waiter is woken by NOTIFY
        });
    }
    for (auto& t : workers) t.join();
    std::printf("at most %d workers at once\n", most.load());
    return most.load() <= 2 ? 0 : 1;
}
