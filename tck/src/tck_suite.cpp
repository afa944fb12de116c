// simba TCK: the contract of a ContendServiceFactory backend, written once
// against the abstract interface (simba/factory.hpp) and the Backend hooks.
// Simba's five cases (start, restart, guard, multiContend, schedule) at full
// strength, then the cases where simba goes further (handoff, crash
// failover, paused owner, renewal failure, many mutexes).
//
// No sleep stands in for a condition: every wait is a predicate with a
// deadline. The few fixed-length waits are the observation windows the
// contract names ("hold for 3 s", "run for 30 s", "stops calling work").
// Timing bounds are derived from ttl/transition/jitter and printed.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <set>

#include "support.hpp"

namespace simba::tck {

using std::chrono::duration_cast;
using std::chrono::microseconds;

namespace {

std::atomic<int> g_test_seq{0};

/// Server time of steady time `t`, carried by a MutexOwner's (anchor,
/// current_at) pair. anchor is the request's send time, so this is never
/// earlier than the true server time: safe for "happened before T" checks.
ServerTime server_time_of(SteadyClock::time_point t, SteadyClock::time_point anchor, ServerTime current_at) {
    return current_at + duration_cast<microseconds>(t - anchor);
}

double ms_between(ServerTime a, ServerTime b) { return static_cast<double>((b - a).count()) / 1000.0; }


}  // namespace

void Suite::SetUp() {
    const auto& b = GetParam();
    ASSERT_TRUE(b.make_factory) << "Backend::make_factory is required";
    ASSERT_TRUE(b.read_row) << "Backend::read_row is required";
    prefix_ = "t" + std::to_string(::getpid()) + "_" + std::to_string(g_test_seq.fetch_add(1)) + "_";
}

void Suite::TearDown() {
    const auto& b = GetParam();
    if (!b.cleanup) return;
    try {
        b.cleanup(prefix_);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tck: cleanup failed: %s\n", e.what());
    }
}

std::string Suite::new_tag() { return prefix_ + std::to_string(counter_++); }

std::string Suite::new_mutex(const std::string& what) {
    return "tck-" + what + "-" + prefix_ + ContenderId::uuid().substr(0, 8);
}

// ===================================================================== 1
// start: INITIAL -> RUNNING, acquires (on_acquired), is_owner(); stop()
// fires on_released (before returning) and is_owner() turns false.
TEST_P(SimbaTck, Start) {
    const auto& b = GetParam();
    auto factory = b.make_factory(new_tag());
    const auto m = new_mutex("start");
    auto rec = std::make_shared<Recorder>(m, "start-A");
    auto svc = factory->create(rec, lease(2000ms, 1000ms));
    EXPECT_EQ(svc->status(), Status::INITIAL);
    EXPECT_FALSE(svc->is_owner());
    EXPECT_EQ(svc->fence(), 0);

    svc->start();
    EXPECT_EQ(svc->status(), Status::RUNNING);
    ASSERT_TRUE(rec->wait_count(true, 1, 10s)) << "on_acquired did not fire";
    const auto ev = rec->events().front();
    EXPECT_TRUE(ev.acquired);
    EXPECT_TRUE(ev.state.acquired("start-A"));
    EXPECT_TRUE(svc->is_owner());
    EXPECT_GT(svc->fence(), 0);
    EXPECT_EQ(svc->fence(), ev.state.after.fence);
    auto row = b.read_row(m);
    EXPECT_EQ(row.owner_id, "start-A");
    EXPECT_EQ(row.fence, ev.state.after.fence);

    svc->stop();
    EXPECT_EQ(svc->status(), Status::INITIAL);
    // stop() returns after on_released ran.
    ASSERT_EQ(rec->count(false), 1u);
    EXPECT_TRUE(rec->events().back().state.released("start-A"));
    EXPECT_FALSE(svc->is_owner());
    EXPECT_EQ(svc->fence(), 0);
    row = b.read_row(m);
    EXPECT_TRUE(row.owner_id.empty()) << "stop() did not release on the server: owner " << row.owner_id;
    EXPECT_EQ(rec->count(true), 1u);
}

// ===================================================================== 2
// restart: the same instance does the whole cycle twice; status returns to
// INITIAL each time; the second tenure has a greater fence.
TEST_P(SimbaTck, Restart) {
    const auto& b = GetParam();
    auto factory = b.make_factory(new_tag());
    const auto m = new_mutex("restart");
    auto rec = std::make_shared<Recorder>(m, "restart-A");
    auto svc = factory->create(rec, lease(2000ms, 1000ms));
    std::vector<std::int64_t> fences;
    for (std::size_t cycle = 1; cycle <= 2; ++cycle) {
        SCOPED_TRACE("cycle " + std::to_string(cycle));
        ASSERT_EQ(svc->status(), Status::INITIAL);
        svc->start();
        EXPECT_EQ(svc->status(), Status::RUNNING);
        EXPECT_THROW(svc->start(), IllegalStateError);
        ASSERT_TRUE(rec->wait_count(true, cycle, 10s));
        EXPECT_TRUE(svc->is_owner());
        fences.push_back(svc->fence());
        EXPECT_EQ(b.read_row(m).owner_id, "restart-A");
        svc->stop();
        EXPECT_EQ(svc->status(), Status::INITIAL);
        EXPECT_THROW(svc->stop(), IllegalStateError);
        EXPECT_EQ(rec->count(false), cycle);
        EXPECT_FALSE(svc->is_owner());
        EXPECT_TRUE(b.read_row(m).owner_id.empty());
    }
    const auto ev = rec->events();
    ASSERT_EQ(ev.size(), 4u);
    for (std::size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i].acquired, i % 2 == 0) << "event " << i;
    ASSERT_EQ(fences.size(), 2u);
    EXPECT_GT(fences[0], 0);
    EXPECT_GT(fences[1], fences[0]);
}

// ===================================================================== 3
// guard: an owner that does nothing keeps the lock across several TTL
// cycles (ttl 1 s, held >= 3 s): same owner, same fence, version moved on
// (renewals), is_owner() never false, no on_released.
namespace {
void guard_case(const Backend& b, ContendServiceFactory& factory, const std::string& m, milliseconds ttl,
                milliseconds transition) {
    auto rec = std::make_shared<Recorder>(m, "guard-A");
    auto svc = factory.create(rec, lease(ttl, transition));
    svc->start();
    ASSERT_TRUE(rec->wait_count(true, 1, 10s));
    const auto first = svc->state().after;
    const auto row0 = b.read_row(m);
    ASSERT_EQ(row0.owner_id, "guard-A");

    const auto until = SteadyClock::now() + 3.5 * ttl;  // 3.5 ttl cycles
    int samples = 0, not_owner = 0;
    while (SteadyClock::now() < until) {
        ++samples;
        not_owner += !svc->is_owner();
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(not_owner, 0) << "is_owner() was false in " << not_owner << " of " << samples << " samples";

    const auto now = svc->state().after;
    EXPECT_EQ(now.owner_id, "guard-A");
    EXPECT_EQ(now.fence, first.fence);
    // Renewed: the lease's end (or its session's) moved on by 2 ttl or more.
    EXPECT_GE(now.transition_at - first.transition_at, microseconds(2 * ttl)) << "fewer than 2 renewals in 3.5 ttl";
    const auto row = b.read_row(m);
    EXPECT_EQ(row.owner_id, "guard-A");
    EXPECT_EQ(row.fence, row0.fence);
    EXPECT_GE(row.transition_at - row0.transition_at, microseconds(2 * ttl));
    EXPECT_GT(row.transition_at.count(), row.current_at.count()) << "the lease on the server has lapsed";
    EXPECT_EQ(rec->count(false), 0u) << "on_released fired while the owner kept renewing";
    EXPECT_EQ(rec->count(true), 1u) << "a renewal fired on_acquired";
    std::printf("guard (ttl %lld ms, transition %lld ms): the lease end moved on %.0f ms in %.1f s, fence "
                "%lld -> %lld\n",
                static_cast<long long>(ttl.count()), static_cast<long long>(transition.count()),
                ms_between(row0.transition_at, row.transition_at), 3.5 * static_cast<double>(ttl.count()) / 1000,
                static_cast<long long>(row0.fence), static_cast<long long>(row.fence));
    svc->stop();
    EXPECT_EQ(rec->count(false), rec->count(true));
}
}  // namespace

TEST_P(SimbaTck, Guard) {
    const auto& b = GetParam();
    auto factory = b.make_factory(new_tag());
    guard_case(b, *factory, new_mutex("guard"), 1000ms, 1000ms);
}

// Guard with transition = 0: ttl_at is then the lease's end, so the owner
// must renew before it (a client that renews at ttl_at loses the lock every
// ttl, re-acquiring with a new fence: the TCK found exactly that bug).
TEST_P(SimbaTck, GuardZeroTransition) {
    const auto& b = GetParam();
    auto factory = b.make_factory(new_tag());
    guard_case(b, *factory, new_mutex("guard0"), 1000ms, 0ms);
}

// ===================================================================== 4
// multiContend: 10 services on one mutex for 30 s (SIMBA_TCK_MULTI_SECONDS),
// short leases, random stops and starts (mostly of the owner). A shared
// counter is exactly 1 after every on_acquired and 0 after every
// on_released; at the end exactly one owner and every service (and the
// server) agrees on who; fences seen by successive owners strictly increase.
TEST_P(SimbaTck, MultiContend) {
    const auto& b = GetParam();
    auto factory = b.make_factory(new_tag());
    const auto m = new_mutex("multi");
    constexpr int kServices = 10;
    const auto opts = lease(800ms, 400ms);

    std::mutex fm;
    std::vector<std::int64_t> fences;  // in on_acquired order
    std::atomic<int> counter{0}, violations{0}, acquisitions{0};
    std::vector<std::shared_ptr<Recorder>> recs;
    std::vector<std::unique_ptr<MutexContendService>> svcs;
    for (int i = 0; i < kServices; ++i) {
        auto r = std::make_shared<Recorder>(m, "multi-" + std::to_string(i));
        r->hook = [&](bool acquired, const MutexState& s) {
            if (acquired) {
                if (counter.fetch_add(1) + 1 != 1) violations.fetch_add(1);
                acquisitions.fetch_add(1);
                std::lock_guard<std::mutex> lock(fm);
                fences.push_back(s.after.fence);
            } else if (counter.fetch_sub(1) - 1 != 0) {
                violations.fetch_add(1);
            }
        };
        recs.push_back(r);
        svcs.push_back(factory->create(r, opts));
    }
    for (auto& s : svcs) s->start();

    const auto seed = std::random_device{}();
    std::printf("multiContend: seed %u\n", seed);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> pause_ms(150, 700);
    std::uniform_real_distribution<double> coin(0, 1);
    int owner_stops = 0, other_stops = 0, starts = 0;
    const char* length = std::getenv("SIMBA_TCK_MULTI_SECONDS");
    const auto end = SteadyClock::now() + std::chrono::seconds(length ? std::max(5, std::atoi(length)) : 30);
    while (SteadyClock::now() < end && violations.load() == 0) {
        std::this_thread::sleep_for(milliseconds(pause_ms(rng)));  // the random schedule itself
        // Restart some of the stopped ones.
        for (auto& s : svcs)
            if (s->status() == Status::INITIAL && coin(rng) < 0.5) {
                s->start();
                ++starts;
            }
        std::vector<int> owners, others;
        for (int i = 0; i < kServices; ++i) {
            if (svcs[i]->status() != Status::RUNNING) continue;
            (svcs[i]->is_owner() ? owners : others).push_back(i);
        }
        ASSERT_LE(owners.size(), 1u) << "two services report is_owner() at once";
        if (!owners.empty() && coin(rng) < 0.8) {
            svcs[owners[0]]->stop();
            ++owner_stops;
        }
        if (!others.empty() && coin(rng) < 0.2) {
            svcs[others[std::uniform_int_distribution<std::size_t>(0, others.size() - 1)(rng)]]->stop();
            ++other_stops;
        }
    }
    EXPECT_EQ(violations.load(), 0) << "the counter was not 1 after on_acquired / 0 after on_released";

    for (auto& s : svcs)
        if (s->status() == Status::INITIAL) s->start();
    // Settles within one lease plus jitter (the last owner renews; the
    // others see it at their next poll).
    std::string owner;
    const bool settled = eventually(
        [&] {
            int n = 0;
            for (auto& s : svcs)
                if (s->is_owner()) {
                    ++n;
                    owner = s->contender_id();
                }
            if (n != 1) return false;
            for (auto& s : svcs)
                if (s->state().after.owner_id != owner) return false;
            return b.read_row(m).owner_id == owner;
        },
        15s);
    ASSERT_TRUE(settled) << "no single owner every service and the server agree on";
    EXPECT_EQ(violations.load(), 0);
    EXPECT_EQ(counter.load(), 1);
    {
        std::lock_guard<std::mutex> lock(fm);
        for (std::size_t i = 1; i < fences.size(); ++i)
            EXPECT_GT(fences[i], fences[i - 1]) << "fence of owner #" << i << " did not increase";
    }
    for (auto& r : recs) {  // per service: acquired, released, acquired, ...
        auto ev = r->events();
        for (std::size_t i = 0; i < ev.size(); ++i)
            EXPECT_EQ(ev[i].acquired, i % 2 == 0) << r->contender_id() << " event " << i;
    }
    EXPECT_GE(acquisitions.load(), 15) << "too few ownership changes to exercise contention";
    std::printf("multiContend: %d acquisitions, %d owner stops, %d other stops, %d restarts; final owner %s\n",
                acquisitions.load(), owner_stops, other_stops, starts, owner.c_str());
    for (auto& s : svcs) s->stop();
    EXPECT_EQ(counter.load(), 0);
    EXPECT_EQ(violations.load(), 0);
}

// ===================================================================== 5
// schedule: a Scheduler with a 1 s fixed delay calls work within 5 s of
// start, only while leader (the server agrees), and stops calling it after
// stop().
TEST_P(SimbaTck, Schedule) {
    const auto& b = GetParam();
    auto factory = b.make_factory(new_tag());
    const auto m = new_mutex("schedule");
    std::mutex wm;
    std::vector<SteadyClock::time_point> runs;
    std::atomic<int> not_leader{0}, server_disagrees{0};
    Scheduler* self = nullptr;
    Scheduler sched(
        *factory, m, ScheduleConfig::fixed_delay(0ms, 1000ms),
        [&] {
            const auto t = SteadyClock::now();
            if (!self || !self->is_leader()) not_leader.fetch_add(1);
            const auto row = b.read_row(m);
            if (row.owner_id != "schedule-A" || row.transition_at <= row.current_at) server_disagrees.fetch_add(1);
            std::lock_guard<std::mutex> lock(wm);
            runs.push_back(t);
        },
        "schedule-A", lease(2000ms, 1000ms));
    self = &sched;
    auto count = [&] {
        std::lock_guard<std::mutex> lock(wm);
        return runs.size();
    };
    const auto t0 = SteadyClock::now();
    sched.start();
    ASSERT_TRUE(eventually([&] { return count() >= 1; }, 5s)) << "work was not called within 5 s of start";
    ASSERT_TRUE(eventually([&] { return count() >= 3; }, 10s));
    EXPECT_TRUE(sched.is_leader());
    sched.stop();
    EXPECT_FALSE(sched.is_leader());
    EXPECT_EQ(sched.status(), Status::INITIAL);
    const auto n = count();
    const auto t_stop = SteadyClock::now();
    EXPECT_TRUE(b.read_row(m).owner_id.empty()) << "stop() did not give up leadership on the server";
    // Observation window of 2.5 periods: no call after stop().
    while (SteadyClock::now() < t_stop + 2500ms) std::this_thread::sleep_for(50ms);
    EXPECT_EQ(count(), n) << "work called after stop()";
    EXPECT_EQ(not_leader.load(), 0) << "work ran while is_leader() was false";
    EXPECT_EQ(server_disagrees.load(), 0) << "work ran while the server did not show this leader";
    std::lock_guard<std::mutex> lock(wm);
    std::printf("schedule: first run %.1f ms after start, %zu runs\n", ms_of(runs.front() - t0), runs.size());
    EXPECT_LE(ms_of(runs.front() - t0), 5000.0);
    for (std::size_t i = 1; i < runs.size(); ++i)
        EXPECT_GE(ms_of(runs[i] - runs[i - 1]), 1000.0) << "fixed delay of 1 s not respected between runs " << i - 1
                                                 << " and " << i;
}

// ===================================================================== 6
// handoff: on release a waiting contender (another client) acquires at
// once, not at its next poll. 100 handoffs with ttl 4 s / transition 2 s: a
// waiter's poll comes >= 5.8 s after the owner's grant, so a polling-only
// backend fails every bound below.
TEST_P(SimbaTck, Handoff) {
    const auto& b = GetParam();
    auto fa = b.make_factory(new_tag());
    auto fb = b.make_factory(new_tag());
    const auto m = new_mutex("handoff");
    const auto opts = lease(4000ms, 2000ms);
    const auto poll_min = opts.ttl + opts.transition + opts.jitter.normal.min;  // earliest poll after a grant
    auto ra = std::make_shared<Recorder>(m, "handoff-A");
    auto rb = std::make_shared<Recorder>(m, "handoff-B");
    auto sa = fa->create(ra, opts);
    auto sb = fb->create(rb, opts);
    sa->start();
    ASSERT_TRUE(ra->wait_count(true, 1, 10s));
    sb->start();

    struct Side {
        std::shared_ptr<Recorder> rec;
        MutexContendService* svc;
    };
    Side owner{ra, sa.get()}, waiter{rb, sb.get()};
    std::vector<double> latencies;
    int before_poll = 0;
    std::int64_t last_fence = sa->fence();
    constexpr int kHandoffs = 100;
    for (int i = 0; i < kHandoffs; ++i) {
        SCOPED_TRACE("handoff " + std::to_string(i));
        // The waiter has attempted and seen the owner: its next poll is scheduled.
        ASSERT_TRUE(eventually([&] { return waiter.svc->state().after.owner_id == owner.rec->contender_id(); }, 10s));
        const auto poll_at = waiter.svc->state().after.transition_deadline() + opts.jitter.normal.min;
        const auto n = waiter.rec->count(true);
        const auto t0 = SteadyClock::now();
        owner.svc->stop();
        ASSERT_TRUE(waiter.rec->wait_count(true, n + 1, 15s)) << "the waiter never acquired";
        const auto ev = waiter.rec->events().back();
        ASSERT_TRUE(ev.acquired);
        latencies.push_back(ms_of(ev.at - t0));
        before_poll += ev.at < poll_at;
        EXPECT_GT(ev.state.after.fence, last_fence);
        last_fence = ev.state.after.fence;
        ASSERT_LT(ms_of(ev.at - t0), 2000.0) << "handoff took " << ms_of(ev.at - t0) << " ms (poll period ~"
                                      << ms_of(poll_min) << " ms): a polling-only client?";
        owner.svc->start();
        std::swap(owner, waiter);
    }
    const auto p = percentiles(latencies);
    std::printf("handoff (release -> on_acquired, %d handoffs across two clients): p50 %.2f ms, p95 %.2f ms, "
                "max %.2f ms, mean %.2f ms; earliest poll %.0f ms after a grant\n",
                kHandoffs, p.p50, p.p95, p.max, p.mean, ms_of(poll_min));
    RecordProperty("handoff_p50_ms", std::to_string(p.p50));
    RecordProperty("handoff_p95_ms", std::to_string(p.p95));
    RecordProperty("handoff_max_ms", std::to_string(p.max));
    // Bounds: 1/60 and 1/24 of the lease. A waiter acquiring at its poll
    // needs >= 5.8 s.
    EXPECT_LT(p.p50, 100.0);
    EXPECT_LT(p.p95, 250.0);
    EXPECT_EQ(before_poll, kHandoffs) << "some handoffs came from the poll, not the release";
    sa->stop();
    sb->stop();
}

// ===================================================================== 7
// crash failover: the owner's process is SIGKILLed; another contender
// acquires no earlier than the owner's transition_at (server clock) and no
// later than transition_at + jitter max + 1 s, with a greater fence.
TEST_P(SimbaTck, CrashFailover) {
    const auto& b = GetParam();
    const auto m = new_mutex("crash");
    const auto ttl = 2000ms, transition = 1000ms;
    Worker a(b, m, "crash-A", new_tag(), ttl, transition);
    const auto acq = a.wait_kind("acquired", 15s);
    ASSERT_EQ(acq.kind, "acquired") << "the worker never acquired";

    auto factory = b.make_factory(new_tag());
    auto rb = std::make_shared<Recorder>(m, "crash-B");
    const auto opts = lease(ttl, transition);
    auto sb = factory->create(rb, opts);
    sb->start();
    ASSERT_TRUE(eventually([&] { return sb->state().after.owner_id == "crash-A"; }, 10s));

    const auto t_kill = SteadyClock::now();
    a.signal(SIGKILL);
    const int st = a.wait_exit(5s);
    ASSERT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    // The final lease of the dead owner: read until a renewal (or
    // keepalive) that was in flight at the kill can no longer land (the
    // row and its lease end stay put).
    ServerRow row = b.read_row(m), again;
    for (int i = 0; i < 100; ++i) {
        std::this_thread::sleep_for(50ms);
        again = b.read_row(m);
        if (again.version == row.version && again.transition_at == row.transition_at) break;
        row = again;
    }
    ASSERT_EQ(row.owner_id, "crash-A") << "the lease had already moved on";
    const auto jitter_max = microseconds(opts.jitter.normal.max);
    ASSERT_TRUE(rb->wait_count(true, 1, ttl + transition + 10s)) << "nobody took over from the dead owner";
    const auto ev = rb->events().front();
    const auto granted = ev.state.after.acquired_at;
    std::printf("crash failover: B granted %.1f ms after the dead owner's transition_at (bound [0, %.0f]); "
                "kill -> B.on_acquired %.1f ms (ttl %lld ms + transition %lld ms)\n",
                ms_between(row.transition_at, granted), ms_of(jitter_max + 1s), ms_of(ev.at - t_kill),
                static_cast<long long>(ttl.count()), static_cast<long long>(transition.count()));
    EXPECT_GE(granted.count(), row.transition_at.count()) << "acquired before the dead owner's lease ended";
    EXPECT_LE(granted.count(), (row.transition_at + jitter_max + microseconds(1s)).count()) << "failover slower than the contract";
    EXPECT_GT(ev.state.after.fence, row.fence);
    EXPECT_TRUE(sb->is_owner());
    sb->stop();
}

// ===================================================================== 8
// paused owner: the owner's process is SIGSTOPped past its lease, another
// takes over, then SIGCONT: it reports on_released (or is_owner() false)
// without acting on the old tenure again, and the fence check with its old
// fence fails (while the new owner's passes).
TEST_P(SimbaTck, PausedOwner) {
    const auto& b = GetParam();
    ASSERT_TRUE(b.fence_check) << "Backend::fence_check is required";
    const auto m = new_mutex("paused");
    const auto ttl = 1000ms, transition = 1000ms;
    const auto tag_a = new_tag(), tag_b = new_tag();
    Worker a(b, m, "paused-A", tag_a, ttl, transition);
    const auto acq = a.wait_kind("acquired", 15s);
    ASSERT_EQ(acq.kind, "acquired");
    const auto fence_a = acq.num("fence");
    ASSERT_EQ(a.wait_kind("acting", 5s).kind, "acting");
    EXPECT_EQ(b.fence_check(tag_a, m, "paused-A", fence_a), "") << "the live owner's fence check failed";

    auto factory = b.make_factory(tag_b);
    auto rb = std::make_shared<Recorder>(m, "paused-B");
    auto sb = factory->create(rb, lease(ttl, transition));
    sb->start();
    ASSERT_TRUE(eventually([&] { return sb->state().after.owner_id == "paused-A"; }, 10s));

    const auto t_stop = SteadyClock::now();
    a.signal(SIGSTOP);
    ASSERT_TRUE(rb->wait_count(true, 1, ttl + transition + 10s)) << "nobody took over from the paused owner";
    const auto b_acq = rb->events().front();
    const auto fence_b = b_acq.state.after.fence;
    EXPECT_GT(fence_b, fence_a);
    const auto stale = b.fence_check(tag_a, m, "paused-A", fence_a);
    EXPECT_NE(stale, "") << "fence check with the paused owner's fence passed after a takeover";

    const auto t_cont = SteadyClock::now();
    a.signal(SIGCONT);
    const auto gave_up = a.wait_for(
        [&](const Worker::Event& e) {
            return (e.kind == "released" && e.num("fence") == fence_a) || (e.kind == "idle" && e.t() >= t_cont);
        },
        5s);
    ASSERT_FALSE(gave_up.kind.empty()) << "the resumed owner never reported losing the lock";
    // Let the resumed process run while B holds (B renews every second).
    while (SteadyClock::now() < t_cont + 1500ms) std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(sb->is_owner());
    int acted_late = 0;
    for (auto& e : a.events("acting")) {
        if (e.t() >= t_cont || e.t() >= b_acq.at) ++acted_late;
    }
    EXPECT_EQ(acted_late, 0) << "the paused owner acted after it resumed / after the takeover";
    EXPECT_TRUE(a.events("acquired").size() == 1u) << "the resumed owner re-acquired while B held the lock";
    const auto released = a.events("released");
    EXPECT_FALSE(released.empty()) << "no on_released after resuming";
    const auto stale2 = b.fence_check(tag_a, m, "paused-A", fence_a);
    EXPECT_NE(stale2, "") << "fence check with the old fence passed after the owner resumed";
    EXPECT_EQ(b.fence_check(tag_b, m, "paused-B", fence_b), "") << "the new owner's fence check failed";
    std::printf("paused owner: stopped %.0f ms; B acquired %.0f ms after SIGSTOP; A reported '%s' %.1f ms after "
                "SIGCONT; stale fence check: %s\n",
                ms_of(t_cont - t_stop), ms_of(b_acq.at - t_stop), gave_up.kind.c_str(),
                ms_of(gave_up.t() - t_cont), stale.c_str());
    a.signal(SIGTERM);
    EXPECT_NE(a.wait_exit(10s), -1);
    sb->stop();
}

// ===================================================================== 9
// renewal failure: the owner's server connections are terminated (and its
// reconnects refused), so renewals fail: it reports on_released by its lease
// deadline and never acts past it; another process takes over; judged
// against the mutex history the test samples from the server, no two
// processes ever reported or used ownership at overlapping server times.
TEST_P(SimbaTck, RenewalFailure) {
    const auto& b = GetParam();
    ASSERT_TRUE(b.cut_off_client && b.restore_client) << "Backend::cut_off_client/restore_client are required";
    const auto m = new_mutex("renewal");
    const auto ttl = 1000ms, transition = 1000ms;
    const auto tolerance = microseconds(100ms);  // callback scheduling on a busy machine
    HistorySampler history(b, m, 5ms);
    Worker a(b, m, "renewal-A", new_tag(), ttl, transition);
    const auto acq_a = a.wait_kind("acquired", 15s);
    ASSERT_EQ(acq_a.kind, "acquired");
    const auto fence_a = acq_a.num("fence");
    Worker w(b, m, "renewal-B", new_tag(), ttl, transition);
    ASSERT_EQ(w.wait_kind("ready", 15s).kind, "ready");
    // A has renewed at least once (its lease, or its session's, was extended).
    ASSERT_TRUE(eventually([&] { return b.read_row(m).transition_at.count() > acq_a.num("transition_at"); }, 5s));

    const auto t_cut = SteadyClock::now();
    b.cut_off_client(a.tag());
    const auto rel = a.wait_for([&](const Worker::Event& e) { return e.kind == "released"; }, ttl + transition + 5s);
    ASSERT_EQ(rel.kind, "released") << "no on_released after the owner's connections were terminated";
    const auto acq_b = w.wait_kind("acquired", ttl + transition + 10s);
    ASSERT_EQ(acq_b.kind, "acquired") << "nobody took over";
    b.restore_client(a.tag());
    // A is back (reconnected) and contends while B holds.
    ASSERT_TRUE(eventually([&] { return b.server_connections(a.tag()) >= 1; }, 10s));
    const auto t_back = SteadyClock::now();
    while (SteadyClock::now() < t_back + 1500ms) std::this_thread::sleep_for(20ms);
    history.stop();

    // --- the server's history: tenures never overlap, fences increase.
    const auto tenures = history.tenures();
    ASSERT_GE(tenures.size(), 2u);
    std::map<std::int64_t, HistorySampler::Tenure> by_fence;
    for (std::size_t i = 0; i < tenures.size(); ++i) {
        by_fence[tenures[i].fence] = tenures[i];
        if (i == 0) continue;
        EXPECT_GT(tenures[i].fence, tenures[i - 1].fence);
        EXPECT_GE(tenures[i].acquired_at.count(), tenures[i - 1].transition_at.count())
            << "server history: fence " << tenures[i].fence << " granted before fence " << tenures[i - 1].fence
            << "'s lease ended";
    }
    ASSERT_TRUE(by_fence.count(fence_a));
    const auto deadline_a = by_fence[fence_a].transition_at;  // the server's last word on A's lease

    // --- A: on_released by the lease deadline, never acting past it.
    EXPECT_EQ(rel.num("fence"), fence_a);
    const auto rel_srv = server_time_of(rel.t(), rel.steady("anchor"), rel.server("current_at"));
    std::printf("renewal failure: A cut off; on_released at server time deadline%+.1f ms (%.0f ms after the cut); "
                "B granted deadline%+.1f ms\n",
                ms_between(deadline_a, rel_srv), ms_of(rel.t() - t_cut),
                ms_between(deadline_a, acq_b.server("acquired_at")));
    EXPECT_LE(rel_srv.count(), (deadline_a + tolerance).count()) << "on_released came after the lease deadline";

    // --- every process's ownership, mapped to server time, inside its tenure.
    struct Use {
        std::string who;
        std::int64_t fence;
        ServerTime from, to;
    };
    std::vector<Use> uses;
    for (Worker* p : {&a, &w}) {
        // Granted = reported by the process's own on_acquired, wherever it
        // falls in its log: is_owner() turns true as the grant is applied,
        // the callback follows on the handle thread, so a worker polling
        // is_owner() may act a moment before "acquired" is written.
        std::set<std::int64_t> granted;
        for (auto& e : p->events())
            if (e.kind == "acquired") {
                granted.insert(e.num("fence"));
                uses.push_back({p->id(), e.num("fence"), e.server("acquired_at"), e.server("acquired_at")});
            }
        for (auto& e : p->events()) {
            if (e.kind != "acting") continue;
            if (!granted.count(e.num("fence"))) {
                ADD_FAILURE() << p->id() << " acted with fence " << e.num("fence") << " it never acquired";
                continue;
            }
            // Mapped with the renewal in force: never earlier than the truth.
            const auto at = server_time_of(e.t(), e.steady("anchor"), e.server("current_at"));
            for (auto& u : uses)
                if (u.who == p->id() && u.fence == e.num("fence")) u.to = std::max(u.to, at);
        }
    }
    for (auto& u : uses) {
        ASSERT_TRUE(by_fence.count(u.fence)) << u.who << " fence " << u.fence << " not in the server history";
        const auto& t = by_fence[u.fence];
        EXPECT_EQ(t.owner_id, u.who) << "fence " << u.fence;
        // Renewals move acquired_at forward, and the sampler may first see a
        // tenure after one: the grant is no later than its first sample, and
        // no earlier than the end of the tenure before it.
        EXPECT_LE(u.from.count(), t.acquired_at.count()) << "fence " << u.fence;
        auto before = by_fence.find(u.fence);
        if (before != by_fence.begin()) {
            EXPECT_GE(u.from.count(), std::prev(before)->second.transition_at.count())
                << u.who << " granted fence " << u.fence << " before the previous tenure's lease ended";
        }
        EXPECT_LT(u.to.count(), t.transition_at.count()) << u.who << " acted with fence " << u.fence << " "
                                         << ms_between(t.transition_at, u.to) << " ms past its lease";
    }
    for (std::size_t i = 0; i < uses.size(); ++i)
        for (std::size_t j = i + 1; j < uses.size(); ++j) {
            if (uses[i].who == uses[j].who) continue;
            const bool disjoint = uses[i].to < uses[j].from || uses[j].to < uses[i].from;
            EXPECT_TRUE(disjoint) << uses[i].who << " (fence " << uses[i].fence << ") and " << uses[j].who
                                  << " (fence " << uses[j].fence << ") owned at overlapping server times";
        }
    EXPECT_EQ(a.events("acquired").size(), 1u) << "A re-acquired while B held the lock";
    EXPECT_GT(acq_b.num("fence"), fence_a);
    EXPECT_GE(acq_b.server("acquired_at").count(), deadline_a.count());
    a.signal(SIGTERM);
    w.signal(SIGTERM);
    EXPECT_NE(a.wait_exit(10s), -1);
    EXPECT_NE(w.wait_exit(10s), -1);
}

// ==================================================================== 10
// many mutexes: 200 mutexes x 5 contenders in one process: every mutex ends
// with exactly one owner (never two), all its contenders and the server
// agree, and the process holds only the factory's fixed connections.
TEST_P(SimbaTck, ManyMutexes) {
    const auto& b = GetParam();
    ASSERT_TRUE(b.server_connections) << "Backend::server_connections is required";
    ASSERT_GT(b.fixed_connections, 0);
    const auto tag = new_tag();
    auto factory = b.make_factory(tag);
    constexpr int kMutexes = 200, kPer = 5;
    const auto base = new_mutex("many");
    struct PerMutex {
        std::atomic<int> held{0}, violations{0};
    };
    std::vector<PerMutex> per(kMutexes);
    std::vector<std::unique_ptr<MutexContendService>> svcs;
    for (int i = 0; i < kMutexes; ++i)
        for (int j = 0; j < kPer; ++j) {
            auto r = std::make_shared<Recorder>(base + "-" + std::to_string(i),
                                                "many-" + std::to_string(i) + "-" + std::to_string(j));
            auto* pm = &per[static_cast<std::size_t>(i)];
            r->hook = [pm](bool acquired, const MutexState&) {
                if (acquired ? pm->held.fetch_add(1) != 0 : pm->held.fetch_sub(1) != 1) pm->violations.fetch_add(1);
            };
            svcs.push_back(factory->create(r, ContendOptions{}));
        }
    const auto t0 = SteadyClock::now();
    for (auto& s : svcs) s->start();
    int max_conns = 0;
    auto all_owned = [&] {
        for (int i = 0; i < kMutexes; ++i) {
            int n = 0;
            for (int j = 0; j < kPer; ++j) n += svcs[static_cast<std::size_t>(i * kPer + j)]->is_owner();
            if (n != 1) return false;
        }
        return true;
    };
    const bool owned = eventually(
        [&] {
            max_conns = std::max(max_conns, b.server_connections(tag));
            return all_owned();
        },
        60s);
    const auto took = SteadyClock::now() - t0;
    ASSERT_TRUE(owned) << "not every mutex has exactly one owner";
    // Every contender has seen its mutex's owner, and the server agrees.
    ASSERT_TRUE(eventually(
        [&] {
            for (int i = 0; i < kMutexes; ++i) {
                std::string owner;
                for (int j = 0; j < kPer; ++j) {
                    auto& s = svcs[static_cast<std::size_t>(i * kPer + j)];
                    if (s->is_owner()) owner = s->contender_id();
                }
                for (int j = 0; j < kPer; ++j)
                    if (svcs[static_cast<std::size_t>(i * kPer + j)]->state().after.owner_id != owner) return false;
            }
            return true;
        },
        30s));
    int server_mismatch = 0;
    for (int i = 0; i < kMutexes; ++i) {
        std::string owner;
        for (int j = 0; j < kPer; ++j) {
            auto& s = svcs[static_cast<std::size_t>(i * kPer + j)];
            if (s->is_owner()) owner = s->contender_id();
        }
        server_mismatch += b.read_row(base + "-" + std::to_string(i)).owner_id != owner;
    }
    EXPECT_EQ(server_mismatch, 0);
    // Exactly the fixed connections, once any reconnect under load is done
    // (a LISTEN connection late to a busy server); never more at any time.
    int conns = 0;
    eventually(
        [&] {
            conns = b.server_connections(tag);
            max_conns = std::max(max_conns, conns);
            return conns == b.fixed_connections;
        },
        10s);
    std::printf("many mutexes: %d x %d services owned in %.0f ms; server connections %d (max seen %d, fixed %d)\n",
                kMutexes, kPer, ms_of(took), conns, max_conns, b.fixed_connections);
    EXPECT_EQ(conns, b.fixed_connections);
    EXPECT_LE(max_conns, b.fixed_connections);
    for (auto& s : svcs) s->stop();
    int violations = 0, held = 0;
    for (auto& p : per) {
        violations += p.violations.load();
        held += p.held.load();
    }
    EXPECT_EQ(violations, 0) << "a mutex had two owners reported at once";
    EXPECT_EQ(held, 0);
    EXPECT_EQ(b.server_connections(tag), b.fixed_connections);
}

}  // namespace simba::tck
