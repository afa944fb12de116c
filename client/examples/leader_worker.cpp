// A leader-elected worker: two workers contend for "reports"; only the leader
// works. The leader steps down after a few rounds and the other takes over
// at once (the release NOTIFYs it). Exits 0 when both have led.
//
// Run against any server with the extension: PGHOST=... ./example_leader_worker
#include <simba/simba.hpp>

#include <condition_variable>
#include <cstdio>
#include <mutex>

using namespace std::chrono_literals;

struct Worker : simba::MutexContender {
    using MutexContender::MutexContender;
    void on_acquired(const simba::MutexState& s) override {
        std::printf("%s leads (fence %lld)\n", contender_id().c_str(), static_cast<long long>(s.after.fence));
        std::lock_guard<std::mutex> lock(m);
        leader = true;
        cv.notify_all();
    }
    void on_released(const simba::MutexState&) override {
        std::printf("%s stepped down\n", contender_id().c_str());
        std::lock_guard<std::mutex> lock(m);
        leader = false;
    }
    std::mutex m;
    std::condition_variable cv;
    bool leader = false;
};

int main() {
    simba::pg::ContendServiceFactory factory;  // libpq environment
    auto a = std::make_shared<Worker>("reports", "worker-a");
    auto b = std::make_shared<Worker>("reports", "worker-b");
    auto sa = factory.create(a), sb = factory.create(b);  // ttl 10 s, transition 6 s
    sa->start();
    sb->start();
    int led = 0;
    while (led < 2) {
        for (auto* w : {a.get(), b.get()}) {
            std::unique_lock<std::mutex> lock(w->m);
            if (!w->cv.wait_for(lock, 1ms, [&] { return w->leader; })) continue;
            lock.unlock();
            auto& svc = (w == a.get()) ? sa : sb;
            for (int round = 0; round < 3 && svc->is_owner(); ++round)
                std::printf("  %s works, round %d\n", w->contender_id().c_str(), round);
            svc->stop();  // releases: the other worker takes over now, not in 16 s
            ++led;
        }
    }
    std::printf("done\n");
    return 0;
}
