#include "lock_hold.hpp"

#include <algorithm>
#include <utility>

#include "ownership.hpp"
#include "simba/contend_period.hpp"
#include "simba/errors.hpp"
#include "simba/log.hpp"
#include "statements.hpp"

namespace simba::pg::detail {

using std::chrono::milliseconds;

namespace {

/// A wait's error that will come again if retried (a setup mistake).
bool permanent(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const simba::Error& err) {
        return permanent_sqlstate(err.sqlstate());
    } catch (...) {
        return true;
    }
}

}  // namespace

bool HoldStatements::final_error(const std::exception_ptr& e, bool /*once*/) const { return permanent(e); }

LockHold::LockHold(std::shared_ptr<Io> io, std::unique_ptr<HoldStatements> statements, const ContendOptions& options)
    : SessionHolder(options.ttl, options.transition),
      io_(std::move(io)),
      st_(std::move(statements)),
      margin_(simba::detail::lease_margin(options.ttl + options.transition, options.release_margin,
                                          options.clock_drift_ppm)) {}

LockHold::~LockHold() {
    if (subscription_) io_->unsubscribe(subscription_);
    if (registered_) io_->register_wait(st_->names(), false);
}

// Registered on the LISTEN connection after an attempt that lost, until the
// wait ends, not while held: a release with nobody else waiting may then
// skip its NOTIFY, and an uncontended lock registers nothing (m_ held).
void LockHold::register_wait(bool on) {
    if (registered_ == on) return;
    registered_ = on;
    io_->register_wait(st_->names(), on);
}

SteadyClock::duration LockHold::retry_delay() const {
    return st_->retry_delay(std::clamp<SteadyClock::duration>(ttl / 4, milliseconds(10), io_->retry_delay()));
}

// ------------------------------------------------------------- the wait

void LockHold::begin(std::function<void(std::exception_ptr)> done, bool once) {
    std::uint64_t gen;
    {
        MutexLock lock(m_);
        if (phase_ != Phase::idle) throw IllegalStateError(st_->what() + " is held or being taken");
        phase_ = Phase::waiting;
        gen = ++gen_;
        once_ = once;
        done_ = std::move(done);
        in_session_ = suspended_ = answered_ = false;
        proof_ = {};
        held_by_.clear();
        next_at_ = SteadyClock::time_point::max();
        if (!subscription_) {
            std::weak_ptr<LockHold> weak = shared_from_this();
            subscription_ = io_->subscribe(st_->names(), [weak](bool registered) {
                if (auto s = weak.lock()) s->notified(registered);
            });
        }
    }
    attempt(gen);
}

void LockHold::attempt(std::uint64_t gen) {
    auto self = shared_from_this();
    const bool queued = io_->run(
        [self, gen](pqxx::connection& c) {
            {
                MutexLock lock(self->m_);
                if (gen != self->gen_ || self->phase_ != Phase::waiting) return;
                self->next_at_ = SteadyClock::time_point::max();
            }
            self->pay_debt(c);  // an earlier hold's release that failed goes first
            HoldProof p;
            bool in_session = false;
            // Kept by the session from here if granted (end() leaves it).
            const bool held = self->io_->grant_in_session(self, [&](const SessionProof* session) {
                p = self->st_->attempt(c, session);
                in_session = session != nullptr;
                return p.held;
            });
            if (held) {
                // The proof ran out before the answer came: nothing is
                // proven. Give it back and try again.
                if (p.lease.transition_deadline() - self->margin_ <= SteadyClock::now()) {
                    self->io_->leave_session(self);
                    self->st_->release(c);
                    return self->step_at(gen, SteadyClock::now());
                }
                return self->granted(gen, p, in_session);
            }
            bool once;
            {
                MutexLock lock(self->m_);
                if (gen != self->gen_) return;
                self->held_by_ = p.held_by;
                self->answered_ = true;
                once = self->once_;
                // It waits from here: registered, and its registration taking
                // effect brings an attempt (a release may come before it).
                if (!once) self->register_wait(true);
            }
            if (once) return self->settle(gen, nullptr);
            self->step_at(gen, p.retry_at);
        },
        [self, gen](std::exception_ptr e) {
            // A setup mistake (the statement's or the connection's) ends
            // the wait; anything else is tried again soon.
            if (auto setup = self->io_->setup_error()) return self->settle(gen, setup);
            bool once;
            {
                MutexLock lock(self->m_);
                once = self->once_;
                if (gen == self->gen_) self->answered_ = true;
            }
            if (self->st_->final_error(e, once)) return self->settle(gen, e);
            if (once) return self->settle(gen, nullptr);  // refused, as a held lock would be
            // Not connected (yet): soon again, no statement is sent meanwhile.
            const auto now = SteadyClock::now();
            self->step_at(gen, now + (self->io_->wait_connected(now) ? self->retry_delay() : milliseconds(20)));
        });
    if (!queued) {
        settle(gen, std::make_exception_ptr(IllegalStateError("the factory of this " + st_->what() +
                                                              " has shut down")));
    }
}

/// The next step of the wait (an attempt) or of the hold (a renewal or a
/// check) at `at`, unless one is due sooner; none once the phase changed.
void LockHold::step_at(std::uint64_t gen, SteadyClock::time_point at) {
    Phase phase;
    {
        MutexLock lock(m_);
        if (gen != gen_ || (phase_ != Phase::waiting && phase_ != Phase::held) || at >= next_at_) return;
        next_at_ = at;
        phase = phase_;
    }
    std::weak_ptr<LockHold> weak = shared_from_this();
    io_->run_at(at, [weak, gen, at, phase] {
        auto s = weak.lock();
        if (!s) return;
        {
            MutexLock lock(s->m_);
            if (gen != s->gen_ || s->next_at_ != at || s->phase_ != phase) return;  // replaced, or ended
            // Due now: the step may fail before its statement (no
            // connection) and must be able to set the next one.
            s->next_at_ = SteadyClock::time_point::max();
        }
        if (phase == Phase::waiting)
            s->attempt(gen);
        else
            s->reask(gen);
    });
}

/// A NOTIFY named the lock: a waiting attempt goes now, at most once per
/// notify_min_interval (anyone may NOTIFY, in a loop: notify_throttle.hpp, as
/// the services); a held multi-lock checks itself the same way (an
/// operator may have taken a member).
void LockHold::notified(bool registered) {
    const auto now = SteadyClock::now();
    std::uint64_t gen;
    SteadyClock::time_point at = now;
    {
        MutexLock lock(m_);
        if (registered) {
            // Its own registration took effect, which no stranger can cause:
            // one attempt now, spending nothing of the NOTIFY limit (a real
            // release right after is heard at once).
            if (phase_ != Phase::waiting || at >= next_at_) return;
            gen = gen_;
        } else {
            if (phase_ != Phase::waiting && !(phase_ == Phase::held && st_->check_on_notify())) return;
            gen = gen_;
            const auto admitted = notify_.admit(now, next_at_, io_->notify_min_interval());
            if (!admitted) return;
            at = *admitted;
        }
    }
    step_at(gen, at);
}

void LockHold::granted(std::uint64_t gen, const HoldProof& p, bool in_session) {
    std::function<void(std::exception_ptr)> done;
    SteadyClock::time_point deadline;
    {
        MutexLock lock(m_);
        // Ended meanwhile: end()'s release comes after this on the I/O thread.
        if (gen != gen_ || phase_ != Phase::waiting) return;
        phase_ = Phase::held;
        register_wait(false);
        proof_ = p;
        in_session_ = in_session;
        deadline = deadline_ = p.lease.transition_deadline() - margin_;
        done = std::move(done_);
    }
    watch(gen, deadline);
    if (!in_session) {
        const auto now = SteadyClock::now();
        step_at(gen, now + std::max(SteadyClock::duration::zero(), ContendPeriod::owner_delay(p.lease, now)));
    }
    if (done) done(nullptr);
}

/// The wait ends without a hold: a setup mistake, or (once) refused. A
/// place in a queue the attempt left (a waiting writer's) is withdrawn.
void LockHold::settle(std::uint64_t gen, std::exception_ptr error) {
    std::function<void(std::exception_ptr)> done;
    bool withdraw;
    {
        MutexLock lock(m_);
        if (gen != gen_) return;
        ++gen_;
        phase_ = Phase::idle;
        register_wait(false);
        done = std::move(done_);
        withdraw = !error;
    }
    if (withdraw) {
        auto self = shared_from_this();
        io_->run([self](pqxx::connection& c) { self->st_->release(c); }, [](std::exception_ptr) {});
    }
    if (done) done(error);
}

bool LockHold::take(SteadyClock::time_point deadline, bool once, bool answer_first) {
    // A new factory connects in the background: the first attempt goes
    // when it is up (or a setup mistake is known), not after a retry delay.
    (void)io_->wait_connected(std::min(deadline, SteadyClock::now() + std::chrono::seconds(5)));
    auto promise = std::make_shared<std::promise<void>>();
    auto result = promise->get_future();
    begin(
        [promise](std::exception_ptr e) {
            if (e)
                promise->set_exception(e);
            else
                promise->set_value();
        },
        once);
    if (once) deadline = SteadyClock::time_point::max();  // the one attempt's answer (its statement has a deadline)
    for (;;) {
        const auto now = SteadyClock::now();
        bool past = now >= deadline;
        if (past && answer_first) {
            MutexLock lock(m_);
            past = answered_;
        }
        if (past) {
            end();  // a grant that came meanwhile is released
            return false;
        }
        // Past the deadline (answer_first) the first answer is polled for.
        const auto slice = now >= deadline ? SteadyClock::duration(milliseconds(5))
                                           : std::min<SteadyClock::duration>(deadline - now, milliseconds(50));
        if (result.wait_for(slice) == std::future_status::ready) break;
        io_->while_waiting();
    }
    result.get();  // a setup mistake, or CancelledError: the wait is over
    MutexLock lock(m_);
    return phase_ != Phase::idle;  // held (or lost since: end() it); idle: refused (once) or ended
}

bool LockHold::end(bool wait) {
    std::function<void(std::exception_ptr)> done;
    {
        UniqueLock lock(m_);
        if (phase_ == Phase::idle) return false;
        ++gen_;
        phase_ = Phase::idle;
        register_wait(false);
        done = std::move(done_);
        next_at_ = SteadyClock::time_point::max();
        running_.wait_idle(m_, lock);  // a callback already running finishes first (unless it is ours)
    }
    if (done) done(std::make_exception_ptr(CancelledError("lock of " + st_->what() + " was cancelled")));
    // The session stops keeping it (also a grant that came as the wait
    // ended), then the release goes: both on the I/O thread, in that order.
    io_->leave_session(shared_from_this());
    auto self = shared_from_this();
    if (!wait) {
        (void)io_->run([self](pqxx::connection& c) { self->st_->release(c); },
                       [self](std::exception_ptr e) {
                           try {
                               std::rethrow_exception(e);
                           } catch (const std::exception& err) {
                               self->release_failed(err.what());
                           }
                       });
        return false;
    }
    try {
        return call<bool>(*io_, [self](pqxx::connection& c) { return self->st_->release(c); }, "lock");
    } catch (const std::exception& e) {
        release_failed(e.what());
        return false;
    }
}

/// end()'s release failed: owed with or without a session (under one the
/// hold would never lapse), sent again until it succeeds, and before this
/// lock's next attempt.
void LockHold::release_failed(const std::string& why) {
    log(LogLevel::warning, "release of " + st_->what() + " failed: " + why);
    {
        MutexLock lock(m_);
        owed_ = true;
    }
    auto self = shared_from_this();
    io_->owe([self](pqxx::connection& c) { self->pay_debt(c); }, "release of " + st_->what());
}

/// On the I/O thread: sends the release end() owes, if it still does.
void LockHold::pay_debt(pqxx::connection& c) {
    {
        MutexLock lock(m_);
        if (!owed_) return;
    }
    st_->release(c);
    MutexLock lock(m_);
    owed_ = false;
}

// ------------------------------------------------------------- the hold

void LockHold::reask(std::uint64_t gen) {
    auto self = shared_from_this();
    io_->run(
        [self, gen](pqxx::connection& c) {
            HoldProof held;
            bool in_session;
            {
                MutexLock lock(self->m_);
                if (gen != self->gen_ || self->phase_ != Phase::held) return;
                self->next_at_ = SteadyClock::time_point::max();
                held = self->proof_;
                in_session = self->in_session_;
            }
            const auto p = self->st_->reask(c, held, in_session);
            if (!p.same_hold(held)) {
                // What the server counts now (a new grant, a place in a
                // queue) is not this hold: given back at once.
                self->lose(gen, "the server no longer counts it");
                self->st_->release(c);
                return;
            }
            if (in_session) return;  // checked: the session keeps it
            bool resumed = false;
            bool extended;
            SteadyClock::time_point deadline;
            {
                MutexLock lock(self->m_);
                if (gen != self->gen_) return;
                extended = self->extend(p.lease, resumed);
                deadline = self->deadline_;
            }
            if (!extended) return;
            if (resumed) self->run_callback(gen, Callback::resumed);
            self->watch(gen, deadline);
            const auto now = SteadyClock::now();
            self->step_at(gen, now + std::max(SteadyClock::duration::zero(), ContendPeriod::owner_delay(p.lease, now)));
        },
        [self, gen](std::exception_ptr) {
            // Logged by the factory. The deadline ends the hold unless a
            // retry gets through first.
            bool own;
            {
                MutexLock lock(self->m_);
                own = !self->in_session_;
            }
            if (!own) return;  // a check: the keepalives decide
            self->suspend();
            self->step_at(gen, SteadyClock::now() + self->retry_delay());
        });
}

/// The held hold's deadline moved on to `lease`'s (caller holds m_): never
/// shortened, never bridging a deadline that already passed. False then.
bool LockHold::extend(const MutexOwner& lease, bool& resumed) {
    if (phase_ != Phase::held || SteadyClock::now() >= deadline_) return false;
    const auto proven = lease.transition_deadline() - margin_;
    if (proven <= deadline_) return false;
    deadline_ = proven;
    proof_.lease = lease;
    resumed = std::exchange(suspended_, false);
    return true;
}

void LockHold::kept(const MutexOwner& session) {
    bool resumed = false;
    bool extended;
    std::uint64_t gen;
    SteadyClock::time_point deadline;
    {
        MutexLock lock(m_);
        if (!in_session_) return;
        gen = gen_;
        extended = extend(session, resumed);
        deadline = deadline_;
    }
    if (resumed) run_callback(gen, Callback::resumed);
    if (extended) watch(gen, deadline);
}

void LockHold::keepalive_failed() { suspend(); }

void LockHold::ended(const char* why) {
    std::uint64_t gen;
    {
        MutexLock lock(m_);
        gen = gen_;
    }
    lose(gen, why);
}

void LockHold::revoked() {
    std::uint64_t gen;
    {
        MutexLock lock(m_);
        if (phase_ != Phase::held || !in_session_) return;
        gen = gen_;
    }
    step_at(gen, SteadyClock::now());
}

/// Renewals fail: on_suspended once, with the deadline it is lost at.
void LockHold::suspend() {
    std::uint64_t gen;
    SteadyClock::time_point deadline;
    {
        MutexLock lock(m_);
        if (phase_ != Phase::held || suspended_ || SteadyClock::now() >= deadline_) return;
        suspended_ = true;
        gen = gen_;
        deadline = deadline_;
    }
    run_callback(gen, Callback::suspended, deadline);
}

void LockHold::lose(std::uint64_t gen, const std::string& why) {
    {
        MutexLock lock(m_);
        if (gen != gen_ || phase_ != Phase::held) return;
        phase_ = Phase::lost;
        next_at_ = SteadyClock::time_point::min();
    }
    log(LogLevel::warning, st_->what() + " lost: " + why);
    io_->leave_session(shared_from_this());
    run_callback(gen, Callback::lost);
}

/// The lease watchdog, on the handle thread: a statement stuck on the I/O
/// thread cannot keep the hold past its deadline.
void LockHold::watch(std::uint64_t gen, SteadyClock::time_point at) {
    std::weak_ptr<LockHold> weak = shared_from_this();
    io_->handle_at(at, [weak, gen] {
        auto s = weak.lock();
        if (!s) return;
        {
            MutexLock lock(s->m_);
            if (gen != s->gen_ || s->phase_ != Phase::held || SteadyClock::now() < s->deadline_) return;
        }
        s->lose(gen, "its lease ended without a renewal");
    });
}

/// The callback `which` as set now (an empty function: none); a permit's
/// on_lost is spent by it; on_suspended's gets `deadline`.
std::function<void()> LockHold::callback(Callback which, SteadyClock::time_point deadline) {
    switch (which) {
        // A spent on_lost (a permit's) runs once, however often its run was asked for.
        case Callback::lost: return lost_once_ ? std::exchange(on_lost_, nullptr) : on_lost_;
        case Callback::resumed: return on_resumed_;
        case Callback::suspended:
            if (!on_suspended_) return {};
            return [cb = on_suspended_, deadline] { cb(deadline); };
    }
    return {};
}

/// Runs on the handle thread the callback `which` as set then (under m_),
/// unless the hold `gen` ended meanwhile.
void LockHold::run_callback(std::uint64_t gen, Callback which, SteadyClock::time_point deadline) {
    auto self = shared_from_this();
    io_->handle([self, gen, which, deadline] {
        std::function<void()> cb;
        {
            MutexLock lock(self->m_);
            if (gen != self->gen_) return;
            cb = self->callback(which, deadline);
            if (!cb) return;
            self->running_.enter(self->m_);
        }
        self->running_.run(self->m_, cb);
    });
}

bool LockHold::regrant(const std::function<void(HoldStatements&)>& change) {
    std::uint64_t gen;
    HoldProof before;
    bool in_session;
    {
        MutexLock lock(m_);
        if (phase_ != Phase::held && phase_ != Phase::lost) throw IllegalStateError(st_->what() + " is not held");
        if (phase_ == Phase::lost || SteadyClock::now() >= deadline_) return false;  // lost already: final
        gen = gen_;
        before = proof_;
        in_session = in_session_;
    }
    auto self = shared_from_this();
    auto ask = [self, &change, in_session](pqxx::connection& c) {
        change(*self->st_);
        HoldProof got;
        if (!in_session) return self->st_->attempt(c, nullptr);
        self->io_->grant_in_session(self, [&](const SessionProof* session) {
            got = self->st_->attempt(c, session);
            return got.held;
        });
        return got;
    };
    HoldProof p;
    try {
        p = call<HoldProof>(*io_, ask, "lock");
    } catch (const std::exception& e) {
        // Its answer is unknown: no longer proven (unlock releases it).
        lose(gen, std::string("its downgrade failed: ") + e.what());
        return false;
    }
    // The same hold goes on: its fence and grant unchanged (a session that
    // ended meanwhile would have made it another).
    if (!p.held || p.fence != before.fence || p.acquired_at != before.acquired_at) {
        lose(gen, "the server answered with another hold");
        return false;
    }
    MutexLock lock(m_);
    if (gen != gen_ || phase_ != Phase::held) return false;
    proof_ = p;
    return true;
}

void LockHold::set_on_lost(std::function<void()> cb, bool at_once) {
    std::uint64_t gen;
    {
        MutexLock lock(m_);
        on_lost_ = std::move(cb);
        lost_once_ = at_once;
        if (!at_once || !(phase_ == Phase::lost || (phase_ == Phase::held && SteadyClock::now() >= deadline_))) return;
        gen = gen_;
    }
    run_callback(gen, Callback::lost);
}

void LockHold::set_on_suspended(std::function<void(SteadyClock::time_point)> cb, bool at_once) {
    std::uint64_t gen;
    SteadyClock::time_point deadline;
    {
        MutexLock lock(m_);
        on_suspended_ = std::move(cb);
        if (!at_once || phase_ != Phase::held || !suspended_ || SteadyClock::now() >= deadline_) return;
        gen = gen_;
        deadline = deadline_;
    }
    run_callback(gen, Callback::suspended, deadline);
}

void LockHold::set_on_resumed(std::function<void()> cb) {
    MutexLock lock(m_);
    on_resumed_ = std::move(cb);
}

// ------------------------------------------------------------- reading

std::optional<LockHold::View> LockHold::view() const {
    MutexLock lock(m_);
    if (phase_ != Phase::held || SteadyClock::now() >= deadline_) return std::nullopt;
    return View{proof_, deadline_};
}

std::string LockHold::held_by() const {
    MutexLock lock(m_);
    return held_by_;
}

}  // namespace simba::pg::detail
