// on_suspended / on_resumed (issue 23): renewals that fail through a
// blackholed simba_fault_proxy suspend a held tenure or permit before its
// loss, a renewal that then gets through resumes it, and a normal stop or
// release reports neither. Runs on a cluster of its own that listens on
// TCP (SIMBA_CLUSTER_TCP=1), like pg_fault_test.cpp.
#include <cstdio>

#include "fault_proxy.hpp"

using namespace simba_test;
using simba::Lease;
using simba::MutexState;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

/// A contender recording all four callbacks, in order.
class SuspendRecorder : public simba::MutexContender {
public:
    using MutexContender::MutexContender;
    enum Kind { acquired, released, suspended, resumed };
    struct Event {
        Kind kind;
        std::int64_t fence;
        SteadyClock::time_point deadline;  // suspended, resumed: the lease's
        SteadyClock::time_point at;
    };
    void on_acquired(const MutexState& s) override { record({acquired, s.after.fence, {}, SteadyClock::now()}); }
    void on_released(const MutexState& s) override { record({released, s.before.fence, {}, SteadyClock::now()}); }
    void on_suspended(const Lease& l) override { record({suspended, l.fence, l.deadline, SteadyClock::now()}); }
    void on_resumed(const Lease& l) override { record({resumed, l.fence, l.deadline, SteadyClock::now()}); }

    std::vector<Event> events() const {
        std::lock_guard<std::mutex> lock(m_);
        return events_;
    }
    /// The kinds so far, in order.
    std::vector<Kind> kinds() const {
        std::vector<Kind> out;
        for (const auto& e : events()) out.push_back(e.kind);
        return out;
    }
    /// Waits until `n` events were recorded.
    bool wait_for(std::size_t n, std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(m_);
        return cv_.wait_for(lock, timeout, [&] { return events_.size() >= n; });
    }

private:
    void record(Event e) {
        std::lock_guard<std::mutex> lock(m_);
        events_.push_back(e);
        cv_.notify_all();
    }
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::vector<Event> events_;
};

using K = SuspendRecorder::Kind;

/// A factory behind `proxy` whose statements are cut 450 ms after they
/// were sent (statement_timeout 300 ms and a half): a blackholed renewal
/// fails well before the leases below end.
simba::pg::FactoryOptions suspend_options(const std::string& app) {
    auto o = fault_options(app);
    o.statement_timeout = 300ms;
    return o;
}

long long ms(SteadyClock::duration d) { return duration_cast<milliseconds>(d).count(); }

/// The factory's suspensions counter, all mutexes.
std::uint64_t suspensions(const simba::pg::ContendServiceFactory& f) {
    std::uint64_t n = 0;
    for (const auto& m : f.metrics().mutexes) n += m.suspensions;
    return n;
}

/// A Permit's or a Locker's callbacks, recorded in order ('s', 'r', 'l').
struct HoldLog {
    std::mutex m;
    std::condition_variable cv;
    std::string kinds;
    SteadyClock::time_point deadline{};  // on_suspended's
    SteadyClock::time_point lost_at{};

    template <typename Hold>
    void attach(Hold& p) {
        p.on_suspended([this](SteadyClock::time_point d) { add('s', [&] { deadline = d; }); });
        p.on_resumed([this] { add('r', [] {}); });
        p.on_lost([this] { add('l', [&] { lost_at = SteadyClock::now(); }); });
    }
    void add(char k, const std::function<void()>& also) {
        std::lock_guard<std::mutex> lock(m);
        kinds += k;
        also();
        cv.notify_all();
    }
    bool wait_for(std::size_t n, std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(m);
        return cv.wait_for(lock, timeout, [&] { return kinds.size() >= n; });
    }
    std::string seen() {
        std::lock_guard<std::mutex> lock(m);
        return kinds;
    }
};

}  // namespace

TEST(Suspend, FailingRenewalsSuspendTheOwnerThenItIsReleasedAtTheDeadline) {
    // Everything blackholed for good: the first renewal is cut (450 ms
    // after it was sent, 2 s into a 4 s lease), which suspends the owner
    // with its lease's deadline; the tenure then ends there, reported by
    // on_released alone.
    REQUIRE_TCP();
    FaultProxy proxy(tcp_port());
    auto db = admin();
    simba::pg::ContendServiceFactory factory(proxy.conninfo(), suspend_options("suspend-lost"));
    auto a = std::make_shared<SuspendRecorder>(unique_name("suspend-lost"), "A");
    auto sa = factory.create(a, lease(2000ms, 2000ms));
    sa->start();
    ASSERT_TRUE(a->wait_for(1, 10s));
    ASSERT_EQ(proxy.command("blackhole"), "ok\n");
    ASSERT_TRUE(a->wait_for(2, 10s));
    auto ev = a->events();
    ASSERT_EQ(ev[1].kind, K::suspended);
    EXPECT_EQ(ev[1].fence, ev[0].fence);
    EXPECT_LT(ev[1].at, ev[1].deadline) << "suspended before the deadline";
    const auto held = sa->lease();  // nothing renews it now: the lease on_suspended named
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(held->deadline, ev[1].deadline);
    EXPECT_EQ(held->fence, ev[0].fence);
    std::printf("suspended %lld ms before the deadline\n", ms(ev[1].deadline - ev[1].at));
    ASSERT_TRUE(a->wait_for(3, 10s));
    ev = a->events();
    EXPECT_EQ(ev[2].kind, K::released);
    EXPECT_GE(ev[2].at, ev[1].deadline) << "released at the deadline, not before";
    EXPECT_FALSE(sa->is_owner());
    sa->stop();
    EXPECT_EQ(a->kinds(), (std::vector<K>{K::acquired, K::suspended, K::released})) << "no on_resumed";
    EXPECT_EQ(suspensions(factory), 1u);
    EXPECT_EQ(proxy.command("pass"), "ok\n");
}

TEST(Suspend, ARenewalThatGetsThroughResumesTheSameTenure) {
    // Blackholed until the owner is suspended, then passing again: the
    // factory reconnects and renews (within connect_timeout and a
    // reconnect, well inside the 8 s lease), on_resumed reports the same
    // fence with a later deadline, and the tenure never ended.
    REQUIRE_TCP();
    FaultProxy proxy(tcp_port());
    auto db = admin();
    simba::pg::ContendServiceFactory factory(proxy.conninfo(), suspend_options("suspend-resume"));
    auto a = std::make_shared<SuspendRecorder>(unique_name("suspend-resume"), "A");
    auto sa = factory.create(a, lease(4000ms, 4000ms));
    sa->start();
    ASSERT_TRUE(a->wait_for(1, 10s));
    const auto fence = a->events()[0].fence;
    ASSERT_EQ(proxy.command("blackhole"), "ok\n");
    ASSERT_TRUE(a->wait_for(2, 10s));
    ASSERT_EQ(proxy.command("pass"), "ok\n");
    ASSERT_TRUE(a->wait_for(3, 10s));
    const auto ev = a->events();
    ASSERT_EQ(a->kinds(), (std::vector<K>{K::acquired, K::suspended, K::resumed}));
    EXPECT_EQ(ev[2].fence, fence);
    EXPECT_GT(ev[2].deadline, ev[1].deadline) << "the renewal moved the deadline";
    EXPECT_LT(ev[2].at, ev[1].deadline) << "resumed before the old deadline";
    const auto held = sa->lease();
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(held->fence, fence) << "the same tenure goes on";
    EXPECT_EQ(owner_of(*db, sa->mutex()), "A");
    std::printf("resumed %lld ms after the suspension\n", ms(ev[2].at - ev[1].at));
    sa->stop();
    EXPECT_EQ(a->kinds(), (std::vector<K>{K::acquired, K::suspended, K::resumed, K::released}));
    EXPECT_EQ(suspensions(factory), 1u);
}

TEST(Suspend, ARenewalFailingOnALiveConnectionSuspendsAndItsRetryResumes) {
    // No network fault: the owner's row (and its session's) is locked by
    // another transaction, so the renewal (or the session's keepalive) fails
    // by lock_timeout (55P03) and the connection stays
    // up. The failure suspends the owner; once the lock goes, the retry
    // (a quarter of the ttl later) renews and resumes it.
    LogCapture logs;
    auto db = admin();
    auto blocker = admin();
    simba::pg::ContendServiceFactory factory("", test_options("suspend-locked"));
    const auto m = unique_name("suspend-locked");
    auto a = std::make_shared<SuspendRecorder>(m, "A");
    auto sa = factory.create(a, lease(2000ms, 2000ms));
    sa->start();
    ASSERT_TRUE(a->wait_for(1, 10s));
    {
        pqxx::work tx(*blocker);
        tx.exec_params("SELECT 1 FROM simba_mutex WHERE mutex = $1 FOR UPDATE", m);
        tx.exec_params("SELECT 1 FROM simba_session_lease WHERE session_id ="
                       " (SELECT session_id FROM simba_mutex WHERE mutex = $1) FOR UPDATE",
                       m);
        ASSERT_TRUE(a->wait_for(2, 10s));
        EXPECT_EQ(a->events()[1].kind, K::suspended);
        EXPECT_GE(logs.count_containing("55P03"), 1);
        EXPECT_TRUE(factory.connected());
        EXPECT_EQ(factory.connects(), 1u) << "a statement error, not a lost connection";
        EXPECT_TRUE(sa->is_owner());
        tx.abort();
    }
    ASSERT_TRUE(a->wait_for(3, 10s));
    const auto ev = a->events();
    EXPECT_EQ(ev[2].kind, K::resumed);
    EXPECT_EQ(ev[2].fence, ev[0].fence);
    EXPECT_LT(ev[2].at, ev[1].deadline);
    sa->stop();
    EXPECT_EQ(a->kinds(), (std::vector<K>{K::acquired, K::suspended, K::resumed, K::released}));
}

TEST(Suspend, APermitIsSuspendedByFailingRefreshesAndResumedOrLost) {
    // A permit refreshes every third of its ttl. Blackholed: the refresh
    // is cut, on_suspended names the permit's deadline; passing again, a
    // retried refresh gets through and on_resumed follows. Blackholed for
    // good, on_lost follows instead, at that deadline.
    REQUIRE_TCP();
    FaultProxy proxy(tcp_port());
    auto db = admin();
    simba::pg::ContendServiceFactory factory(proxy.conninfo(), suspend_options("suspend-permit"));
    simba::Semaphore sem(factory, "H");
    {
        auto permit = sem.acquire(unique_name("suspend-permit"), 1, 12000ms, 10000ms);
        HoldLog log;
        log.attach(permit);
        ASSERT_EQ(proxy.command("blackhole"), "ok\n");
        ASSERT_TRUE(log.wait_for(1, 10s));
        EXPECT_EQ(log.seen(), "s");
        EXPECT_FALSE(permit.lost()) << "still held while suspended";
        ASSERT_EQ(proxy.command("pass"), "ok\n");
        ASSERT_TRUE(log.wait_for(2, 10s));
        EXPECT_EQ(log.seen(), "sr");
        EXPECT_FALSE(permit.lost());
        EXPECT_TRUE(permit.release());
        EXPECT_EQ(log.seen(), "sr") << "release() reports nothing";
    }
    auto permit = sem.acquire(unique_name("suspend-permit-lost"), 1, 3000ms, 10000ms);
    HoldLog log;
    log.attach(permit);
    ASSERT_EQ(proxy.command("blackhole"), "ok\n");
    ASSERT_TRUE(log.wait_for(2, 10s));
    EXPECT_EQ(log.seen(), "sl") << "no on_resumed";
    EXPECT_GE(log.lost_at, log.deadline) << "lost at the deadline on_suspended named";
    EXPECT_TRUE(permit.lost());
    EXPECT_EQ(proxy.command("pass"), "ok\n");
}

TEST(Suspend, ANormalStopOrReleaseReportsNeither) {
    // Renewals and refreshes that succeed, then release() and stop():
    // neither on_suspended nor on_resumed.
    REQUIRE_TCP();
    FaultProxy proxy(tcp_port());
    auto db = admin();
    simba::pg::ContendServiceFactory factory(proxy.conninfo(), suspend_options("suspend-none"));
    auto a = std::make_shared<SuspendRecorder>(unique_name("suspend-none"), "A");
    auto sa = factory.create(a, lease(300ms, 300ms));
    simba::Semaphore sem(factory, "H");
    const auto t0 = SteadyClock::now();
    auto permit = sem.acquire(unique_name("suspend-none-permit"), 1, 600ms, 10000ms);
    HoldLog log;
    log.attach(permit);
    sa->start();
    ASSERT_TRUE(a->wait_for(1, 10s));
    const auto renewals = [&] {
        std::uint64_t n = 0;
        for (const auto& m : factory.metrics().mutexes) n += m.renewals;
        return n;
    };
    ASSERT_TRUE(eventually([&] { return renewals() >= 3; }, 10s));  // one every 300 ms
    // Past its first ttl: refreshes (every 200 ms) kept the permit.
    EXPECT_GT(SteadyClock::now() - t0, 600ms);
    EXPECT_FALSE(permit.lost());
    EXPECT_TRUE(permit.release());
    sa->stop();
    EXPECT_EQ(a->kinds(), (std::vector<K>{K::acquired, K::released}));
    EXPECT_EQ(suspensions(factory), 0u);
    EXPECT_EQ(log.seen(), "");
}

TEST(Suspend, ALockerIsSuspendedResumedAndThenLostForGood) {
    // A Locker hears the same: suspended, resumed with the same fence; then
    // suspended again and lost at the deadline, and (loss is final) it does
    // not take the lock back once the server is reachable again.
    REQUIRE_TCP();
    FaultProxy proxy(tcp_port());
    auto db = admin();
    simba::pg::ContendServiceFactory factory(proxy.conninfo(), suspend_options("suspend-locker"));
    const auto m = unique_name("suspend-locker");
    simba::Locker lock(factory, m, "A", lease(2000ms, 2000ms));
    HoldLog log;
    log.attach(lock);
    lock.lock();
    const auto fence = lock.fence();
    ASSERT_EQ(proxy.command("blackhole"), "ok\n");
    ASSERT_TRUE(log.wait_for(1, 10s));
    EXPECT_EQ(log.seen(), "s");
    const auto held = lock.lease();
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(log.deadline, held->deadline) << "on_suspended names the lease's deadline";
    ASSERT_EQ(proxy.command("pass"), "ok\n");
    ASSERT_TRUE(log.wait_for(2, 10s));
    EXPECT_EQ(log.seen(), "sr");
    EXPECT_EQ(lock.fence(), fence) << "the same tenure goes on";
    ASSERT_EQ(proxy.command("blackhole"), "ok\n");
    ASSERT_TRUE(log.wait_for(4, 10s));
    EXPECT_EQ(log.seen(), "srsl");
    EXPECT_GE(log.lost_at, log.deadline) << "lost at the deadline, not before";
    EXPECT_FALSE(lock.is_owner());
    ASSERT_EQ(proxy.command("pass"), "ok\n");
    ASSERT_TRUE(factory.wait_connected(10000ms));
    EXPECT_FALSE(eventually([&] { return holds_later_tenure(*db, m, "A", fence) || lock.is_owner(); }, 1000ms))
        << "the lost Locker took the lock back";
    lock.unlock();
    EXPECT_EQ(log.seen(), "srsl");
}
