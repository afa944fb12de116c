// Regression tests for client bugs the TCK found, in situations only the
// PostgreSQL backend can stage (a renewal held back by a row lock).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>

#include "simba/simba.hpp"
#include "simba/tck/postgres.hpp"
#include "support.hpp"

namespace {

using namespace simba;
using namespace std::chrono_literals;
using simba::tck::eventually;

}  // namespace

// One factory, two services A and B on one mutex. A's lease ends without a
// renewal (its renewal is stuck behind a row lock) while the handle thread
// is busy (a third service's callback). B is granted the mutex after A's
// transition_at. The handle thread's Executor runs its FIFO queue before
// overdue timed tasks, so B's on_acquired (queued after A's deadline) runs
// BEFORE A's on_released (a timed task due at A's deadline): for a moment the
// process's callbacks say two services hold the mutex — the multiContend
// counter reads 2.
TEST(PostgresRegression, OverdueLeaseExpiryRunsBeforeALaterOnAcquired) {
    const auto backend = simba::tck::postgres_backend();
    const std::string tag = "kb" + std::to_string(::getpid());
    // A factory of the tag's role (make_factory creates and grants it) with
    // lock_timeout off: A's renewal must stay stuck behind the row lock. With
    // lock_timeout it fails and retries, and A may take the mutex back
    // before B once the lock goes.
    (void)backend.make_factory(tag);
    pg::FactoryOptions options;
    options.application_name = tag;
    options.lock_timeout = 0ms;
    // Per-lock leases: a row lock blocks A's renewal (under a session, its
    // keepalive would not touch the row). The ordering it checks is the
    // handle thread's, the same in both modes.
    options.sessions = false;
    auto factory = std::make_unique<pg::ContendServiceFactory>("user=regress_simba_tck_" + tag, options);
    const auto m = "known-bug-order-" + ContenderId::uuid();

    std::mutex om;
    std::vector<std::string> order;
    std::atomic<int> counter{0}, max_counter{0};
    auto note = [&](const std::string& what, int delta) {
        const int v = counter.fetch_add(delta) + delta;
        int prev = max_counter.load();
        while (v > prev && !max_counter.compare_exchange_weak(prev, v)) {
        }
        std::lock_guard<std::mutex> lock(om);
        order.push_back(what);
    };
    auto a = std::make_shared<FunctionContender>(
        m, [&](const MutexState&) { note("A acquired", 1); }, [&](const MutexState&) { note("A released", -1); },
        "A");
    auto b = std::make_shared<FunctionContender>(
        m, [&](const MutexState&) { note("B acquired", 1); }, [&](const MutexState&) { note("B released", -1); },
        "B");
    ContendOptions lease;
    lease.ttl = 1000ms;
    lease.transition = 1000ms;
    ContendOptions b_lease = lease;
    b_lease.jitter.normal = JitterRange{-200ms, -199ms};  // B tries 200 ms before A's transition_at
    auto sa = factory->create(a, lease);
    auto sb = factory->create(b, b_lease);
    sa->start();
    ASSERT_TRUE(eventually([&] { return sa->is_owner(); }, 10s));
    sb->start();
    ASSERT_TRUE(eventually([&] { return sb->state().after.owner_id == "A"; }, 10s));

    // A third service whose on_acquired keeps the handle thread busy.
    std::mutex hm;
    std::condition_variable hcv;
    bool entered = false, let_go = false;
    auto c = std::make_shared<FunctionContender>(
        m + "-busy",
        [&](const MutexState&) {
            std::unique_lock<std::mutex> lock(hm);
            entered = true;
            hcv.notify_all();
            hcv.wait_for(lock, 30s, [&] { return let_go; });
        },
        nullptr, "C");
    ContendOptions c_lease;  // long: keeps statement_timeout at half of A's lease
    auto sc = factory->create(c, c_lease);
    sc->start();
    {
        std::unique_lock<std::mutex> lock(hm);
        ASSERT_TRUE(hcv.wait_for(lock, 10s, [&] { return entered; }));
    }

    // Hold the mutex row FOR SHARE (a fenced writer's transaction): A's
    // renewal blocks until statement_timeout, its lease lapses.
    pqxx::connection locker("application_name=simba-tck-known-bug");
    pqxx::work tx(locker);
    const auto t_end = tx.exec_params1(
                           "SELECT (extract(epoch FROM transition_at) * 1000000)::int8 FROM simba_mutex"
                           " WHERE mutex = $1 FOR SHARE",
                           m)[0]
                           .as<std::int64_t>();
    // Until the server's clock is past A's transition_at (+50 ms).
    ASSERT_TRUE(eventually(
        [&] { return backend.read_row(m).current_at.count() > t_end + 50000; }, 10s));
    tx.commit();  // B's waiting attempt now wins (A's lease has ended)
    ASSERT_TRUE(eventually([&] { return sb->state().after.owner_id == "B"; }, 10s));
    EXPECT_FALSE(sa->is_owner());  // is_owner() itself is right
    {
        std::lock_guard<std::mutex> lock(hm);
        let_go = true;
    }
    hcv.notify_all();
    ASSERT_TRUE(eventually(
        [&] {
            std::lock_guard<std::mutex> lock(om);
            return order.size() >= 3;
        },
        10s));
    {
        std::lock_guard<std::mutex> lock(om);
        std::string seq;
        for (auto& s : order) seq += s + "; ";
        std::printf("callback order: %s\n", seq.c_str());
        EXPECT_EQ(order[1], "A released") << "B's on_acquired ran before A's on_released: " << seq;
    }
    EXPECT_EQ(max_counter.load(), 1) << "two services of one factory reported owning the mutex at once";
    sc->stop();
    sb->stop();
    sa->stop();
    if (backend.cleanup) backend.cleanup(tag);
}
