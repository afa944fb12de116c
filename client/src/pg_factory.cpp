// simba client: the PostgreSQL ContendServiceFactory.
//
// Threads (per factory, whatever the number of services):
//  - the I/O thread owns both connections. It runs a timer queue of
//    contention attempts (one simba_acquire round trip each), listens for
//    NOTIFY simba on the second connection, processes start/stop commands
//    and reconnects with jittered, capped exponential backoff, reset only by
//    a statement that succeeded (a server that accepts connections and then
//    fails every statement is not hammered).
//  - the handle thread runs the contenders' callbacks, in order per service,
//    and fires on_released at a lease deadline by itself, so a blocked
//    statement on the I/O thread can never keep a stale owner alive.
//
// Ownership is decided by one state machine per service (lease.hpp):
// deadline = boot-clock time the granting request was SENT
//            + (transition_at - current_at) from its reply - margin.
// is_owner() compares the clock with that deadline on every call.
//
// Locking: Core::io_m guards the I/O state (connections, timers, services):
// the I/O thread holds it except while it sleeps in poll(), and a thread
// calling start_and_wait() or stop() takes it to do that service's round
// trip itself. ServiceCore::m guards a service's ownership state and its
// pending callbacks; the Executor's mutex its queues (executor.hpp);
// Core::cmd_m the command queue; the StatementWatchdog's the statement in
// flight (statement_watchdog.hpp). Lock order: io_m -> ServiceCore::m ->
// Executor, io_m -> StatementWatchdog -> Executor, and Core::metrics_m ->
// ServiceCore::m (metrics()). No thread holds a lock while running a
// callback. Metrics counters are relaxed atomics (metrics_cell.hpp), bumped
// where the state they count changes.

#include <libpq-fe.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <queue>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "conninfo.hpp"
#include "executor.hpp"
#include "lease.hpp"
#include "listen_connection.hpp"
#include "metrics_cell.hpp"
#include "notify_counts.hpp"
#include "pg_io.hpp"
#include "simba/errors.hpp"
#include "statement_watchdog.hpp"
#include "statements.hpp"
#include "simba/factory.hpp"
#include "simba/log.hpp"

namespace simba::pg {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

using namespace detail;

// ------------------------------------------------------------ service core

struct ServiceCore {
    ServiceCore(std::shared_ptr<MutexContender> c, ContendOptions o)
        : contender(std::move(c)),
          id(contender->contender_id()),
          mutex(contender->mutex()),
          options(o),
          period(id, o.jitter),
          lease(mutex, id, simba::detail::lease_margin(duration(), o.release_margin, o.clock_drift_ppm)) {}

    std::shared_ptr<MutexContender> contender;
    const std::string id;
    const std::string mutex;
    const ContendOptions options;
    ContendPeriod period;

    // Guarded by m.
    mutable std::mutex m;
    bool active = false;         // callbacks may be emitted
    simba::detail::Lease lease;  // ownership: the one place it is decided (lease.hpp)
    std::deque<std::function<void()>> pending;  // callbacks not yet run
    bool in_callback = false;    // one of them is running on the handle thread
    SteadyClock::time_point expiry_at{};  // a deadline check is queued for then ({}: none)
    std::condition_variable owner_cv;  // a tenure began, or stopped (wait_owner)
    std::uint64_t stops = 0;           // io_stop()s so far

    // I/O thread only.
    MutexOwner last;             // last owner seen from the server
    std::uint64_t timer_gen = 0;
    bool io_active = false;
    bool solo = false;           // its last attempt failed: kept out of batches until one succeeds
    bool unknown = false;        // an attempt's outcome is unknown (its reply was lost): stop() releases

    // Metrics (simba::Metrics): the cell of (mutex, id); wait_since guarded
    // by m, notified_at I/O thread only (a release NOTIFY while waiting).
    std::shared_ptr<simba::detail::MetricsCell> metrics;
    SteadyClock::time_point wait_since{};
    SteadyClock::time_point notified_at{};

    bool is_owner_now() const {
        std::lock_guard<std::mutex> lock(m);
        return lease.owns(SteadyClock::now());
    }

    /// ttl + transition: the lease one grant gives.
    SteadyClock::duration duration() const { return options.ttl + options.transition; }
};

using ServicePtr = std::shared_ptr<ServiceCore>;

// ------------------------------------------------------------------ core

struct ContendServiceFactory::Core final : detail::Io {
    Core(std::string user_conninfo, FactoryOptions o)
        : options(std::move(o)),
          conninfo(build_conninfo(user_conninfo, options)),
          listen_info(listen_conninfo_for(user_conninfo, options)) {
        if (options.batch_max < 1 || options.batch_max > 10000)
            throw InvalidArgumentError("batch_max must be between 1 and 10000", "22023");
        if (options.batch_window.count() < 0) throw InvalidArgumentError("batch_window must not be negative", "22023");
        if (options.lock_timeout.count() < 0) throw InvalidArgumentError("lock_timeout must not be negative", "22023");
        if (options.listen_ping_interval.count() <= 0)
            throw InvalidArgumentError("listen_ping_interval must be positive", "22023");
        wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (wake_fd < 0) throw Error("eventfd failed");
        backoff = options.reconnect_initial;
        stmt_timeout_ms.store(options.statement_timeout.count());
        io = std::thread([this] { io_main(); });
    }

    ~Core() override {
        shutdown();
        if (wake_fd >= 0) ::close(wake_fd);
    }

    void shutdown() {
        {
            std::lock_guard<std::mutex> lock(cmd_m);
            if (quit) return;
            quit = true;
        }
        wake();
        if (io.joinable()) io.join();
        executor.shutdown();
    }

    // ------------------------------------------------ thread-safe entry points

    bool post_io(std::function<void()> fn) {
        {
            std::lock_guard<std::mutex> lock(cmd_m);
            if (closed) return false;
            commands.push_back(std::move(fn));
        }
        wake();
        return true;
    }

    void wake() {
        std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
    }

    /// Queues a callback of `svc` (caller holds svc->m).
    void emit(const ServicePtr& svc, std::function<void()> cb) {
        if (!svc->active || !svc->contender->has_callbacks()) return;
        svc->pending.push_back(std::move(cb));
        std::weak_ptr<ServiceCore> weak = svc;
        executor.post([weak] {
            if (auto s = weak.lock()) drain_one(*s);
        });
    }

    static void drain_one(ServiceCore& s) {
        std::function<void()> cb;
        {
            std::lock_guard<std::mutex> lock(s.m);
            if (s.pending.empty()) return;
            cb = std::move(s.pending.front());
            s.pending.pop_front();
            s.in_callback = true;
        }
        try {
            cb();
        } catch (const std::exception& e) {
            log(LogLevel::error, "callback of contender " + s.id + " on mutex " + s.mutex + " threw: " + e.what());
        } catch (...) {
            log(LogLevel::error, "callback of contender " + s.id + " on mutex " + s.mutex + " threw");
        }
        std::lock_guard<std::mutex> lock(s.m);
        s.in_callback = false;
    }

    static void drain_all(ServiceCore& s) {
        for (;;) {
            {
                std::lock_guard<std::mutex> lock(s.m);
                if (s.pending.empty()) return;
            }
            drain_one(s);
        }
    }

    /// Lease deadline check, on the handle thread (caller holds svc->m). One
    /// check per service is queued at a time: a renewal moves the deadline
    /// and the queued check, finding it moved, waits again for the new one.
    void schedule_expiry(const ServicePtr& svc, SteadyClock::time_point at) {
        if (svc->expiry_at != SteadyClock::time_point{} && svc->expiry_at <= at) return;
        std::weak_ptr<ServiceCore> weak = svc;
        if (executor.post_at(at, [this, weak, at] { check_expiry(weak, at); })) svc->expiry_at = at;
    }

    void check_expiry(const std::weak_ptr<ServiceCore>& weak, SteadyClock::time_point at) {
        auto s = weak.lock();
        if (!s) return;
        {
            std::lock_guard<std::mutex> lock(s->m);
            if (s->expiry_at == at) s->expiry_at = {};  // else a check for an earlier deadline is queued too
            if (!s->lease.holding()) return;
            auto change = s->lease.expire(SteadyClock::now());
            if (!change.released) {  // renewed meanwhile
                schedule_expiry(s, s->lease.deadline());
                return;
            }
            report(s, change);
        }
        // Run it now, not behind callbacks queued meanwhile (we are on
        // the handle thread; the queued drain then finds nothing).
        drain_all(*s);
        // Logged outside the lock: the log handler is user code.
        log(LogLevel::warning, "lease of " + s->id + " on mutex " + s->mutex +
                                   " reached its deadline without a renewal: released");
    }

    /// A reply from the server for `svc` (I/O thread).
    void apply(const ServicePtr& svc, const MutexOwner& after) {
        if (!apply_locked(svc, after))
            log(LogLevel::warning, "acquire reply for " + svc->id + " on mutex " + svc->mutex +
                                       " arrived after its lease deadline; not reporting ownership");
    }

    /// Returns false if a grant came too late to be proven.
    bool apply_locked(const ServicePtr& svc, const MutexOwner& after) {
        const MutexOwner prev = std::move(svc->last);
        svc->last = after;
        svc->unknown = false;
        std::lock_guard<std::mutex> lock(svc->m);
        const auto change = svc->lease.reply(after, SteadyClock::now());
        report(svc, change, true, &prev);
        return !change.too_late;
    }

    /// Turns a Lease step into callbacks and metrics (caller holds svc->m).
    /// `lost`: a release the contender did not ask for; `prev`: the owner
    /// seen before a reply (the previous holder, for the handoff latency).
    void report(const ServicePtr& svc, const simba::detail::Lease::Change& change, bool lost = true,
                const MutexOwner* prev = nullptr) {
        using simba::detail::MetricsCell;
        auto c = svc->contender;
        auto& mc = *svc->metrics;
        const auto now = SteadyClock::now();
        if (change.renewed) MetricsCell::inc(mc.renewals);
        if (change.busy) {
            MetricsCell::inc(mc.busy);
            svc->notified_at = {};  // that release went to someone else: no handoff of ours
        }
        if (change.released) {
            if (lost) MetricsCell::inc(mc.lost);
            svc->wait_since = change.lost_at;
            emit(svc, [c, st = *change.released] { c->on_released(st); });
        }
        if (change.acquired) {
            // Acquire latency from the start of waiting; handoff from the
            // release NOTIFY we acted on, else from the previous holder's
            // lease end (server clock).
            const auto& after = change.acquired->after;
            MetricsCell::inc(mc.acquired);
            mc.acquire_latency.observe(duration_cast<microseconds>(now - svc->wait_since));
            if (svc->notified_at != SteadyClock::time_point{})
                mc.handoff_latency.observe(duration_cast<microseconds>(now - svc->notified_at));
            else if (prev && prev->has_owner() && prev->owner_id != svc->id && after.acquired_at >= prev->transition_at)
                mc.handoff_latency.observe(after.acquired_at - prev->transition_at);
            svc->notified_at = {};
            emit(svc, [c, st = *change.acquired] { c->on_acquired(st); });
            schedule_expiry(svc, svc->lease.deadline());
            svc->owner_cv.notify_all();
        }
    }

    // ------------------------------------------- detail::Io (the semaphore)

    bool run(std::function<void(pqxx::connection&)> fn,
             std::function<void(std::exception_ptr)> failed) override {
        return post_io([this, fn = std::move(fn), failed = std::move(failed)] {
            if (!up) {
                failed(std::make_exception_ptr(ConnectionError("not connected to the server", "08006")));
                return;
            }
            try {
                auto watch = watchdog.watch(stmt->sock());
                fn(*stmt);
                statement_ok();
            } catch (const std::exception& e) {
                const bool lost = statement_failed(e, "statement");
                failed(as_simba_error(e, lost));
            }
        });
    }

    bool wait_connected(SteadyClock::time_point until) override {
        std::unique_lock<std::mutex> lock(state_m);
        return simba::wait_until(state_cv, lock, until, [&] { return up_flag; });
    }

    void while_waiting() override {
        if (executor.on_this_thread()) watchdog.cut_overdue();
    }

    bool run_at(SteadyClock::time_point at, std::function<void()> fn) override {
        return post_io([this, at, fn = std::move(fn)]() mutable {
            tasks.push(Task{at, task_seq++, std::move(fn)});
        });
    }

    bool handle(std::function<void()> fn) override { return executor.post(std::move(fn)); }
    bool handle_at(SteadyClock::time_point at, std::function<void()> fn) override {
        return executor.post_at(at, std::move(fn));
    }

    void watch(const std::string& name) override { notify_counts.watch(name); }
    void unwatch(const std::string& name) override { notify_counts.unwatch(name); }
    std::uint64_t notifications(const std::string& name) override { return notify_counts.count(name); }
    bool wait_notification(const std::string& name, std::uint64_t seen, SteadyClock::time_point until) override {
        return notify_counts.wait_change(name, seen, until);
    }

    /// A library error for a failed statement, with the server's SQLSTATE.
    static std::exception_ptr as_simba_error(const std::exception& e, bool lost) {
        if (dynamic_cast<const Error*>(&e)) return std::current_exception();
        std::string msg = e.what();
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
        if (lost) return std::make_exception_ptr(ConnectionError(msg, "08006"));
        try {
            throw_sqlstate(sqlstate_of(e), msg);
        } catch (...) {
            return std::current_exception();
        }
    }

    // ------------------------------------------------------------ I/O thread

    /// A task the I/O thread runs at a time (semaphore permit refreshes).
    struct Task {
        SteadyClock::time_point at;
        std::uint64_t seq;
        std::function<void()> fn;
        bool operator>(const Task& o) const { return at != o.at ? at > o.at : seq > o.seq; }
    };

    void run_due_tasks() {
        while (!tasks.empty() && tasks.top().at <= SteadyClock::now()) {
            auto fn = std::move(const_cast<Task&>(tasks.top()).fn);
            tasks.pop();
            fn();
        }
    }

    struct Timer {
        SteadyClock::time_point at;
        std::uint64_t seq;
        std::weak_ptr<ServiceCore> svc;  // a stopped, destroyed service is not kept alive
        std::uint64_t gen;
        /// The service if this timer is still current.
        ServicePtr live() const {
            auto s = svc.lock();
            return s && s->timer_gen == gen && s->io_active ? s : nullptr;
        }
        bool operator>(const Timer& o) const { return at != o.at ? at > o.at : seq > o.seq; }
    };

    void schedule(const ServicePtr& svc, SteadyClock::time_point at) {
        timers.push(Timer{at, timer_seq++, svc, ++svc->timer_gen});
        // Each service has one current timer; the rest are cancelled ones
        // waiting to come due. Past twice the live count, drop them all.
        if (timers.size() > 2 * services.size() + 1024) {
            std::vector<Timer> live;
            live.reserve(services.size());
            while (!timers.empty()) {
                if (timers.top().live()) live.push_back(timers.top());
                timers.pop();
            }
            for (auto& t : live) timers.push(std::move(t));
        }
    }

    milliseconds retry_delay(const ServicePtr& svc) const {
        auto quarter = duration_cast<milliseconds>(svc->options.ttl / 4);
        return std::max(milliseconds(10), std::min(options.retry_delay, quarter));
    }

    /// Starts `svc`: its first attempt now, on this thread if `here` (the
    /// caller holds io_m), else from the timer queue.
    void io_start(const ServicePtr& svc, bool here = false) {
        {
            std::lock_guard<std::mutex> lock(svc->m);
            svc->active = true;
            svc->lease.start();
            svc->wait_since = SteadyClock::now();
        }
        svc->notified_at = {};
        svc->unknown = false;
        svc->io_active = true;
        svc->last = MutexOwner::none(svc->mutex);
        services.insert(svc);
        by_mutex[svc->mutex].insert(svc);
        {
            std::lock_guard<std::mutex> lock(names_m);
            ++names[svc->mutex];
        }
        update_statement_timeout();
        if (here && up)
            attempt(svc);
        else
            schedule(svc, SteadyClock::now());
    }

    void io_stop(const ServicePtr& svc) {
        svc->io_active = false;
        ++svc->timer_gen;  // cancels pending attempts
        if (services.erase(svc)) {
            std::lock_guard<std::mutex> lock(names_m);
            if (--names[svc->mutex] == 0) names.erase(svc->mutex);
        }
        auto it = by_mutex.find(svc->mutex);
        if (it != by_mutex.end()) {
            it->second.erase(svc);
            if (it->second.empty()) by_mutex.erase(it);
        }
        // Released by id whenever it may hold the lease, including when a
        // grant's reply was lost: contenders then need not wait a lease out.
        bool might_own = svc->last.is_owner(svc->id) || svc->unknown || svc->is_owner_now();
        if (might_own && up) {
            try {
                auto watch = watchdog.watch(stmt->sock());
                pqxx::nontransaction tx(*stmt);
                bool released = (options.pooled ? tx.exec_params1(kReleaseSql, svc->mutex, svc->id)
                                                : tx.exec_prepared1("simba_release", svc->mutex, svc->id))[0]
                                    .as<bool>();
                // false: the lease had ended (expired or taken over) before this release.
                simba::detail::MetricsCell::inc(released ? svc->metrics->released : svc->metrics->late_releases);
                log(LogLevel::debug, "release of " + svc->mutex + " by " + svc->id + ": " +
                                         (released ? "released" : "was not owner"));
            } catch (const std::exception& e) {
                statement_failed(e, "release of mutex " + svc->mutex);
            }
        } else if (might_own) {
            log(LogLevel::warning, "stop of " + svc->id + " on mutex " + svc->mutex +
                                       " while disconnected: the lease will lapse on the server");
        }
        end_locally(svc);
        svc->last = MutexOwner::none(svc->mutex);
        svc->unknown = false;
        update_statement_timeout();
    }

    /// Ends `svc`'s contention on this side: its tenure (on_released is
    /// queued), its callbacks, wait_owner(). Idempotent: stop() from a
    /// callback calls it before the I/O thread's io_stop() does.
    void end_locally(const ServicePtr& svc) {
        std::lock_guard<std::mutex> lock(svc->m);
        if (!svc->active) return;
        report(svc, svc->lease.stop(SteadyClock::now()), false);
        svc->active = false;
        ++svc->stops;
        svc->owner_cv.notify_all();  // wait_owner() returns: stopped
    }

    /// One attempt of `svc`: renewal if it holds the lease, else a try.
    /// Returns whether it renews (counted as an attempt otherwise).
    static bool begin_attempt(const ServicePtr& svc) {
        const bool renewing = svc->last.is_owner(svc->id) && svc->is_owner_now();
        if (!renewing) simba::detail::MetricsCell::inc(svc->metrics->attempts);
        return renewing;
    }

    /// The server's answer to an attempt sent at `anchor`.
    void finish_attempt(const ServicePtr& svc, const pqxx::row& row, SteadyClock::time_point anchor) {
        statement_ok();
        svc->solo = false;
        MutexOwner o = parse_owner(row, svc->mutex, anchor);
        apply(svc, o);
        auto now = SteadyClock::now();
        schedule(svc, now + svc->period.ensure_next_delay(o, now));
    }

    /// A failed attempt on a connection that is still up: retry soon.
    void retry_later(const ServicePtr& svc, bool renewing) {
        if (renewing) simba::detail::MetricsCell::inc(svc->metrics->renewal_failures);
        svc->solo = true;
        schedule(svc, SteadyClock::now() + retry_delay(svc));
    }

    void attempt(const ServicePtr& svc) { attempt(svc, begin_attempt(svc)); }

    void attempt(const ServicePtr& svc, bool renewing) {
        auto anchor = SteadyClock::now();
        count_statement(1);
        try {
            auto watch = watchdog.watch(stmt->sock());
            pqxx::nontransaction tx(*stmt);
            const auto ttl = static_cast<std::int64_t>(svc->options.ttl.count());
            const auto transition = static_cast<std::int64_t>(svc->options.transition.count());
            // Behind a transaction pooler a prepared statement may be on another server connection.
            auto row = options.pooled ? tx.exec_params1(kAcquireSql, svc->mutex, svc->id, ttl, transition)
                                      : tx.exec_prepared1("simba_acquire", svc->mutex, svc->id, ttl, transition);
            finish_attempt(svc, row, anchor);
        } catch (const std::exception& e) {
            if (statement_failed(e, "acquire of mutex " + svc->mutex + " by " + svc->id)) {
                svc->unknown = true;  // it may have committed
                return;  // all services are rescheduled on reconnect
            }
            retry_later(svc, renewing);
        }
    }

    /// Several attempts in one statement. If it fails on a live connection
    /// (one attempt's error aborts them all), each is sent on its own, so
    /// only the faulty one fails.
    void attempt_batch(std::vector<ServicePtr>& batch) {
        // A service whose last attempt failed goes alone: a persistent error
        // (a trigger, a grant) must not fail every batch it would join.
        auto solo = std::stable_partition(batch.begin(), batch.end(), [](const ServicePtr& s) { return !s->solo; });
        for (auto it = solo; it != batch.end() && up; ++it) attempt(*it);
        batch.erase(solo, batch.end());
        if (batch.empty() || !up) return;
        if (batch.size() == 1) return attempt(batch.front());
        std::sort(batch.begin(), batch.end(), [](const ServicePtr& a, const ServicePtr& b) { return a->mutex < b->mutex; });
        std::vector<char> renewing(batch.size());
        std::vector<char> done(batch.size(), 0);
        for (std::size_t i = 0; i < batch.size(); ++i) renewing[i] = begin_attempt(batch[i]);
        auto anchor = SteadyClock::now();
        try {
            const auto names = array_literal(batch, [](const ServicePtr& s) -> const std::string& { return s->mutex; });
            const auto ids = array_literal(batch, [](const ServicePtr& s) -> const std::string& { return s->id; });
            const auto ttls = array_literal(batch, [](const ServicePtr& s) { return std::to_string(s->options.ttl.count()); });
            const auto trs =
                array_literal(batch, [](const ServicePtr& s) { return std::to_string(s->options.transition.count()); });
            count_statement(batch.size());
            auto watch = watchdog.watch(stmt->sock());
            pqxx::nontransaction tx(*stmt);
            auto rows = options.pooled ? tx.exec_params(kAcquireBatchSql, names, ids, ttls, trs)
                                       : tx.exec_prepared("simba_acquire_batch", names, ids, ttls, trs);
            for (const auto& row : rows) {
                auto i = row[8].as<std::size_t>() - 1;
                if (i >= batch.size() || done[i]) continue;
                done[i] = 1;
                finish_attempt(batch[i], row, anchor);
            }
        } catch (const std::exception& e) {
            if (statement_failed(e, "batch of " + std::to_string(batch.size()) + " acquires")) {
                for (std::size_t i = 0; i < batch.size(); ++i)
                    if (!done[i]) batch[i]->unknown = true;  // they may have committed
                return;
            }
            log(LogLevel::warning, "sending the batch's attempts one at a time");
        }
        // Renewals first: a row another transaction holds locked (it failed
        // the batch with 55P03) then delays no owner by more than one
        // lock_timeout.
        for (const bool renewals : {true, false})
            for (std::size_t i = 0; i < batch.size(); ++i) {
                if (done[i] || static_cast<bool>(renewing[i]) != renewals) continue;
                attempt(batch[i], renewing[i]);
                if (!up) return;  // the rest are rescheduled on reconnect
            }
    }

    /// How long a statement sent now may take before the watchdog cuts it:
    /// statement_timeout and a half (at least 100 ms more).
    SteadyClock::duration statement_deadline() const {
        const milliseconds t(stmt_timeout_ms.load());
        return t + std::max(milliseconds(100), t / 2);
    }

    /// Takes io_m for a caller's round trip. On the handle thread (stop()
    /// from a callback) the queued watchdog check cannot run while we wait,
    /// so we run it: a frozen statement on the I/O thread cannot hold us.
    std::unique_lock<std::mutex> lock_io() {
        std::unique_lock<std::mutex> lock(io_m, std::defer_lock);
        if (!executor.on_this_thread()) {
            lock.lock();
            return lock;
        }
        while (!lock.try_lock()) {
            while_waiting();
            std::this_thread::sleep_for(milliseconds(5));
        }
        return lock;
    }

    void count_statement(std::size_t calls) {
        acquire_statements.fetch_add(1, std::memory_order_relaxed);
        acquire_calls.fetch_add(calls, std::memory_order_relaxed);
    }

    /// Pops the attempts due now, plus those due within their batch window,
    /// up to batch_max services (each service has one live timer).
    std::vector<ServicePtr> due_batch() {
        std::vector<ServicePtr> out;
        std::vector<Timer> later;  // inside batch_window but not inside their own (short ttl)
        const auto now = SteadyClock::now();
        const auto horizon = now + options.batch_window;
        while (!timers.empty() && out.size() < static_cast<std::size_t>(options.batch_max) &&
               timers.top().at <= horizon) {
            Timer t = timers.top();
            timers.pop();
            ServicePtr svc = t.live();
            if (!svc) continue;
            auto window = std::min<SteadyClock::duration>(options.batch_window, svc->options.ttl / 10);
            if (t.at <= now + window)
                out.push_back(std::move(svc));
            else
                later.push_back(std::move(t));
        }
        for (auto& t : later) timers.push(std::move(t));
        return out;
    }

    /// Logs a failed statement; returns true if the connection is lost.
    bool statement_failed(const std::exception& e, const std::string& what) {
        const std::string state = sqlstate_of(e);
        bool lost = dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr ||
                    state.rfind("08", 0) == 0 || state.rfind("57P", 0) == 0 || !stmt || !stmt->is_open();
        std::string msg = what + " failed";
        if (!state.empty()) msg += " (SQLSTATE " + state + ")";
        msg += ": " + std::string(e.what());
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
        log(LogLevel::error, msg);
        if (lost) connection_lost();
        return lost;
    }

    /// Both connections go: the LISTEN one must follow the statement one to
    /// whichever server it reaches next (a failover).
    void drop_connections() {
        if (std::this_thread::get_id() == io_id)
            close_listen();
        else
            listen_stale = true;  // the I/O thread may be reading it: it drops it itself
        stmt.reset();
        open_connections.store(0);
        set_up(false);
    }

    /// `up`: the statement connection; connected() also needs LISTEN ready.
    void set_up(bool v) {
        up = v;
        {
            std::lock_guard<std::mutex> lock(state_m);
            up_flag = v && (listen_info.empty() || listen_ready);
        }
        state_cv.notify_all();
    }

    void connection_lost() {
        drop_connections();
        const auto wait = next_backoff();
        log(LogLevel::error, "connection to the server lost; reconnecting in " + std::to_string(wait.count()) + " ms");
    }

    /// Schedules the next connect after a jittered backoff (half to all of
    /// it, so a fleet that lost its server does not return in step) and
    /// doubles the backoff; returns the wait.
    milliseconds next_backoff() {
        const auto half = backoff / 2;
        const auto wait = half + milliseconds(static_cast<std::int64_t>(jitter_rng() % (half.count() + 1)));
        next_connect = SteadyClock::now() + wait;
        backoff = std::min(backoff * 2, options.reconnect_max);
        return wait;
    }

    /// A statement succeeded: the server is really back, reconnects start
    /// from reconnect_initial again.
    void statement_ok() { backoff = options.reconnect_initial; }

    /// Connects the statement connection without io_m (callers' stop()
    /// meanwhile finds the factory down and returns at once; libpq bounds
    /// the wait with connect_timeout per host), then sets it up under io_m.
    void connect(std::unique_lock<std::mutex>& io_lock) {
        std::unique_ptr<pqxx::connection> fresh;
        std::string failure;
        io_lock.unlock();
        try {
            fresh = std::make_unique<pqxx::connection>(conninfo);
        } catch (const std::exception& e) {
            failure = e.what();
        }
        io_lock.lock();
        try {
            if (!fresh) throw std::runtime_error(failure);
            stmt = std::move(fresh);
            open_connections.store(1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
            stmt->inhibit_reactivation(true);  // a silent reconnect would lose our session settings
#pragma GCC diagnostic pop
            if (!options.pooled) {  // a pooler shares the session: no settings, no prepared statements
                applied_timeout_ms = -1;
                apply_statement_timeout();
                stmt->prepare("simba_acquire", kAcquireSql);
                stmt->prepare("simba_release", kReleaseSql);
                stmt->prepare("simba_acquire_batch", kAcquireBatchSql);
            }
            connects.fetch_add(1);
            set_up(true);
            listen_backoff = options.reconnect_initial;
            open_listen();
            log(LogLevel::info, "connected (" + std::to_string(services.size()) + " services)");
            // Resume: every running service attempts now.
            auto now = SteadyClock::now();
            for (auto& s : services) schedule(s, now);
        } catch (const std::exception& e) {
            std::string msg = e.what();
            while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
            drop_connections();
            const auto wait = next_backoff();
            log(LogLevel::error, "connect failed: " + msg + "; retrying in " + std::to_string(wait.count()) + " ms");
        }
    }

    void update_statement_timeout() {
        auto t = options.statement_timeout;
        for (auto& s : services) t = std::min(t, std::max(milliseconds(10), duration_cast<milliseconds>(s->duration() / 2)));
        stmt_timeout_ms.store(t.count());
        if (up && !options.pooled) {
            try {
                apply_statement_timeout();
            } catch (const std::exception& e) {
                statement_failed(e, "SET statement_timeout");
            }
        }
    }

    void apply_statement_timeout() {
        auto ms = stmt_timeout_ms.load();
        if (ms == applied_timeout_ms) return;
        const auto lock_ms = std::min<std::int64_t>(options.lock_timeout.count(), ms);
        auto watch = watchdog.watch(stmt->sock());
        pqxx::nontransaction tx(*stmt);
        tx.exec0("SET statement_timeout = " + std::to_string(ms) + "; SET lock_timeout = " + std::to_string(lock_ms));
        applied_timeout_ms = ms;
    }

    void run_commands() {
        std::deque<std::function<void()>> batch;
        {
            std::lock_guard<std::mutex> lock(cmd_m);
            batch.swap(commands);
        }
        for (auto& fn : batch) fn();
    }

    // ------------------------------------------------------ LISTEN connection

    /// Opens the LISTEN connection (I/O thread, io_m held). With the same
    /// connection string as statements it goes to the server the statement
    /// connection reached, host and port pinned: a multi-host string must
    /// not leave it on an old primary, and libpq's async connect does not
    /// move past a host that hangs.
    void open_listen() {
        if (listen_info.empty() || !up) return;
        std::string info = listen_info;
        if (options.listen_conninfo.empty()) info = pin_host(info, stmt->hostname(), stmt->port());
        const auto deadline = std::chrono::seconds(std::max(2, options.connect_timeout_s)) * host_count(info);
        if (!listen_conn.open(info, SteadyClock::now(), deadline)) listen_failed();
        open_connections.store(1 + listen_conn.is_open());
    }

    void close_listen() {
        listen_conn.close();
        listen_ready = false;
        listen_stale = false;
    }

    /// The LISTEN connection failed or missed a deadline (io_m held): the
    /// statement connection carries on; LISTEN is retried after a backoff.
    void listen_failed() {
        log(LogLevel::error, "LISTEN connection failed: " + listen_conn.error() + "; reconnecting it in " +
                                 std::to_string(listen_backoff.count()) + " ms (waiters poll meanwhile)");
        close_listen();
        set_up(up);
        listen_retry_at = SteadyClock::now() + listen_backoff;
        listen_backoff = std::min(listen_backoff * 2, options.reconnect_max);
        open_connections.store(up ? 1 : 0);
    }

    /// LISTEN is in place (io_m held). Every service attempts once more:
    /// a release (or an admin's force release) committed before LISTEN took
    /// effect sent a NOTIFY this factory never got.
    void listen_became_ready() {
        listen_ready = true;
        listen_backoff = options.reconnect_initial;
        set_up(up);
        auto now = SteadyClock::now();
        for (auto& s : services) schedule(s, now);
    }

    /// Advances the LISTEN connection after a wake-up, without io_m: only
    /// the I/O thread touches it. Leaves in `notified` the names some
    /// service of ours contends for; returns false if it failed.
    bool step_listen(short revents) {
        notified.clear();
        if (!listen_conn.step(SteadyClock::now(), revents, statement_deadline(), options.listen_ping_interval, notified))
            return false;
        notify_counts.add(notified);  // for the names someone waits on (the semaphore)
        // Most releases are of mutexes nobody here waits for (our own
        // included): those need no io_m, so they never hold up a caller.
        std::lock_guard<std::mutex> lock(names_m);
        notified.erase(std::remove_if(notified.begin(), notified.end(),
                                      [&](const std::string& n) { return names.count(n) == 0; }),
                       notified.end());
        return true;
    }

    /// Push handoff for the names read_notifications() kept (holds io_m).
    void handle_notifications() {
        auto now = SteadyClock::now();
        for (auto& name : notified) {
            auto it = by_mutex.find(name);
            if (it == by_mutex.end()) continue;
            for (auto& s : it->second) {
                // Waiters attempt at once. The owner re-checks too: the
                // NOTIFY may be an admin's simba_force_release of its tenure.
                if (!s->last.is_owner(s->id)) s->notified_at = now;
                schedule(s, now);
            }
        }
        notified.clear();
    }

    void io_main() {
        std::unique_lock<std::mutex> lock(io_m);
        next_connect = SteadyClock::now();
        io_id = std::this_thread::get_id();
        bool listen_broke = false;
        for (;;) {
            if (listen_stale) {  // a caller's thread lost the connection
                close_listen();
            } else if (listen_broke) {
                listen_failed();
            } else if (!listen_ready && listen_conn.ready()) {
                listen_became_ready();
            }
            listen_broke = false;
            if (up && !notified.empty()) handle_notifications();
            notified.clear();
            run_commands();
            {
                std::lock_guard<std::mutex> cmd(cmd_m);
                if (quit) break;
            }
            run_due_tasks();
            auto now = SteadyClock::now();
            if (!up && now >= next_connect) {
                connect(lock);
                continue;
            }
            if (up && !listen_conn.is_open() && now >= listen_retry_at) open_listen();
            // Due attempts: one batch, then commands and notifications again.
            if (up && !timers.empty() && timers.top().at <= now) {
                auto batch = due_batch();
                if (!batch.empty()) attempt_batch(batch);
            }
            // Drop cancelled timers at the top so they do not shorten the wait.
            while (!timers.empty() && !timers.top().live()) timers.pop();
            now = SteadyClock::now();
            SteadyClock::time_point until = now + std::chrono::seconds(1);
            if (up && !timers.empty()) until = std::min(until, timers.top().at);
            if (!up) until = std::min(until, next_connect);
            if (!tasks.empty()) until = std::min(until, tasks.top().at);
            if (up && !listen_info.empty() && !listen_conn.is_open()) until = std::min(until, listen_retry_at);
            until = std::min(until, listen_conn.next_step(options.listen_ping_interval));
            auto wait = duration_cast<milliseconds>(until - now);
            if (until > now && wait.count() == 0) wait = milliseconds(1);
            poll_until = now + wait;
            // Callers may do I/O work while this thread sleeps (start_now, stop).
            lock.unlock();
            // NOTIFYs for mutexes nobody here waits for (our own releases
            // among them) do not take io_m: sleep on, out of callers' way.
            for (;;) {
                const bool was_ready = listen_conn.ready();
                until = std::min(until, listen_conn.next_step(options.listen_ping_interval));
                auto left = duration_cast<milliseconds>(until - SteadyClock::now() + microseconds(999));
                auto woke = poll_once(listen_conn.sock(), listen_conn.events(), left.count());
                listen_broke = !step_listen(woke.revents);
                if (!woke.listen || woke.other || listen_broke || !notified.empty() || listen_conn.ready() != was_ready)
                    break;
            }
            lock.lock();
            poll_until = {};
        }
        // Shutdown: stop services still running, then close.
        {
            std::lock_guard<std::mutex> cmd(cmd_m);
            closed = true;
        }
        run_commands();
        std::vector<ServicePtr> left(services.begin(), services.end());
        for (auto& s : left) io_stop(s);
        drop_connections();
        io_done = true;
    }

    struct Woke {
        bool listen = false;  // `lsock` is ready
        short revents = 0;    // its poll() events
        bool other = false;   // woken (wake()), or the timeout passed
    };

    /// Sleeps until woken, `lsock` is ready for `events` or the timeout.
    Woke poll_once(int lsock, short events, std::int64_t timeout_ms) {
        pollfd fds[2];
        int n = 0;
        fds[n++] = pollfd{wake_fd, POLLIN, 0};
        if (lsock >= 0) fds[n++] = pollfd{lsock, events, 0};
        timeout_ms = std::clamp<std::int64_t>(timeout_ms, 0, 60000);
        int rc = ::poll(fds, n, static_cast<int>(timeout_ms));
        Woke w;
        if (rc <= 0) {  // timeout (or EINTR): look again
            w.other = true;
            return w;
        }
        if (fds[0].revents & POLLIN) {
            std::uint64_t v;
            [[maybe_unused]] auto r = ::read(wake_fd, &v, sizeof v);
            w.other = true;
        }
        w.revents = n > 1 ? fds[1].revents : 0;
        w.listen = w.revents != 0;
        return w;
    }

    /// After I/O work done by a caller's thread: wakes the I/O thread if it
    /// sleeps past something that is now due earlier (caller holds io_m).
    void wake_if_needed() {
        if (poll_until == SteadyClock::time_point{}) return;  // awake: it looks again before sleeping
        bool earlier = !up || (!timers.empty() && timers.top().at < poll_until);
        if (earlier) wake();
    }

    // Configuration.
    FactoryOptions options;
    std::string conninfo;
    std::string listen_info;  // empty: poll only

    Executor executor;
    StatementWatchdog watchdog{executor, [this] { return statement_deadline(); }};

    // Commands from other threads.
    std::mutex cmd_m;
    std::deque<std::function<void()>> commands;
    bool quit = false;
    bool closed = false;
    int wake_fd = -1;

    // Observable state.
    std::atomic<int> open_connections{0};
    std::atomic<std::uint64_t> connects{0};
    std::atomic<std::int64_t> stmt_timeout_ms{0};
    std::atomic<std::uint64_t> acquire_statements{0}, acquire_calls{0};
    mutable std::mutex state_m;
    mutable std::condition_variable state_cv;
    bool up_flag = false;

    // I/O state: the I/O thread's, guarded by io_m. The I/O thread holds it
    // except while it sleeps in poll(); a caller's thread takes it to start
    // or stop a service itself (a round trip without two thread hand-offs).
    // Lock order: io_m -> ServiceCore::m -> Executor::m. The handle thread
    // waiting for it runs the statement watchdog meanwhile (lock_io).
    std::mutex io_m;
    SteadyClock::time_point poll_until{};  // when the sleeping I/O thread wakes; {} while awake
    bool io_done = false;                   // the I/O thread has exited
    std::atomic<bool> listen_stale{false};  // dropped by a caller: the I/O thread closes the LISTEN connection
    std::thread::id io_id;
    // The mutexes of running services, for filtering NOTIFYs without io_m
    // (changed under io_m and names_m, read under names_m).
    std::mutex names_m;
    std::unordered_map<std::string, int> names;
    bool up = false;
    std::unique_ptr<pqxx::connection> stmt;
    ListenConnection listen_conn;           // the I/O thread's alone (read while it sleeps, without io_m)
    std::atomic<bool> listen_ready{false};  // LISTEN in place (written by the I/O thread)
    SteadyClock::time_point listen_retry_at{};
    milliseconds listen_backoff{100};
    std::vector<std::string> notified;
    std::int64_t applied_timeout_ms = -1;
    SteadyClock::time_point next_connect{};
    milliseconds backoff{100};
    std::minstd_rand jitter_rng{static_cast<std::uint_fast32_t>(ContendPeriod::random_seed())};
    std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers;
    std::uint64_t timer_seq = 0;
    std::set<ServicePtr> services;
    std::unordered_map<std::string, std::set<ServicePtr>> by_mutex;
    std::priority_queue<Task, std::vector<Task>, std::greater<Task>> tasks;
    std::uint64_t task_seq = 0;

    NotifyCounts notify_counts;  // per watched name (detail::Io::watch)

    // Metrics: the cells (metrics_cell.hpp), and the services for the
    // gauges, guarded by metrics_m.
    simba::detail::MetricCells cells;
    std::mutex metrics_m;
    std::vector<std::weak_ptr<ServiceCore>> metric_services;
    std::size_t metric_prune_at = 64;

    void track(const ServicePtr& svc) {
        svc->metrics = cells.track(svc->mutex, svc->id);
        std::lock_guard<std::mutex> lock(metrics_m);
        if (metric_services.size() >= metric_prune_at) {  // drop destroyed services, amortized O(1)
            metric_services.erase(std::remove_if(metric_services.begin(), metric_services.end(),
                                                 [](const std::weak_ptr<ServiceCore>& w) { return w.expired(); }),
                                  metric_services.end());
            metric_prune_at = std::max<std::size_t>(64, 2 * metric_services.size());
        }
        metric_services.push_back(svc);
    }

    /// The service `svc` is gone.
    void untrack(const ServicePtr& svc) { cells.untrack(svc->mutex, svc->id); }

    Metrics metrics_snapshot() {
        Metrics out;
        out.acquire_statements = acquire_statements.load(std::memory_order_relaxed);
        out.acquire_calls = acquire_calls.load(std::memory_order_relaxed);
        out.mutexes = cells.snapshot();
        std::lock_guard<std::mutex> lock(metrics_m);
        for (auto& w : metric_services) {
            auto s = w.lock();
            if (!s) continue;
            std::lock_guard<std::mutex> slock(s->m);
            if (!s->lease.owns(SteadyClock::now())) continue;
            // out.mutexes is sorted by (mutex, contender).
            auto it = std::lower_bound(out.mutexes.begin(), out.mutexes.end(), std::tie(s->mutex, s->id),
                                       [](const MutexMetrics& m, const std::tuple<const std::string&, const std::string&>& k) {
                                           return std::tie(m.mutex, m.contender) < k;
                                       });
            if (it != out.mutexes.end() && it->mutex == s->mutex && it->contender == s->id) {
                it->is_owner = true;
                it->fence = s->lease.tenure().fence;
            }
        }
        return out;
    }

    std::thread io;  // last: starts after the members above exist
};

// --------------------------------------------------------------- service

namespace {

class PgService final : public MutexContendService {
public:
    using Core = ContendServiceFactory::Core;

    PgService(std::shared_ptr<Core> core, std::shared_ptr<MutexContender> contender, ContendOptions options)
        : MutexContendService(contender), core_(std::move(core)),
          // Not make_shared: the timers and deadline checks of a stopped
          // service hold weak_ptrs until they come due, and must not pin
          // the whole ServiceCore meanwhile.
          svc_(new ServiceCore(std::move(contender), options)) {
        core_->track(svc_);
    }

    ~PgService() override {
        if (status() == Status::RUNNING) {
            try {
                stop();
            } catch (const std::exception& e) {
                log(LogLevel::error, std::string("stop in destructor failed: ") + e.what());
            }
        }
        core_->untrack(svc_);
    }

    bool is_owner() const override { return svc_->is_owner_now(); }

    std::int64_t fence() const override {
        std::lock_guard<std::mutex> lock(svc_->m);
        return svc_->lease.fence(SteadyClock::now());
    }

    MutexState state() const override {
        std::lock_guard<std::mutex> lock(svc_->m);
        return svc_->lease.reported();
    }

protected:
    void start_contend() override {
        auto core = core_;
        auto svc = svc_;
        if (!core_->post_io([core, svc] { core->io_start(svc); }))
            throw IllegalStateError("the factory of this service has shut down");
    }

    void start_contend_now() override {
        auto io = core_->lock_io();
        if (core_->io_done) throw IllegalStateError("the factory of this service has shut down");
        core_->run_commands();  // what was posted before (an earlier start()) goes first
        core_->io_start(svc_, true);
        core_->wake_if_needed();
    }

    bool wait_owner(SteadyClock::time_point until) const override {
        std::unique_lock<std::mutex> lock(svc_->m);
        // Status read under m: stop() leaves RUNNING before it counts itself
        // under m, so a stop cannot slip between this check and the wait.
        const auto st = status();
        if (st == Status::INITIAL || st == Status::STOPPING) return svc_->lease.owns(SteadyClock::now());
        const auto stops = svc_->stops;
        simba::wait_until(svc_->owner_cv, lock, until,
                          [&] { return svc_->stops != stops || svc_->lease.owns(SteadyClock::now()); });
        return svc_->lease.owns(SteadyClock::now());
    }

    void stop_contend() override {
        if (core_->executor.on_this_thread()) {
            // stop() from inside a callback: no I/O on the handle thread,
            // which runs every service's callbacks and lease deadlines and
            // the statement watchdog. The tenure ends here and now (its
            // on_released runs below, before stop() returns); the I/O thread
            // sends the release to the server.
            core_->end_locally(svc_);
            auto core = core_;
            auto svc = svc_;
            core_->post_io([core, svc] { core->io_stop(svc); });
            Core::drain_all(*svc_);
            return;
        }
        {
            // The release round trip on this thread (the I/O thread sleeps or
            // finishes its batch first).
            auto io = core_->lock_io();
            if (!core_->io_done) {
                core_->run_commands();  // what was posted before (the start() this stops) goes first
                core_->io_stop(svc_);
                core_->wake_if_needed();  // e.g. the connection was lost
            } else {
                core_->end_locally(svc_);  // no callbacks: the handle thread is gone
            }
        }
        {
            std::lock_guard<std::mutex> lock(svc_->m);
            if (svc_->pending.empty() && !svc_->in_callback) return;  // nothing can run after we return
        }
        auto barrier = std::make_shared<std::promise<void>>();
        auto bfut = barrier->get_future();
        if (core_->executor.post([barrier] { barrier->set_value(); })) bfut.wait();
        Core::drain_all(*svc_);  // only non-empty if the executor has shut down
    }

private:
    std::shared_ptr<Core> core_;
    std::shared_ptr<ServiceCore> svc_;
};

}  // namespace

// --------------------------------------------------------------- factory

ContendServiceFactory::ContendServiceFactory(std::string conninfo, FactoryOptions options)
    : core_(std::make_shared<Core>(std::move(conninfo), std::move(options))) {}

ContendServiceFactory::~ContendServiceFactory() { core_->shutdown(); }

std::unique_ptr<MutexContendService> ContendServiceFactory::create(std::shared_ptr<MutexContender> contender,
                                                                   ContendOptions options) {
    if (!contender) throw InvalidArgumentError("contender must not be null", "22004");
    options.validate();
    return std::make_unique<PgService>(core_, std::move(contender), options);
}

std::shared_ptr<detail::Io> detail::io_of(ContendServiceFactory& factory) { return factory.core_; }

int ContendServiceFactory::connection_count() const { return core_->open_connections.load(); }

bool ContendServiceFactory::connected() const {
    std::lock_guard<std::mutex> lock(core_->state_m);
    return core_->up_flag;
}

bool ContendServiceFactory::wait_connected(std::chrono::milliseconds timeout) const {
    return core_->wait_connected(SteadyClock::now() + timeout);
}

std::uint64_t ContendServiceFactory::connects() const { return core_->connects.load(); }

Metrics ContendServiceFactory::metrics() const { return core_->metrics_snapshot(); }

const std::string& ContendServiceFactory::application_name() const { return core_->options.application_name; }

std::chrono::milliseconds ContendServiceFactory::statement_timeout() const {
    return std::chrono::milliseconds(core_->stmt_timeout_ms.load());
}

}  // namespace simba::pg
