// Semaphore and Permit against the throwaway cluster (test/pg-run.sh), plus
// database-semaphore's own concurrency test at full strength on the SQL API.
#include <atomic>
#include <future>
#include <thread>

#include "pg_support.hpp"

using namespace simba_test;
using simba::Permit;
using simba::Semaphore;

namespace {

/// Is the permit live on the server right now? (simba_semaphore_status
/// lists live permits only; under a session, by the session's end.)
bool live_on_server(pqxx::connection& c, const Permit& p) {
    pqxx::nontransaction tx(c);
    return tx.exec_params1("SELECT count(*) = 1 FROM simba_semaphore_status WHERE key = $1 AND fence = $2", p.key(),
                           p.fence())[0]
        .as<bool>();
}

int live_count(pqxx::connection& c, const std::string& key) {
    pqxx::nontransaction tx(c);
    return tx.exec_params1("SELECT count(*) FROM simba_semaphore_status WHERE key = $1", key)[0].as<int>();
}

/// Counts the grant attempts of one key on the server: each one updates its
/// key row (the limit), and a trigger counts those updates in a sequence.
class TryCounter {
public:
    TryCounter(pqxx::connection& c, const std::string& key) : db_(c), name_("regress_tries_" + key) {
        pqxx::nontransaction tx(db_);
        tx.exec0("CREATE SEQUENCE public." + tx.quote_name(name_));
        // The trigger runs as whoever updates the row: under the portable
        // edition its SECURITY DEFINER functions' owner, not this superuser.
        tx.exec0("GRANT USAGE ON SEQUENCE public." + tx.quote_name(name_) + " TO PUBLIC");
        tx.exec0("CREATE FUNCTION public." + tx.quote_name(name_) +
                 "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.key = " + tx.quote(key) +
                 " THEN PERFORM pg_catalog.nextval(" + tx.quote("public." + tx.quote_name(name_)) +
                 "); END IF; RETURN NEW; END $$");
        tx.exec0("CREATE TRIGGER " + tx.quote_name(name_) + " BEFORE UPDATE ON simba_semaphore FOR EACH ROW" +
                 " EXECUTE FUNCTION public." + tx.quote_name(name_) + "()");
    }
    ~TryCounter() {
        pqxx::nontransaction tx(db_);
        tx.exec0("DROP TRIGGER " + tx.quote_name(name_) + " ON simba_semaphore");
        tx.exec0("DROP FUNCTION public." + tx.quote_name(name_) + "()");
        tx.exec0("DROP SEQUENCE public." + tx.quote_name(name_));
    }
    std::int64_t count() {
        pqxx::nontransaction tx(db_);
        return tx.exec1("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public." + tx.quote_name(name_))[0]
            .as<std::int64_t>();
    }

private:
    pqxx::connection& db_;
    std::string name_;
};

}  // namespace

TEST(Semaphore, GrantsUpToPermitsWithIncreasingFences) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("sem"));
    Semaphore sem(factory, "worker-1");
    const auto key = unique_name("sem");
    std::vector<Permit> held;
    for (int i = 0; i < 3; ++i) {
        auto p = sem.try_acquire(key, 3, 10s, "job " + std::to_string(i));
        ASSERT_TRUE(p) << "permit " << i;
        if (!held.empty()) {
            EXPECT_GT(p->fence(), held.back().fence());
        }
        EXPECT_EQ(p->token().size(), 36u);
        held.push_back(std::move(*p));
    }
    EXPECT_FALSE(sem.try_acquire(key, 3, 10s)) << "a fourth permit of three";
    EXPECT_EQ(live_count(*db, key), 3);
    {
        pqxx::nontransaction tx(*db);
        auto r = tx.exec_params("SELECT holder, context FROM simba_semaphore_status WHERE key = $1 ORDER BY slot", key);
        ASSERT_EQ(r.size(), 3u);
        EXPECT_EQ(r[0][0].as<std::string>(), "worker-1");
        EXPECT_EQ(r[2][1].as<std::string>(), "job 2");
    }

    EXPECT_TRUE(held[1].release());
    EXPECT_FALSE(held[1].release()) << "release is idempotent";
    EXPECT_TRUE(held[1].lost());
    auto again = sem.try_acquire(key, 3, 10s);
    ASSERT_TRUE(again);
    EXPECT_EQ(again->slot(), held[1].slot()) << "the freed slot is reused";
    EXPECT_GT(again->fence(), held[2].fence());

    held.clear();  // destructors release
    again.reset();
    EXPECT_EQ(live_count(*db, key), 0);
}

TEST(Semaphore, AutoRefreshKeepsThePermitPastSeveralTtls) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("semrefresh"));
    Semaphore sem(factory);
    const auto key = unique_name("refresh");
    // 600 ms: with 300 ms, on a busy machine (ctest -j3), release() once
    // found the permit gone just after the watch (a keepalive late by more
    // than the 30 ms margin, presumably).
    auto p = sem.try_acquire(key, 1, 600ms);
    ASSERT_TRUE(p);
    std::atomic<bool> lost_called{false};
    p->on_lost([&] { lost_called = true; });
    // Watch it for five ttls: live on the server and in the client throughout.
    const auto until = SteadyClock::now() + 3000ms;
    int checks = 0;
    while (SteadyClock::now() < until) {
        ASSERT_FALSE(p->lost()) << "after " << checks << " checks";
        ASSERT_TRUE(live_on_server(*db, *p)) << "after " << checks << " checks";
        ++checks;
        std::this_thread::sleep_for(20ms);  // sampling period of the watch, not a wait for a condition
    }
    EXPECT_GT(checks, 40);
    EXPECT_FALSE(sem.try_acquire(key, 1, 600ms)) << "still the only permit";
    EXPECT_TRUE(p->release());
    EXPECT_FALSE(lost_called.load()) << "release is not a loss";
}

TEST(Semaphore, KilledConnectionLosesThePermitByItsDeadline) {
    LogCapture logs;
    auto root = admin();
    ScratchDatabase scratch(*root, "simba_semkill");
    const std::string conninfo = scratch.conninfo();
    auto probe = admin(conninfo);
    auto opts = test_options("semkill");
    simba::pg::ContendServiceFactory factory(conninfo, opts);
    // Given up 200 ms before the server's end (capped at ttl/10: 80 ms), not
    // the default 20 ms: a busy 2-core machine (ctest -j, TSan) delays a
    // timer's thread by tens of milliseconds; a deadline past the server's
    // end still fails the test.
    simba::SemaphoreOptions margin;
    margin.release_margin = 200ms;
    Semaphore sem(factory, simba::ContenderId::host(), margin);
    const auto key = unique_name("kill");
    // The moment of the loss is judged on simba's clock, carried over from
    // the boot clock, not by a query from on_lost: the server reads its
    // clock for that query only once it runs it, and on a fresh backend
    // under TSan on a busy machine that took longer than the default margin
    // (as in pg.KilledConnection).
    const auto offset = calibrate(*probe);
    auto p = sem.try_acquire(key, 1, 800ms);
    ASSERT_TRUE(p);

    std::promise<SteadyClock::time_point> lost;
    auto lost_at = lost.get_future();
    p->on_lost([&] { lost.set_value(SteadyClock::now()); });
    // The client's deadline, as the lost connection's suspension reports it:
    // the send time of the last grant or keepalive that got through + ttl -
    // margin. Not the grant's time + ttl: a keepalive (a third of the ttl
    // after the grant) that gets through before a slow cut moves it later
    // (pg.registered on a busy machine: on_lost 190 ms after grant + ttl).
    std::atomic<SteadyClock::time_point> deadline{SteadyClock::time_point{}};
    p->on_suspended([&](SteadyClock::time_point d) { deadline = d; });

    // Outage: nobody may connect, and the factory's backends are killed.
    scratch.cut_off(opts.application_name);
    ASSERT_EQ(lost_at.wait_for(10s), std::future_status::ready);
    const auto at = lost_at.get();
    EXPECT_TRUE(p->lost());
    ASSERT_NE(deadline.load(), SteadyClock::time_point{}) << "the lost connection suspends the permit first";
    EXPECT_LE(at, deadline.load() + 100ms) << "on_lost later than the lease deadline (+100 ms scheduling slack)";
    // The server's end of the permit (its session's, under a session);
    // nothing can refresh it during the outage. The client gave up first.
    pqxx::nontransaction tx(*probe);
    const auto end_us =
        tx.exec_params1("SELECT (extract(epoch FROM COALESCE(ss.transition_at, p.expires_at)) * 1000000)::int8"
                        "  FROM simba_semaphore_permit p LEFT JOIN simba_session_lease ss USING (session_id)"
                        " WHERE p.key = $1 AND p.fence = $2",
                        key, p->fence())[0]
            .as<std::int64_t>();
    EXPECT_LT(us(at) + offset.hi, end_us) << "the client reported the loss only after the server's expiry";
    EXPECT_GE(logs.count_containing("lost"), 1);
    EXPECT_FALSE(p->release()) << "a lost permit is not released";
}

TEST(Semaphore, OnLostNeverRunsAfterReleaseReturned) {
    // The permit is lost (its row deleted: the next refresh is refused) and
    // on_lost is still running when another thread releases: release()
    // returns only after on_lost did. Released from inside on_lost, it does
    // not wait for itself. Per-permit refreshes: under a session nothing
    // asks the server about one permit (an ended session is the loss:
    // pg.Sessions).
    LogCapture logs;
    auto db = admin();
    auto opts = test_options("semrace");
    opts.sessions = false;
    simba::pg::ContendServiceFactory factory("", opts);
    Semaphore sem(factory);
    const auto key = unique_name("race");
    auto p = sem.try_acquire(key, 1, 900ms);
    ASSERT_TRUE(p);
    std::promise<void> gate;
    auto opened = gate.get_future().share();
    std::atomic<bool> started{false}, finished{false};
    p->on_lost([&, opened] {
        started = true;
        opened.wait();
        finished = true;
    });
    {
        pqxx::nontransaction tx(*db);
        tx.exec_params("DELETE FROM simba_semaphore WHERE key = $1", key);
    }
    ASSERT_TRUE(eventually([&] { return started.load(); }, 10s));
    std::atomic<bool> returned{false};
    bool finished_when_returned = false;
    std::thread releaser([&] {
        EXPECT_FALSE(p->release());  // it was lost
        finished_when_returned = finished.load();
        returned = true;
    });
    EXPECT_FALSE(eventually([&] { return returned.load(); }, 300ms)) << "release() waits for the running on_lost";
    gate.set_value();
    releaser.join();
    EXPECT_TRUE(finished_when_returned);

    // release() from inside on_lost.
    auto q = sem.try_acquire(key, 1, 900ms);
    ASSERT_TRUE(q);
    std::promise<bool> inner;
    auto inner_result = inner.get_future();
    q->on_lost([&] { inner.set_value(q->release()); });
    {
        pqxx::nontransaction tx(*db);
        tx.exec_params("DELETE FROM simba_semaphore WHERE key = $1", key);
    }
    ASSERT_EQ(inner_result.wait_for(10s), std::future_status::ready);
    EXPECT_FALSE(inner_result.get());
}

TEST(Semaphore, AcquireWaitsAndWakesOnRelease) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("semwait"));
    simba::SemaphoreOptions slow_poll;
    slow_poll.poll_interval = 5000ms;  // only the NOTIFY can wake the waiter quickly
    Semaphore holder(factory, "holder");
    Semaphore waiter(factory, "waiter", slow_poll);
    const auto key = unique_name("wait");
    auto held = holder.try_acquire(key, 1, 10s);
    ASSERT_TRUE(held);
    ASSERT_TRUE(factory.wait_connected(5s));

    auto got = std::async(std::launch::async, [&] {
        auto p = waiter.acquire(key, 1, 10s, 10s);
        return std::make_pair(SteadyClock::now(), p.fence());
    });
    // The waiter is waiting: its first attempt found the key full.
    ASSERT_EQ(got.wait_for(300ms), std::future_status::timeout);
    const auto released_at = SteadyClock::now();
    ASSERT_TRUE(held->release());
    ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
    auto [at, fence] = got.get();
    const auto latency = at - released_at;
    EXPECT_LT(latency, 1000ms) << "woken by the backstop poll, not the NOTIFY";
    EXPECT_GT(fence, held->fence());
    std::printf("semaphore handoff: %lld us (poll interval 5 s)\n",
                (long long)std::chrono::duration_cast<std::chrono::microseconds>(latency).count());
}

TEST(Semaphore, ANotifyStormCostsAWaiterAtMostOneTryPerInterval) {
    // Any role may NOTIFY simba, '<key>': acquire() tries again for a NOTIFY
    // at most once per notify_min_interval, and the release still wakes it.
    // A database of its own: its counting trigger must not stall other tests run beside it (ctest -j).
    auto root = admin();
    ScratchDatabase scratch(*root, "semstorm");
    auto db = admin(scratch.conninfo());
    auto stranger = ungranted(*db, scratch.conninfo());
    simba::pg::ContendServiceFactory factory(scratch.conninfo(), test_options("semstorm"));
    const auto interval = simba::pg::FactoryOptions{}.notify_min_interval;
    simba::SemaphoreOptions slow_poll;
    slow_poll.poll_interval = 5000ms;  // only a NOTIFY can make the waiter try again soon
    Semaphore holder(factory, "holder");
    Semaphore waiter(factory, "waiter", slow_poll);
    const auto key = unique_name("semstorm");
    TryCounter tries(*db, key);
    auto held = holder.try_acquire(key, 1, 10s);
    ASSERT_TRUE(held);
    ASSERT_TRUE(factory.wait_connected(5s));
    auto got = std::async(std::launch::async, [&] {
        auto p = waiter.acquire(key, 1, 10s, 10s);
        return SteadyClock::now();
    });
    ASSERT_TRUE(eventually([&] { return tries.count() >= 2; }, 5s)) << "the waiter's first try";
    const auto n0 = tries.count();
    const auto t0 = SteadyClock::now();
    notify_storm(*stranger, key, 2000);
    const auto released_at = SteadyClock::now();
    ASSERT_TRUE(held->release());  // its NOTIFY comes after the storm's
    ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
    const auto acquired_at = got.get();
    const auto n1 = tries.count();
    const auto t1 = SteadyClock::now();
    const auto bound = (t1 - t0) / interval + 2;
    std::printf("semaphore storm: %lld tries in %lld ms (bound %lld); release -> acquired %lld us\n",
                static_cast<long long>(n1 - n0),
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count()),
                static_cast<long long>(bound),
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::microseconds>(acquired_at - released_at).count()));
    EXPECT_LE(n1 - n0, bound);
    EXPECT_LT(acquired_at - released_at, interval + 900ms) << "woken by the release, not the 5 s poll";
}

TEST(Semaphore, AcquireTimesOutWithoutEndingEarly) {
    auto db = admin();
    simba::pg::ContendServiceFactory factory("", test_options("semtimeout"));
    Semaphore sem(factory);
    const auto key = unique_name("timeout");
    auto held = sem.try_acquire(key, 1, 10s);
    ASSERT_TRUE(held);
    const auto start = SteadyClock::now();
    EXPECT_THROW((void)sem.acquire(key, 1, 10s, 400ms), simba::TimeoutError);
    EXPECT_GE(SteadyClock::now() - start, 400ms);
    EXPECT_EQ(live_count(*db, key), 1);
}

TEST(Semaphore, SetupMistakesAreThrownByAcquireAtOnce) {
    // A blocking acquire() with a long timeout: a setup mistake must not
    // wait it out (issue 23, bullet 2).
    auto db = admin();
    expect_setup_mistakes_thrown(*db, [](const std::string& conninfo) {
        simba::pg::ContendServiceFactory factory(conninfo, test_options("sem-setup-mistake"));
        Semaphore sem(factory, "me");
        return error_of([&] { (void)sem.acquire(unique_name("sem-setup-mistake"), 1, 2000ms, 10s); });
    });
}

TEST(Semaphore, AcquireRidesOutAKilledConnectionWithinItsTimeout) {
    // Transient faults are not setup mistakes: a waiting acquire() keeps
    // waiting through its backends killed (57P01) and reconnects refused for
    // a while, then takes the permit once it is free.
    auto root = admin();
    ScratchDatabase scratch(*root, "semretry");
    const auto opts = test_options("semretry");
    simba::pg::ContendServiceFactory holder_factory(scratch.conninfo(), test_options("semretry-holder"));
    simba::pg::ContendServiceFactory factory(scratch.conninfo(), opts);
    Semaphore holders(holder_factory, "holder");
    Semaphore waiters(factory, "waiter");
    const auto key = unique_name("retry");
    auto held = holders.try_acquire(key, 1, 5s);
    ASSERT_TRUE(held);
    ASSERT_TRUE(factory.wait_connected(5s));
    auto waiter = std::async(std::launch::async, [&] { return waiters.acquire(key, 1, 5s, 20s); });
    std::this_thread::sleep_for(200ms);
    scratch.cut_off(opts.application_name);
    std::this_thread::sleep_for(500ms);  // reconnects refused meanwhile
    scratch.refuse_connections(false);
    EXPECT_TRUE(held->release());
    ASSERT_EQ(waiter.wait_for(15s), std::future_status::ready);
    auto permit = waiter.get();  // rethrows what acquire() threw
    EXPECT_EQ(permit.key(), key);
    EXPECT_FALSE(permit.lost());
}

TEST(Semaphore, BadArgumentsAreRejectedBeforeAnyRoundTrip) {
    // No server at this address: only client-side validation can answer.
    simba::pg::ContendServiceFactory factory("host=/nonexistent-simba-socket-dir", test_options("semargs"));
    simba::SemaphoreOptions no_wait;
    no_wait.connect_wait = 100ms;
    Semaphore sem(factory, simba::ContenderId::host(), no_wait);
    auto expect_invalid = [&](auto call, const std::string& message) {
        try {
            call();
            ADD_FAILURE() << "no error for: " << message;
        } catch (const simba::InvalidArgumentError& e) {
            EXPECT_EQ(e.sqlstate(), "22023");
            EXPECT_EQ(std::string(e.what()), message);
        }
    };
    expect_invalid([&] { (void)sem.try_acquire("", 1, 1s); }, "key must not be empty");
    expect_invalid([&] { (void)sem.try_acquire(std::string(257, 'k'), 1, 1s); }, "key must be at most 256 characters");
    expect_invalid([&] { (void)sem.try_acquire("k", 0, 1s); }, "permits must be between 1 and 10000");
    expect_invalid([&] { (void)sem.try_acquire("k", 10001, 1s); }, "permits must be between 1 and 10000");
    expect_invalid([&] { (void)sem.try_acquire("k", 1, 0ms); }, "ttl must be positive");
    expect_invalid([&] { (void)sem.acquire("k", 1, 1s, 1s, std::string(257, 'c')); },
                   "context must be at most 256 characters");
    EXPECT_THROW(Semaphore(factory, ""), simba::InvalidArgumentError);
    // A valid call reaches for the (missing) server and says so.
    EXPECT_THROW((void)sem.try_acquire("k", 1, 1s), simba::ConnectionError);
}

// database-semaphore's concurrency test: 25 threads on separate connections
// start together; each tries once and holds what it got for 1 s.
namespace {

int concurrent_grants(const std::function<std::string(int)>& key_of, int permits) {
    constexpr int threads = 25;
    std::vector<std::unique_ptr<pqxx::connection>> conns;
    for (int i = 0; i < threads; ++i) conns.push_back(std::make_unique<pqxx::connection>());
    // All 25 call at once: each waits here until every connection is ready.
    std::mutex m;
    std::condition_variable cv;
    int ready = 0;
    auto arrive_and_wait = [&] {
        std::unique_lock<std::mutex> lock(m);
        if (++ready == threads) cv.notify_all();
        cv.wait(lock, [&] { return ready == threads; });
    };
    std::atomic<int> granted{0};
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; ++i) {
        workers.emplace_back([&, i] {
            pqxx::nontransaction tx(*conns[i]);
            arrive_and_wait();
            auto r = tx.exec_params1("SELECT token::text FROM simba_semaphore_acquire($1, $2, $3, '10s')", key_of(i),
                                     "thread-" + std::to_string(i), permits);
            if (r[0].is_null()) return;
            ++granted;
            std::this_thread::sleep_for(1s);  // the hold itself is the workload
            tx.exec_params("SELECT simba_semaphore_release($1, $2::uuid)", key_of(i), r[0].as<std::string>());
        });
    }
    for (auto& w : workers) w.join();
    return granted.load();
}

}  // namespace

TEST(Semaphore, TwentyFiveThreadsTwentyFourPermitsExactlyTwentyFourAcquire) {
    auto db = admin();
    const auto key = unique_name("dbsem");
    EXPECT_EQ(concurrent_grants([&](int) { return key; }, 24), 24);
    EXPECT_EQ(live_count(*db, key), 0) << "all released";
}

TEST(Semaphore, TwentyFiveThreadsOnDistinctKeysAllAcquire) {
    auto db = admin();
    const auto prefix = unique_name("dbsem-key");
    EXPECT_EQ(concurrent_grants([&](int i) { return prefix + "-" + std::to_string(i); }, 1), 25);
}
