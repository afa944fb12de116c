// Scheduler: leader-gated periodic work. Only one process in the cluster runs
// `work`; here one instance runs five times, then stops.
#include <simba/simba.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>

using namespace std::chrono_literals;

int main() {
    simba::pg::ContendServiceFactory factory;  // libpq environment
    std::mutex m;
    std::condition_variable cv;
    int runs = 0;
    simba::Scheduler scheduler(factory, "cleanup-job", simba::ScheduleConfig::fixed_rate(0ms, 100ms), [&] {
        std::lock_guard<std::mutex> lock(m);
        std::printf("cleanup run %d\n", ++runs);
        cv.notify_all();
    });
    scheduler.start();
    {
        std::unique_lock<std::mutex> lock(m);
        if (!cv.wait_for(lock, 20s, [&] { return runs >= 5; })) return 1;
    }
    scheduler.stop();  // releases leadership, waits for a running work item
    std::printf("stopped after %d runs\n", runs);
    return 0;
}
