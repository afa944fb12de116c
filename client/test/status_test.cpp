#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "simba/errors.hpp"
#include "simba/service.hpp"

using namespace simba;

namespace {

// A service with no backend: only the status machine is under test.
class FakeService : public MutexContendService {
public:
    FakeService() : MutexContendService(std::make_shared<MutexContender>("m", "me")) {}
    std::optional<simba::Lease> lease() const override { return std::nullopt; }
    MutexState state() const override { return {}; }
    bool wait_owner(SteadyClock::time_point) const override { return false; }

    std::atomic<int> inside{0};     // threads inside start_contend/stop_contend
    std::atomic<int> overlaps{0};
    std::atomic<int> starts{0}, stops{0};
    bool block_start = false;
    bool throw_on_start = false;
    std::mutex m;
    std::condition_variable cv;
    bool entered = false, release = false;

protected:
    void start_contend() override {
        enter();
        ++starts;
        if (block_start) {
            std::unique_lock<std::mutex> lock(m);
            entered = true;
            cv.notify_all();
            cv.wait(lock, [&] { return release; });
        }
        leave();
        if (throw_on_start) throw Error("boom");
    }
    void stop_contend() override {
        enter();
        ++stops;
        leave();
    }

private:
    void enter() {
        if (inside.fetch_add(1) != 0) ++overlaps;
    }
    void leave() { inside.fetch_sub(1); }
};

}  // namespace

TEST(Status, FullCycle) {
    FakeService s;
    EXPECT_EQ(s.status(), Status::INITIAL);
    s.start();
    EXPECT_EQ(s.status(), Status::RUNNING);
    EXPECT_TRUE(s.running());
    s.stop();
    EXPECT_EQ(s.status(), Status::INITIAL);
    s.start();  // restartable
    s.stop();
    EXPECT_EQ(s.starts.load(), 2);
    EXPECT_EQ(s.stops.load(), 2);
}

TEST(Status, IllegalMovesThrow) {
    FakeService s;
    EXPECT_THROW(s.stop(), IllegalStateError);
    s.start();
    EXPECT_THROW(s.start(), IllegalStateError);
    s.stop();
    EXPECT_THROW(s.stop(), IllegalStateError);
    EXPECT_EQ(s.status(), Status::INITIAL);
}

TEST(Status, FailedStartGoesBackToInitial) {
    FakeService s;
    s.throw_on_start = true;
    EXPECT_THROW(s.start(), Error);
    EXPECT_EQ(s.status(), Status::INITIAL);
    s.throw_on_start = false;
    s.start();
    EXPECT_EQ(s.status(), Status::RUNNING);
    s.stop();
}

TEST(Status, StartingRejectsStartAndStop) {
    FakeService s;
    s.block_start = true;
    std::thread starter([&] { s.start(); });
    {
        std::unique_lock<std::mutex> lock(s.m);
        ASSERT_TRUE(s.cv.wait_for(lock, std::chrono::seconds(10), [&] { return s.entered; }));
    }
    EXPECT_EQ(s.status(), Status::STARTING);
    EXPECT_THROW(s.start(), IllegalStateError);
    EXPECT_THROW(s.stop(), IllegalStateError);
    {
        std::lock_guard<std::mutex> lock(s.m);
        s.release = true;
        s.cv.notify_all();
    }
    starter.join();
    EXPECT_EQ(s.status(), Status::RUNNING);
    EXPECT_EQ(s.starts.load(), 1);
    s.stop();
}

TEST(Status, ConcurrentStartStopFromManyThreads) {
    FakeService s;
    std::atomic<int> ok_start{0}, ok_stop{0}, rejected{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            while (!go.load()) std::this_thread::yield();
            for (int i = 0; i < 2000; ++i) {
                try {
                    if ((i + t) % 2 == 0) {
                        s.start();
                        ++ok_start;
                    } else {
                        s.stop();
                        ++ok_stop;
                    }
                } catch (const IllegalStateError&) {
                    ++rejected;
                }
            }
        });
    go = true;
    for (auto& th : threads) th.join();
    // Every successful transition ran its hook exactly once, never two at a time.
    EXPECT_EQ(s.overlaps.load(), 0);
    EXPECT_EQ(s.starts.load(), ok_start.load());
    EXPECT_EQ(s.stops.load(), ok_stop.load());
    EXPECT_GT(ok_start.load(), 0);
    EXPECT_EQ(ok_start.load() + ok_stop.load() + rejected.load(), 8 * 2000);
    const int diff = ok_start.load() - ok_stop.load();
    EXPECT_TRUE(diff == 0 || diff == 1) << diff;
    EXPECT_EQ(s.status(), diff == 1 ? Status::RUNNING : Status::INITIAL);
    if (s.running()) s.stop();
}
