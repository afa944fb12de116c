// simba client: the PostgreSQL ContendServiceFactory.
//
// Threads (per factory, whatever the number of services):
//  - the I/O thread owns both connections. It runs a timer queue of
//    contention attempts (one simba_acquire round trip each), listens for
//    NOTIFY simba on the second connection, processes start/stop commands
//    and reconnects with capped exponential backoff.
//  - the handle thread runs the contenders' callbacks, in order per service,
//    and fires on_released at a lease deadline by itself, so a blocked
//    statement on the I/O thread can never keep a stale owner alive.
//
// Lease deadline = steady time the granting request was SENT
//                  + (transition_at - current_at) from its reply.
// is_owner() compares the steady clock with that deadline on every call.
//
// Locking: ServiceCore::m guards a service's ownership state and its pending
// callbacks; Executor::m guards the handle queue; Core::cmd_m the command
// queue. Lock order: ServiceCore::m -> Executor::m, and Core::metrics_m ->
// ServiceCore::m (metrics()). No thread holds a lock while running a
// callback or a statement. Metrics counters are relaxed atomics
// (metrics_cell.hpp), bumped where the state they count changes.

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
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "metrics_cell.hpp"
#include "pg_io.hpp"
#include "simba/errors.hpp"
#include "simba/factory.hpp"
#include "simba/log.hpp"

namespace simba::pg {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

// ---------------------------------------------------------------- executor

/// The handle thread: a FIFO of tasks plus timed tasks (lease deadlines).
class Executor {
public:
    Executor() {
        thread_ = std::thread([this] { run(); });
        id_ = thread_.get_id();
    }
    ~Executor() { shutdown(); }

    /// False once shut down (the task is dropped).
    bool post(std::function<void()> fn) {
        std::lock_guard<std::mutex> lock(m_);
        if (closed_) return false;
        queue_.push_back(std::move(fn));
        cv_.notify_one();
        return true;
    }
    bool post_at(SteadyClock::time_point at, std::function<void()> fn) {
        std::lock_guard<std::mutex> lock(m_);
        if (closed_) return false;
        timed_.push(Timed{at, seq_++, std::move(fn)});
        cv_.notify_one();
        return true;
    }
    bool on_this_thread() const { return std::this_thread::get_id() == id_; }

    /// Runs what is queued (not the timed tasks), then stops the thread.
    void shutdown() {
        {
            std::lock_guard<std::mutex> lock(m_);
            closed_ = true;
            cv_.notify_one();
        }
        if (!thread_.joinable()) return;
        if (on_this_thread())
            thread_.detach();  // last reference dropped by a callback: the loop exits by itself
        else
            thread_.join();
    }

private:
    struct Timed {
        SteadyClock::time_point at;
        std::uint64_t seq;
        std::function<void()> fn;
        bool operator>(const Timed& o) const { return at != o.at ? at > o.at : seq > o.seq; }
    };

    void run() {
        std::unique_lock<std::mutex> lock(m_);
        for (;;) {
            // Due timed tasks (lease deadlines) go first: a callback queued
            // after a deadline passed (another service's on_acquired) must
            // not run before that deadline's on_released.
            if (!closed_ && !timed_.empty() && timed_.top().at <= SteadyClock::now()) {
                auto fn = std::move(const_cast<Timed&>(timed_.top()).fn);
                timed_.pop();
                lock.unlock();
                safe_run(fn);
                lock.lock();
                continue;
            }
            if (!queue_.empty()) {
                auto fn = std::move(queue_.front());
                queue_.pop_front();
                lock.unlock();
                safe_run(fn);
                lock.lock();
                continue;
            }
            if (closed_) return;
            if (timed_.empty()) {
                cv_.wait(lock);
            } else {
                const auto at = timed_.top().at;  // a copy: the heap may reallocate while we wait
                cv_.wait_until(lock, at);
            }
        }
    }

    static void safe_run(std::function<void()>& fn) {
        try {
            fn();
        } catch (const std::exception& e) {
            log(LogLevel::error, std::string("handle thread task threw: ") + e.what());
        } catch (...) {
            log(LogLevel::error, "handle thread task threw a non-std exception");
        }
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> queue_;
    std::priority_queue<Timed, std::vector<Timed>, std::greater<Timed>> timed_;
    std::uint64_t seq_ = 0;
    bool closed_ = false;
    std::thread::id id_;
    std::thread thread_;
};

std::string quote_conninfo_value(const std::string& v) {
    std::string out = "'";
    for (char c : v) {
        if (c == '\'' || c == '\\') out += '\\';
        out += c;
    }
    return out + "'";
}

/// The user's connection string (key=value or URI) rebuilt as key=value with
/// our defaults added where the user set nothing.
std::string build_conninfo(const std::string& user, FactoryOptions& o) {
    char* err = nullptr;
    PQconninfoOption* opts = PQconninfoParse(user.c_str(), &err);
    if (!opts) {
        std::string msg = err ? err : "invalid connection string";
        if (err) PQfreemem(err);
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
        throw InvalidArgumentError(msg, "22023");
    }
    std::map<std::string, std::string> kv;
    for (auto* p = opts; p->keyword; ++p)
        if (p->val) kv[p->keyword] = p->val;
    PQconninfoFree(opts);
    kv.emplace("application_name", o.application_name);
    o.application_name = kv["application_name"];  // the name in effect
    kv.emplace("connect_timeout", std::to_string(std::max(2, o.connect_timeout_s)));
    kv.emplace("keepalives", "1");
    kv.emplace("keepalives_idle", std::to_string(o.keepalives_idle_s));
    kv.emplace("keepalives_interval", std::to_string(o.keepalives_interval_s));
    kv.emplace("keepalives_count", std::to_string(o.keepalives_count));
    std::string out;
    for (auto& [k, v] : kv) {
        if (!out.empty()) out += ' ';
        out += k + "=" + quote_conninfo_value(v);
    }
    return out;
}

/// The LISTEN connection's string: FactoryOptions::listen_conninfo, else the
/// statement connection's; empty for "none" (poll only).
std::string listen_conninfo_for(const std::string& user, FactoryOptions o) {
    if (o.listen_conninfo == "none") return {};
    return build_conninfo(o.listen_conninfo.empty() ? user : o.listen_conninfo, o);
}

std::int64_t micros_or_zero(const pqxx::field& f) { return f.is_null() ? 0 : f.as<std::int64_t>(); }

const char* const kAcquireSql =
    "SELECT o.mutex, o.owner_id,"
    " (extract(epoch FROM o.acquired_at) * 1000000)::int8,"
    " (extract(epoch FROM o.ttl_at) * 1000000)::int8,"
    " (extract(epoch FROM o.transition_at) * 1000000)::int8,"
    " o.version, o.fence,"
    " (extract(epoch FROM o.current_at) * 1000000)::int8"
    " FROM simba_acquire($1, $2, $3::int8 * interval '1 microsecond',"
    " $4::int8 * interval '1 microsecond') AS o";
const char* const kReleaseSql = "SELECT simba_release($1, $2)";

/// SQLSTATE of a libpqxx error. libpqxx 6.4 drops the SQLSTATE when a lazy
/// PREPARE fails (e.g. permission denied on first use), but still throws the
/// matching class: recover the code from the class then.
std::string sqlstate_of(const std::exception& e) {
    auto* sql = dynamic_cast<const pqxx::sql_error*>(&e);
    if (!sql) return {};
    if (!sql->sqlstate().empty()) return sql->sqlstate();
    if (dynamic_cast<const pqxx::insufficient_privilege*>(&e)) return "42501";
    if (dynamic_cast<const pqxx::undefined_function*>(&e)) return "42883";
    if (dynamic_cast<const pqxx::undefined_table*>(&e)) return "42P01";
    if (dynamic_cast<const pqxx::undefined_column*>(&e)) return "42703";
    if (dynamic_cast<const pqxx::syntax_error*>(&e)) return "42601";
    if (dynamic_cast<const pqxx::data_exception*>(&e)) return "22000";
    return {};
}

MutexOwner parse_owner(const pqxx::row& r, const std::string& mutex, SteadyClock::time_point anchor) {
    MutexOwner o;
    o.mutex = r[0].is_null() ? mutex : r[0].as<std::string>();
    o.owner_id = r[1].is_null() ? std::string() : r[1].as<std::string>();
    o.acquired_at = microseconds(micros_or_zero(r[2]));
    o.ttl_at = microseconds(micros_or_zero(r[3]));
    o.transition_at = microseconds(micros_or_zero(r[4]));
    o.version = r[5].is_null() ? 0 : r[5].as<std::int64_t>();
    o.fence = r[6].is_null() ? 0 : r[6].as<std::int64_t>();
    o.current_at = microseconds(micros_or_zero(r[7]));
    o.anchor = anchor;
    return o;
}

}  // namespace

// ------------------------------------------------------------ service core

struct ServiceCore {
    ServiceCore(std::shared_ptr<MutexContender> c, ContendOptions o)
        : contender(std::move(c)),
          id(contender->contender_id()),
          mutex(contender->mutex()),
          options(o),
          period(id, o.jitter) {
        reported.before = MutexOwner::none(mutex);
        reported.after = reported.before;
    }

    std::shared_ptr<MutexContender> contender;
    const std::string id;
    const std::string mutex;
    const ContendOptions options;
    ContendPeriod period;

    // Guarded by m.
    mutable std::mutex m;
    bool active = false;         // callbacks may be emitted
    bool owned = false;          // reported owner (see deadline)
    SteadyClock::time_point deadline{};
    MutexOwner owned_owner;      // the tenure reported by on_acquired (renewed)
    MutexState reported;         // last state reported / observed
    std::deque<std::function<void()>> pending;  // callbacks not yet run

    // I/O thread only.
    MutexOwner last;             // last owner seen from the server
    std::uint64_t timer_gen = 0;
    bool io_active = false;

    // Metrics (simba::Metrics): the cell of (mutex, id); wait_since guarded
    // by m, notified_at I/O thread only (a release NOTIFY while waiting).
    std::shared_ptr<simba::detail::MetricsCell> metrics;
    SteadyClock::time_point wait_since{};
    SteadyClock::time_point notified_at{};

    bool is_owner_now() const {
        std::lock_guard<std::mutex> lock(m);
        return owned && SteadyClock::now() < deadline;
    }

    SteadyClock::duration lease() const { return options.ttl + options.transition; }

    /// The steady deadline up to which `o` proves our lease.
    SteadyClock::time_point deadline_of(const MutexOwner& o) const {
        auto margin = std::min<SteadyClock::duration>(options.release_margin, lease() / 10);
        return o.transition_deadline() - margin;
    }
};

using ServicePtr = std::shared_ptr<ServiceCore>;

// ------------------------------------------------------------------ core

struct ContendServiceFactory::Core final : detail::Io {
    Core(std::string user_conninfo, FactoryOptions o)
        : options(std::move(o)),
          conninfo(build_conninfo(user_conninfo, options)),
          listen_info(listen_conninfo_for(user_conninfo, options)) {
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
        if (!svc->active) return;
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
        }
        try {
            cb();
        } catch (const std::exception& e) {
            log(LogLevel::error, "callback of contender " + s.id + " on mutex " + s.mutex + " threw: " + e.what());
        } catch (...) {
            log(LogLevel::error, "callback of contender " + s.id + " on mutex " + s.mutex + " threw");
        }
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

    /// Lease deadline check, on the handle thread.
    void schedule_expiry(const ServicePtr& svc, SteadyClock::time_point at) {
        std::weak_ptr<ServiceCore> weak = svc;
        executor.post_at(at, [this, weak] {
            auto s = weak.lock();
            if (!s) return;
            {
                std::lock_guard<std::mutex> lock(s->m);
                if (!s->owned || SteadyClock::now() < s->deadline) return;
                MutexState st{s->owned_owner, MutexOwner::none(s->mutex)};
                s->owned = false;
                s->reported = st;
                simba::detail::MetricsCell::inc(s->metrics->lost);
                s->wait_since = SteadyClock::now();
                auto c = s->contender;
                emit(s, [c, st] { c->on_released(st); });
            }
            // Run it now, not behind callbacks queued meanwhile (we are on
            // the handle thread; the queued drain then finds nothing).
            drain_all(*s);
            // Logged outside the lock: the log handler is user code.
            log(LogLevel::warning, "lease of " + s->id + " on mutex " + s->mutex +
                                       " reached its deadline without a renewal: released");
        });
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
        std::lock_guard<std::mutex> lock(svc->m);
        auto now = SteadyClock::now();
        auto c = svc->contender;
        auto& mc = *svc->metrics;
        if (after.is_owner(svc->id)) {
            auto deadline = svc->deadline_of(after);
            if (svc->owned && svc->owned_owner.fence == after.fence && svc->owned_owner.owner_id == after.owner_id) {
                // Renewal: extend silently.
                simba::detail::MetricsCell::inc(mc.renewals);
                svc->deadline = deadline;
                svc->owned_owner = after;
                svc->reported.before = svc->reported.after;
                svc->reported.after = after;
                schedule_expiry(svc, deadline);
                return true;
            }
            if (svc->owned) {  // a new tenure of the same id: the old one ended
                MutexState st{svc->owned_owner, after};
                svc->owned = false;
                simba::detail::MetricsCell::inc(mc.lost);
                svc->wait_since = std::min(now, svc->deadline);
                emit(svc, [c, st] { c->on_released(st); });
            }
            if (deadline <= now) return false;  // granted, but the reply came too late to prove the lease
            // Metrics of a new tenure: acquire latency from the start of
            // waiting; handoff from the release NOTIFY we acted on, else from
            // the previous holder's lease end (server clock).
            simba::detail::MetricsCell::inc(mc.acquired);
            mc.acquire_latency.observe(duration_cast<microseconds>(now - svc->wait_since));
            if (svc->notified_at != SteadyClock::time_point{})
                mc.handoff_latency.observe(duration_cast<microseconds>(now - svc->notified_at));
            else if (prev.has_owner() && prev.owner_id != svc->id && after.acquired_at >= prev.transition_at)
                mc.handoff_latency.observe(after.acquired_at - prev.transition_at);
            svc->notified_at = {};
            MutexState st{svc->reported.after, after};
            if (svc->reported.after.is_owner(svc->id) && svc->reported.after.fence == after.fence)
                st.before = MutexOwner::none(svc->mutex, svc->reported.after.anchor);
            svc->owned = true;
            svc->deadline = deadline;
            svc->owned_owner = after;
            svc->reported = st;
            emit(svc, [c, st] { c->on_acquired(st); });
            schedule_expiry(svc, deadline);
            return true;
        }
        if (svc->owned) {
            MutexState st{svc->owned_owner, after};
            svc->owned = false;
            svc->reported = st;
            simba::detail::MetricsCell::inc(mc.lost);
            svc->wait_since = now;
            emit(svc, [c, st] { c->on_released(st); });
            return true;
        }
        if (after.has_owner()) {
            simba::detail::MetricsCell::inc(mc.busy);
            svc->notified_at = {};  // that release went to someone else: no handoff of ours
        }
        svc->reported.before = svc->reported.after;
        svc->reported.after = after;
        return true;
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
                fn(*stmt);
            } catch (const std::exception& e) {
                const bool lost = statement_failed(e, "statement");
                failed(as_simba_error(e, lost));
            }
        });
    }

    bool wait_connected(SteadyClock::time_point until) override {
        std::unique_lock<std::mutex> lock(state_m);
        return state_cv.wait_until(lock, until, [&] { return up_flag; });
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

    std::uint64_t notifications(const std::string& name) override {
        std::lock_guard<std::mutex> lock(notify_m);
        return notify_counts[name];  // registers interest in `name`
    }

    bool wait_notification(const std::string& name, std::uint64_t seen,
                           SteadyClock::time_point until) override {
        std::unique_lock<std::mutex> lock(notify_m);
        return notify_cv.wait_until(lock, until, [&] { return notify_counts[name] != seen; });
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

    struct Receiver final : pqxx::notification_receiver {
        Receiver(pqxx::connection_base& c, std::vector<std::string>& out)
            : pqxx::notification_receiver(c, "simba"), out_(out) {}
        void operator()(const std::string& payload, int) override { out_.push_back(payload); }
        std::vector<std::string>& out_;
    };

    void schedule(const ServicePtr& svc, SteadyClock::time_point at) {
        timers.push(Timer{at, timer_seq++, svc, ++svc->timer_gen});
    }

    milliseconds retry_delay(const ServicePtr& svc) const {
        auto quarter = duration_cast<milliseconds>(svc->options.ttl / 4);
        return std::max(milliseconds(10), std::min(options.retry_delay, quarter));
    }

    void io_start(const ServicePtr& svc) {
        {
            std::lock_guard<std::mutex> lock(svc->m);
            svc->active = true;
            svc->wait_since = SteadyClock::now();
        }
        svc->notified_at = {};
        svc->io_active = true;
        svc->last = MutexOwner::none(svc->mutex);
        services.insert(svc);
        by_mutex[svc->mutex].insert(svc);
        update_statement_timeout();
        schedule(svc, SteadyClock::now());
    }

    void io_stop(const ServicePtr& svc) {
        svc->io_active = false;
        ++svc->timer_gen;  // cancels pending attempts
        services.erase(svc);
        auto it = by_mutex.find(svc->mutex);
        if (it != by_mutex.end()) {
            it->second.erase(svc);
            if (it->second.empty()) by_mutex.erase(it);
        }
        bool might_own = svc->last.is_owner(svc->id) || svc->is_owner_now();
        if (might_own && up) {
            try {
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
        {
            std::lock_guard<std::mutex> lock(svc->m);
            if (svc->owned) {
                MutexState st{svc->owned_owner, MutexOwner::none(svc->mutex)};
                svc->owned = false;
                svc->reported = st;
                auto c = svc->contender;
                emit(svc, [c, st] { c->on_released(st); });
            }
            svc->active = false;
        }
        svc->last = MutexOwner::none(svc->mutex);
        update_statement_timeout();
    }

    void attempt(const ServicePtr& svc) {
        const bool renewing = svc->last.is_owner(svc->id) && svc->is_owner_now();
        if (!renewing) simba::detail::MetricsCell::inc(svc->metrics->attempts);
        auto anchor = SteadyClock::now();
        try {
            pqxx::nontransaction tx(*stmt);
            const auto ttl = static_cast<std::int64_t>(svc->options.ttl.count());
            const auto transition = static_cast<std::int64_t>(svc->options.transition.count());
            // Behind a transaction pooler a prepared statement may be on another server connection.
            auto row = options.pooled ? tx.exec_params1(kAcquireSql, svc->mutex, svc->id, ttl, transition)
                                      : tx.exec_prepared1("simba_acquire", svc->mutex, svc->id, ttl, transition);
            tx.commit();
            MutexOwner o = parse_owner(row, svc->mutex, anchor);
            apply(svc, o);
            auto now = SteadyClock::now();
            schedule(svc, now + svc->period.ensure_next_delay(o, now));
        } catch (const std::exception& e) {
            if (renewing) simba::detail::MetricsCell::inc(svc->metrics->renewal_failures);
            if (statement_failed(e, "acquire of mutex " + svc->mutex + " by " + svc->id))
                return;  // all services are rescheduled on reconnect
            schedule(svc, SteadyClock::now() + retry_delay(svc));
        }
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

    void drop_connections() {
        receiver.reset();
        listen.reset();
        stmt.reset();
        open_connections.store(0);
        set_up(false);
    }

    void set_up(bool v) {
        {
            std::lock_guard<std::mutex> lock(state_m);
            up_flag = v;
        }
        state_cv.notify_all();
        up = v;
    }

    void connection_lost() {
        log(LogLevel::error, "connection to the server lost; reconnecting in " +
                                 std::to_string(backoff.count()) + " ms");
        drop_connections();
        next_connect = SteadyClock::now() + backoff;
        backoff = std::min(backoff * 2, options.reconnect_max);
    }

    void connect() {
        try {
            int opened = 0;
            stmt = std::make_unique<pqxx::connection>(conninfo);
            opened = 1;
            open_connections.store(opened);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
            stmt->inhibit_reactivation(true);  // a silent reconnect would lose our session settings
#pragma GCC diagnostic pop
            if (!options.pooled) {  // a pooler shares the session: no settings, no prepared statements
                applied_timeout_ms = -1;
                apply_statement_timeout();
                stmt->prepare("simba_acquire", kAcquireSql);
                stmt->prepare("simba_release", kReleaseSql);
            }
            if (!listen_info.empty()) {
                listen = std::make_unique<pqxx::connection>(listen_info);
                open_connections.store(2);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
                listen->inhibit_reactivation(true);
#pragma GCC diagnostic pop
                receiver = std::make_unique<Receiver>(*listen, notified);  // LISTEN simba
            }
            backoff = options.reconnect_initial;
            connects.fetch_add(1);
            set_up(true);
            log(LogLevel::info, "connected (" + std::to_string(services.size()) + " services)");
            // Resume: every running service attempts now.
            auto now = SteadyClock::now();
            for (auto& s : services) schedule(s, now);
        } catch (const std::exception& e) {
            std::string msg = e.what();
            while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
            log(LogLevel::error, "connect failed: " + msg + "; retrying in " + std::to_string(backoff.count()) + " ms");
            drop_connections();
            next_connect = SteadyClock::now() + backoff;
            backoff = std::min(backoff * 2, options.reconnect_max);
        }
    }

    void update_statement_timeout() {
        auto t = options.statement_timeout;
        for (auto& s : services) t = std::min(t, std::max(milliseconds(10), duration_cast<milliseconds>(s->lease() / 2)));
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
        pqxx::nontransaction tx(*stmt);
        tx.exec0("SET statement_timeout = " + std::to_string(ms));
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

    void handle_notifications() {
        try {
            listen->get_notifs();
            if (!listen->is_open()) throw pqxx::broken_connection("LISTEN connection closed");
        } catch (const std::exception& e) {
            std::string msg = e.what();
            while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
            log(LogLevel::error, "LISTEN connection failed: " + msg);
            connection_lost();
            notified.clear();
            return;
        }
        {
            // Counted only for names someone asked about (the semaphore).
            std::lock_guard<std::mutex> lock(notify_m);
            for (auto& name : notified) {
                auto it = notify_counts.find(name);
                if (it != notify_counts.end()) ++it->second;
            }
        }
        notify_cv.notify_all();
        auto now = SteadyClock::now();
        for (auto& name : notified) {
            auto it = by_mutex.find(name);
            if (it == by_mutex.end()) continue;
            for (auto& s : it->second) {
                // Push handoff: waiters attempt at once; the owner ignores it.
                if (s->last.is_owner(s->id)) continue;
                s->notified_at = now;
                schedule(s, now);
            }
        }
        notified.clear();
    }

    void io_main() {
        next_connect = SteadyClock::now();
        for (;;) {
            run_commands();
            {
                std::lock_guard<std::mutex> lock(cmd_m);
                if (quit) break;
            }
            run_due_tasks();
            auto now = SteadyClock::now();
            if (!up && now >= next_connect) {
                connect();
                continue;
            }
            if (up) {
                // Due attempts, at most a batch before looking at commands again.
                int budget = 64;
                while (up && budget-- > 0 && !timers.empty() && timers.top().at <= SteadyClock::now()) {
                    ServicePtr svc = timers.top().live();
                    timers.pop();
                    if (svc) attempt(svc);
                }
                if (budget <= 0) {
                    poll_once(0);
                    continue;
                }
            }
            // Drop cancelled timers at the top so they do not shorten the wait.
            while (!timers.empty() && !timers.top().live()) timers.pop();
            now = SteadyClock::now();
            SteadyClock::time_point until = now + std::chrono::seconds(1);
            if (up && !timers.empty()) until = std::min(until, timers.top().at);
            if (!up) until = std::min(until, next_connect);
            if (!tasks.empty()) until = std::min(until, tasks.top().at);
            auto wait = duration_cast<milliseconds>(until - now);
            if (until > now && wait.count() == 0) wait = milliseconds(1);
            poll_once(std::max<std::int64_t>(0, wait.count()));
        }
        // Shutdown: stop services still running, then close.
        {
            std::lock_guard<std::mutex> lock(cmd_m);
            closed = true;
        }
        run_commands();
        std::vector<ServicePtr> left(services.begin(), services.end());
        for (auto& s : left) io_stop(s);
        drop_connections();
    }

    void poll_once(std::int64_t timeout_ms) {
        pollfd fds[2];
        int n = 0;
        fds[n++] = pollfd{wake_fd, POLLIN, 0};
        int lsock = (up && listen) ? listen->sock() : -1;
        if (lsock >= 0) fds[n++] = pollfd{lsock, POLLIN, 0};
        int rc = ::poll(fds, n, static_cast<int>(std::min<std::int64_t>(timeout_ms, 60000)));
        if (rc <= 0) return;
        if (fds[0].revents & POLLIN) {
            std::uint64_t v;
            [[maybe_unused]] auto r = ::read(wake_fd, &v, sizeof v);
        }
        if (n > 1 && fds[1].revents) handle_notifications();
    }

    // Configuration.
    FactoryOptions options;
    std::string conninfo;
    std::string listen_info;  // empty: poll only

    Executor executor;

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
    mutable std::mutex state_m;
    mutable std::condition_variable state_cv;
    bool up_flag = false;

    // I/O thread only.
    bool up = false;
    std::unique_ptr<pqxx::connection> stmt;
    std::unique_ptr<pqxx::connection> listen;
    std::unique_ptr<Receiver> receiver;
    std::vector<std::string> notified;
    std::int64_t applied_timeout_ms = -1;
    SteadyClock::time_point next_connect{};
    milliseconds backoff{100};
    std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers;
    std::uint64_t timer_seq = 0;
    std::set<ServicePtr> services;
    std::unordered_map<std::string, std::set<ServicePtr>> by_mutex;
    std::priority_queue<Task, std::vector<Task>, std::greater<Task>> tasks;
    std::uint64_t task_seq = 0;

    // NOTIFY counts per name of interest (detail::Io::notifications).
    std::mutex notify_m;
    std::condition_variable notify_cv;
    std::unordered_map<std::string, std::uint64_t> notify_counts;

    // Metrics: one cell per (mutex, contender id), kept for the factory's
    // life; the services for the gauges. Guarded by metrics_m.
    std::mutex metrics_m;
    std::map<std::pair<std::string, std::string>, std::shared_ptr<simba::detail::MetricsCell>> metric_cells;
    std::vector<std::weak_ptr<ServiceCore>> metric_services;
    std::size_t metric_prune_at = 64;

    void track(const ServicePtr& svc) {
        std::lock_guard<std::mutex> lock(metrics_m);
        auto& cell = metric_cells[{svc->mutex, svc->id}];
        if (!cell) cell = std::make_shared<simba::detail::MetricsCell>(svc->mutex, svc->id);
        svc->metrics = cell;
        if (metric_services.size() >= metric_prune_at) {  // drop destroyed services, amortized O(1)
            metric_services.erase(std::remove_if(metric_services.begin(), metric_services.end(),
                                                 [](const std::weak_ptr<ServiceCore>& w) { return w.expired(); }),
                                  metric_services.end());
            metric_prune_at = std::max<std::size_t>(64, 2 * metric_services.size());
        }
        metric_services.push_back(svc);
    }

    Metrics metrics_snapshot() {
        Metrics out;
        std::lock_guard<std::mutex> lock(metrics_m);
        for (auto& [key, cell] : metric_cells) out.mutexes.push_back(cell->snapshot());  // sorted by the map
        for (auto& w : metric_services) {
            auto s = w.lock();
            if (!s) continue;
            std::lock_guard<std::mutex> slock(s->m);
            if (!s->owned || SteadyClock::now() >= s->deadline) continue;
            // out.mutexes is sorted by (mutex, contender): the map's order.
            auto it = std::lower_bound(out.mutexes.begin(), out.mutexes.end(), std::tie(s->mutex, s->id),
                                       [](const MutexMetrics& m, const std::tuple<const std::string&, const std::string&>& k) {
                                           return std::tie(m.mutex, m.contender) < k;
                                       });
            if (it != out.mutexes.end() && it->mutex == s->mutex && it->contender == s->id) {
                it->is_owner = true;
                it->fence = s->owned_owner.fence;
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
          svc_(std::make_shared<ServiceCore>(std::move(contender), options)) {
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
    }

    bool is_owner() const override { return svc_->is_owner_now(); }

    std::int64_t fence() const override {
        std::lock_guard<std::mutex> lock(svc_->m);
        return svc_->owned && SteadyClock::now() < svc_->deadline ? svc_->owned_owner.fence : 0;
    }

    MutexState state() const override {
        std::lock_guard<std::mutex> lock(svc_->m);
        return svc_->reported;
    }

protected:
    void start_contend() override {
        auto core = core_;
        auto svc = svc_;
        if (!core_->post_io([core, svc] { core->io_start(svc); }))
            throw IllegalStateError("the factory of this service has shut down");
    }

    void stop_contend() override {
        auto core = core_;
        auto svc = svc_;
        auto done = std::make_shared<std::promise<void>>();
        auto fut = done->get_future();
        if (core_->post_io([core, svc, done] {
                core->io_stop(svc);
                done->set_value();
            })) {
            fut.wait();
        } else {
            std::lock_guard<std::mutex> lock(svc_->m);
            svc_->owned = false;
            svc_->active = false;
        }
        if (core_->executor.on_this_thread()) {
            // stop() from inside a callback: run this service's remaining
            // callbacks here, now, so none runs after stop() returns.
            Core::drain_all(*svc_);
            return;
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
