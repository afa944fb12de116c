// simba client: Semaphore and Permit (see semaphore.hpp).
//
// Statements run on the factory's I/O thread with its statement connection
// (detail::Io::run); the caller of try_acquire waits on a future. Under
// FactoryOptions::sessions a permit is granted under the factory's session
// of its lease length and kept by its keepalives (SessionHolder); else its
// own refreshes are I/O-thread tasks. Its lease watchdog is a handle-thread
// task, so a blocked statement cannot keep lost() false past the deadline.
//
// Locking: State::m guards deadline, lost, released, suspended, the
// callbacks and the running one; no lock is held while a callback or a
// statement runs. release() waits for a callback that already started, so
// none runs after release() returned.
#include "simba/semaphore.hpp"

#include <future>
#include <thread>
#include <utility>

#include "ownership.hpp"
#include "pg_io.hpp"
#include "running_callback.hpp"
#include "sessions.hpp"
#include "simba/errors.hpp"
#include "simba/log.hpp"
#include "thread_annotations.hpp"

namespace simba {

using std::chrono::microseconds;
using std::chrono::milliseconds;

/// Under a session the permit is kept by the session of lease length
/// (ttl/3, ttl - ttl/3): its keepalive comes a third of the ttl after the
/// last, as a refresh of the permit's own would, and it ends ttl after it.
struct Permit::State final : pg::detail::SessionHolder, std::enable_shared_from_this<State> {
    State(std::shared_ptr<pg::detail::Io> i, std::string k, microseconds t, SteadyClock::duration m)
        : SessionHolder(t / 3, t - t / 3), io(std::move(i)), key(std::move(k)), ttl(t), margin(m) {}

    const std::shared_ptr<pg::detail::Io> io;
    const std::string key;
    std::string token;
    int slot = 0;
    std::int64_t fence = 0;
    const microseconds ttl;
    const SteadyClock::duration margin;  // lease_margin(): given up this much before the proven end
    bool in_session = false;             // kept by a session, not by refreshes of its own

    pg::detail::Mutex m;
    SteadyClock::time_point deadline GUARDED_BY(m) = {};
    bool lost GUARDED_BY(m) = false;
    bool released GUARDED_BY(m) = false;
    bool suspended GUARDED_BY(m) = false;  // a refresh failed, none succeeded since
    std::function<void()> on_lost GUARDED_BY(m);
    std::function<void(SteadyClock::time_point)> on_suspended GUARDED_BY(m);
    std::function<void()> on_resumed GUARDED_BY(m);
    pg::detail::RunningCallback running;  // its state under m too

    bool live_locked() const REQUIRES(m) { return !lost && !released && SteadyClock::now() < deadline; }

    enum class Callback { lost, suspended, resumed };
    /// The callback `which` as set now (empty: none); on_lost only once,
    /// on_suspended's gets `deadline`.
    std::function<void()> callback(Callback which, SteadyClock::time_point deadline_then) REQUIRES(m) {
        switch (which) {
            case Callback::lost: return std::exchange(on_lost, nullptr);
            case Callback::resumed: return on_resumed;
            case Callback::suspended:
                if (!on_suspended) return {};
                return [cb = on_suspended, deadline_then] { cb(deadline_then); };
        }
        return {};
    }

    /// Marks the permit lost (once) and schedules on_lost.
    static void lose(const std::shared_ptr<State>& s, const std::string& why) {
        {
            pg::detail::MutexLock lock(s->m);
            if (s->lost || s->released) return;
            s->lost = true;
        }
        log(LogLevel::warning, "permit " + std::to_string(s->slot) + " of key " + s->key + " lost: " + why);
        if (s->in_session) s->io->leave_session(s);
        run_on_lost(s);
    }

    // SessionHolder: on the I/O thread.
    void kept(const MutexOwner& session) override {
        const auto proven = session.transition_deadline() - margin;
        bool resumed, longer;
        {
            pg::detail::MutexLock lock(m);
            // As a refresh: never bridge a deadline that already passed.
            if (!live_locked()) return;
            longer = proven > deadline;
            if (longer) deadline = proven;
            resumed = std::exchange(suspended, false);
        }
        auto self = shared_from_this();
        if (resumed) run_callback(self, Callback::resumed);
        if (longer) watch(self, proven);
    }
    void keepalive_failed() override { suspend(shared_from_this()); }
    void ended(const char* why) override { lose(shared_from_this(), why); }

    /// Runs on_lost (once) on the handle thread, unless release() comes first.
    static void run_on_lost(const std::shared_ptr<State>& s) {
        run_callback(s, Callback::lost);
    }

    /// A refresh failed: on_suspended (once per suspension) with the
    /// deadline the permit is lost at unless a refresh succeeds first.
    static void suspend(const std::shared_ptr<State>& s) {
        SteadyClock::time_point deadline;
        {
            pg::detail::MutexLock lock(s->m);
            if (!s->live_locked() || s->suspended) return;
            s->suspended = true;
            deadline = s->deadline;
        }
        run_on_suspended(s, deadline);
    }

    static void run_on_suspended(const std::shared_ptr<State>& s, SteadyClock::time_point deadline) {
        run_callback(s, Callback::suspended, deadline);
    }

    /// Runs on the handle thread the callback `which` as set then (under
    /// m), unless release() comes first.
    static void run_callback(const std::shared_ptr<State>& s, Callback which, SteadyClock::time_point deadline = {}) {
        s->io->handle([s, which, deadline] {
            std::function<void()> cb;
            {
                pg::detail::MutexLock lock(s->m);
                if (s->released) return;
                cb = s->callback(which, deadline);
                if (!cb) return;
                s->running.enter(s->m);
            }
            s->running.run(s->m, cb);
        });
    }

    /// Lease watchdog on the handle thread for the deadline just set.
    static void watch(const std::shared_ptr<State>& s, SteadyClock::time_point at) {
        std::weak_ptr<State> weak = s;
        s->io->handle_at(at, [weak] {
            auto st = weak.lock();
            if (!st) return;
            bool expired;
            {
                pg::detail::MutexLock lock(st->m);
                expired = SteadyClock::now() >= st->deadline;
            }
            if (expired) lose(st, "its lease ended without a refresh");
        });
    }

    /// Next refresh a third of the ttl after `from` (the last grant/refresh).
    static void schedule_refresh(const std::shared_ptr<State>& s, SteadyClock::time_point at) {
        std::weak_ptr<State> weak = s;
        s->io->run_at(at, [weak] {
            if (auto st = weak.lock()) refresh(st);
        });
    }

    static void refresh(const std::shared_ptr<State>& s) {
        {
            pg::detail::MutexLock lock(s->m);
            if (s->lost || s->released) return;
        }
        std::weak_ptr<State> weak = s;
        const auto sent = SteadyClock::now();
        s->io->run(
            [weak, sent](pqxx::connection& c) {
                auto st = weak.lock();
                if (!st) return;
                pqxx::nontransaction tx(c);
                bool ok = tx.exec_params1("SELECT simba_semaphore_refresh($1, $2::uuid, $3::int8 * interval '1 microsecond')",
                                          st->key, st->token, static_cast<std::int64_t>(st->ttl.count()))[0]
                              .as<bool>();
                if (!ok) {
                    lose(st, "the server says it expired or was taken over");
                    return;
                }
                const auto deadline = sent + st->ttl - st->margin;
                bool resumed;
                {
                    pg::detail::MutexLock lock(st->m);
                    st->deadline = deadline;
                    resumed = st->suspended && !st->lost;
                    st->suspended = false;
                }
                if (resumed) run_callback(st, Callback::resumed);
                watch(st, deadline);
                schedule_refresh(st, sent + st->ttl / 3);
            },
            [weak](std::exception_ptr) {
                // Logged by the factory. Retry soon; the watchdog ends the
                // permit at its deadline if no retry gets through.
                auto st = weak.lock();
                if (!st) return;
                suspend(st);
                auto retry = std::min<SteadyClock::duration>(st->ttl / 6, milliseconds(500));
                schedule_refresh(st, SteadyClock::now() + retry);
            });
    }
};

namespace {

void validate_acquire(const std::string& key, const std::string& holder, int permits, milliseconds ttl,
                      const std::string& context) {
    validate_name(key, "key");
    validate_name(holder, "holder");
    if (permits < 1 || permits > Semaphore::max_permits)
        throw InvalidArgumentError("permits must be between 1 and " + std::to_string(Semaphore::max_permits),
                                   "22023");
    validate_ttl(ttl);
    if (utf8_length(context) > max_context_length)
        throw InvalidArgumentError("context must be at most " + std::to_string(max_context_length) + " characters",
                                   "22023");
}

}  // namespace

Permit& Permit::operator=(Permit&& other) noexcept {
    if (this != &other) {
        release();
        state_ = std::move(other.state_);
    }
    return *this;
}

Permit::~Permit() { release(); }

const std::string& Permit::key() const noexcept { return state_->key; }
int Permit::slot() const noexcept { return state_->slot; }
const std::string& Permit::token() const noexcept { return state_->token; }
std::int64_t Permit::fence() const noexcept { return state_->fence; }

bool Permit::lost() const {
    pg::detail::MutexLock lock(state_->m);
    return !state_->live_locked();
}

bool Permit::release() {
    if (!state_) return false;  // moved from
    {
        pg::detail::UniqueLock lock(state_->m);
        if (state_->released) return false;
        state_->released = true;
        state_->on_lost = nullptr;
        // An on_lost already running finishes first (unless it is the caller).
        state_->running.wait_idle(state_->m, lock);
        if (state_->lost) return false;
    }
    auto st = state_;
    if (st->in_session) st->io->leave_session(st);
    const auto send = [st](pqxx::connection& c) {
        pqxx::nontransaction tx(c);
        return tx.exec_params1("SELECT simba_semaphore_release($1, $2::uuid)", st->key, st->token)[0].as<bool>();
    };
    try {
        return pg::detail::call<bool>(*st->io, send, "semaphore");
    } catch (const std::exception& e) {
        log(LogLevel::error, "release of permit of key " + st->key + " failed: " + e.what());
        // A lease of its own lapses on the server by itself; a session's
        // keepalives would keep the permit for good: sent again until it
        // succeeds (by its token: it can release nothing else).
        if (st->in_session) st->io->owe(send, "release of permit of key " + st->key);
        return false;
    }
}

void Permit::on_lost(std::function<void()> callback) {
    bool now;
    {
        pg::detail::MutexLock lock(state_->m);
        if (state_->released) return;
        now = state_->lost || SteadyClock::now() >= state_->deadline;
        state_->on_lost = std::move(callback);
    }
    if (now) State::run_on_lost(state_);
}

void Permit::on_suspended(std::function<void(SteadyClock::time_point deadline)> callback) {
    bool now;
    SteadyClock::time_point deadline;
    {
        pg::detail::MutexLock lock(state_->m);
        if (state_->released) return;
        now = state_->suspended && state_->live_locked();
        deadline = state_->deadline;
        state_->on_suspended = std::move(callback);
    }
    if (now) State::run_on_suspended(state_, deadline);
}

void Permit::on_resumed(std::function<void()> callback) {
    pg::detail::MutexLock lock(state_->m);
    if (!state_->released) state_->on_resumed = std::move(callback);
}

Semaphore::Semaphore(pg::ContendServiceFactory& factory, std::string holder, SemaphoreOptions options)
    : io_(pg::detail::io_of(factory)), holder_(std::move(holder)), options_(options) {
    validate_name(holder_, "holder");
    validate_margin(options_.release_margin, options_.clock_drift_ppm);
}

std::optional<Permit> Semaphore::try_acquire(const std::string& key, int permits, milliseconds ttl,
                                             const std::string& context) {
    validate_acquire(key, holder_, permits, ttl, context);
    // run() says if it is not connected; a setup mistake is thrown at once.
    if (!io_->wait_connected(SteadyClock::now() + options_.connect_wait))
        if (auto e = io_->setup_error()) std::rethrow_exception(e);
    auto st = std::make_shared<Permit::State>(
        io_, key, ttl, detail::lease_margin(ttl, options_.release_margin, options_.clock_drift_ppm));
    SteadyClock::time_point sent, proven;
    const std::string& holder = holder_;
    bool granted = pg::detail::call<bool>(*io_, [&](pqxx::connection& c) {
        return io_->grant_in_session(st, [&](const pg::detail::SessionProof* session) {
            sent = SteadyClock::now();
            pqxx::nontransaction tx(c);
            auto row = tx.exec_params1(
                "SELECT slot, token::text, fence FROM simba_semaphore_acquire($1, $2, $3,"
                " $4::int8 * interval '1 microsecond', NULLIF($5, ''), $6::uuid)",
                key, holder, permits, static_cast<std::int64_t>(microseconds(ttl).count()), context,
                session ? session->id.c_str() : nullptr);
            if (row[1].is_null()) return false;
            st->slot = row[0].as<int>();
            st->token = row[1].as<std::string>();
            st->fence = row[2].as<std::int64_t>();
            st->in_session = session != nullptr;
            // Under a session the permit lasts as long as the session, which
            // its open or last keepalive proved. Else the server's expiry is
            // its clock at the grant + ttl, and its clock read the request
            // after we sent it: sent + ttl never outlives the permit. Less
            // the margin either way, for a server clock that runs fast.
            proven = (session ? session->lease.transition_deadline() : sent + st->ttl) - st->margin;
            // Under m: once kept by the session, its keepalives move it on.
            pg::detail::MutexLock lock(st->m);
            st->deadline = proven;
            return true;
        });
    }, "semaphore");
    if (!granted) return std::nullopt;
    Permit::State::watch(st, proven);
    if (!st->in_session) Permit::State::schedule_refresh(st, sent + st->ttl / 3);
    return Permit(std::move(st));
}

Permit Semaphore::acquire(const std::string& key, int permits, milliseconds ttl, milliseconds timeout,
                          const std::string& context) {
    validate_acquire(key, holder_, permits, ttl, context);
    const auto deadline = SteadyClock::now() + timeout;
    // NOTIFYs of `key` are counted while this call waits, and only then;
    // after a try that found no permit it is registered as a waiter too
    // (docs/reference.md, "Wake-ups"), and its registration taking effect counts as one.
    struct Watch {
        pg::detail::Io& io;
        const std::string& key;
        bool registered = false;
        Watch(pg::detail::Io& i, const std::string& k) : io(i), key(k) { io.watch(key); }
        ~Watch() {
            if (registered) io.register_wait({key}, false);
            io.unwatch(key);
        }
        void register_wait() {
            if (!std::exchange(registered, true)) io.register_wait({key}, true);
        }
    } watch(*io_, key);
    for (;;) {
        // Read the NOTIFY count before trying, so a release between the
        // attempt and the wait still wakes us.
        const auto seen = io_->notifications(key);
        const auto tried = SteadyClock::now();
        try {
            if (auto permit = try_acquire(key, permits, ttl, context)) return std::move(*permit);
        } catch (const ConnectionError&) {
            // A setup mistake (no server, wrong database or role) is final;
            // anything else is retried below until the timeout, the factory
            // reconnects. The server's errors (no extension, no grant) are
            // not ConnectionErrors: they propagate at once.
            if (io_->setup_error()) throw;
        }
        const auto now = SteadyClock::now();
        if (now >= deadline)
            throw TimeoutError("no permit of key " + key + " within " + std::to_string(timeout.count()) + " ms");
        watch.register_wait();
        // Anyone may NOTIFY, in a loop: a NOTIFY brings the next try
        // forward, but not to less than notify_min_interval after this one.
        if (io_->wait_notification(key, seen, std::min(deadline, now + options_.poll_interval)))
            std::this_thread::sleep_until(std::min(deadline, tried + io_->notify_min_interval()));
    }
}

}  // namespace simba
