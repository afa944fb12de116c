// simba client (internal): LockHold, one lock of a SharedLocker or a
// MultiLocker, taken and kept on a factory's I/O thread (docs/design.md,
// "Client", the lockers of the new primitives).
//
// Everything is driven by events on the I/O thread, never by a thread per
// waiting lock: an attempt is a statement (HoldStatements::attempt); a
// refused one is tried again at the time its answer gives, or as soon as a
// `NOTIFY simba` names the lock (at most once per notify_min_interval); a
// granted one is kept by the factory's session of its lease length
// (SessionHolder: one keepalive for everything under it) or, without
// sessions, by renewals of its own as the ttl ends. The hold is the lock's
// as long as the local deadline holds: send time of the request that proved
// it + (transition_at - current_at) - margin, the rule of every simba lease.
//
// Loss is final: once a hold ended other than by end() (its deadline
// passed, its session ended, a renewal answered with another hold or none),
// lease() stays empty and on_lost runs once; nothing takes the lock again
// until end() and begin().
//
// Locking: m_ guards what is marked GUARDED_BY (thread_annotations.hpp); no
// lock is held while a statement or a callback runs. A statement's task checks `gen` (the wait or hold it
// was sent for) before and after: end() bumps it, so a stale task changes
// nothing, and end()'s own release runs after it on the same thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <thread>
#include <vector>

#include "io_state.hpp"
#include "notify_throttle.hpp"
#include "pg_io.hpp"
#include "running_callback.hpp"
#include "sessions.hpp"
#include "simba/lease.hpp"
#include "simba/service.hpp"
#include "thread_annotations.hpp"

namespace simba::pg::detail {

/// What the server answered to an attempt or a re-ask.
struct HoldProof {
    bool held = false;                 ///< the caller holds the lock as it asked
    std::int64_t fence = 0;            ///< the hold's fence
    std::vector<std::int64_t> fences;  ///< a multi-lock's, one per name in byte order
    ServerTime acquired_at{0};         ///< the grant that began the hold: a new one is another hold
    MutexOwner lease;                  ///< its lease (or its session's): times and the send time
    /// Not held: ask again by then at the latest (max: only when woken).
    SteadyClock::time_point retry_at = SteadyClock::time_point::max();
    std::string held_by;  ///< not held: who stands in the way, for messages
    std::string session;  ///< the session it was granted under ("": a lease of its own)

    /// The same hold as `other` (a renewal or a check of it, not a new grant).
    [[nodiscard]] bool same_hold(const HoldProof& other) const {
        return held && other.held && acquired_at == other.acquired_at && fence == other.fence &&
               fences == other.fences;
    }
};

/// The statements of one kind of lock, on the factory's statement
/// connection (I/O thread). Each throws what its statement throws.
class HoldStatements {
public:
    virtual ~HoldStatements() = default;
    /// One attempt to take the lock, under `session` (nullptr: a lease of
    /// its own). A refused attempt may leave a place in a queue behind
    /// (a waiting writer's): release() withdraws it.
    virtual HoldProof attempt(pqxx::connection& c, const SessionProof* session) = 0;
    /// The hold `held` asked about again: renewed onto a lease of its own,
    /// or (in_session) only checked. A proof of another hold, or of none,
    /// means it was lost.
    virtual HoldProof reask(pqxx::connection& c, const HoldProof& held, bool in_session) = 0;
    /// Releases the hold, or withdraws a waiting attempt's place; true if a
    /// live hold was released.
    virtual bool release(pqxx::connection& c) = 0;
    /// The names whose `NOTIFY simba` may free the lock.
    [[nodiscard]] virtual const std::vector<std::string>& names() const = 0;
    /// Whether a NOTIFY of a name should make a held lock check itself (an
    /// operator's simba_force_release of a member of a multi-lock); else it
    /// only wakes a waiting attempt.
    [[nodiscard]] virtual bool check_on_notify() const { return false; }
    /// What the lock is called in messages ("read-write lock catalog").
    [[nodiscard]] virtual std::string what() const = 0;
    /// Whether an attempt's error `e` (not a setup mistake of the
    /// connection's) ends the wait, thrown by take(); else it is tried again
    /// soon, or (`once`) the lock is refused. Default: a setup mistake's
    /// SQLSTATE (permanent_sqlstate) or not a simba::Error.
    [[nodiscard]] virtual bool final_error(const std::exception_ptr& e, bool once) const;
    /// How soon a statement that failed on a live connection (an attempt,
    /// a renewal) is sent again; `standard`: FactoryOptions::retry_delay,
    /// at most a quarter of the ttl, at least 10 ms.
    [[nodiscard]] virtual SteadyClock::duration retry_delay(SteadyClock::duration standard) const {
        return standard;
    }
};

class LockHold final : public SessionHolder, public std::enable_shared_from_this<LockHold> {
public:
    /// `options`: ttl and transition (the lease, and the session it joins),
    /// release_margin and clock_drift_ppm (the margin).
    LockHold(std::shared_ptr<Io> io, std::unique_ptr<HoldStatements> statements, const ContendOptions& options);
    ~LockHold() override;

    /// Starts taking the lock: `done` runs once, on the I/O thread (keep it
    /// quick: it sets a promise), with nullptr once it is held, the error of
    /// a setup mistake (no extension, no grant, a bad argument), or
    /// CancelledError if end() comes first. `once`: a single attempt, and
    /// done(nullptr) with the lock not held if refused. IllegalStateError
    /// unless idle (never begun, or ended).
    void begin(std::function<void(std::exception_ptr)> done, bool once = false) EXCLUDES(m_);
    /// begin(), then waits until held (true), refused (once: false), or
    /// `deadline` (false, the wait ended); throws what done() got.
    /// `answer_first`: the deadline ends the wait only once an attempt was
    /// answered (a semaphore's acquire tries at least once, whatever its
    /// timeout).
    bool take(SteadyClock::time_point deadline, bool once = false, bool answer_first = false) EXCLUDES(m_);
    /// Ends the wait or the hold and waits for the server's release (a
    /// statement on the I/O thread): true if a live hold was released. A
    /// waiting begin() gets CancelledError. Idle: false, nothing sent.
    /// Callbacks that already started are waited for (unless on this
    /// thread): none runs after end() returned. `wait` false: the release
    /// is sent, owed if it fails, but not waited for; false then.
    bool end(bool wait = true) EXCLUDES(m_);
    /// Runs `change(statements)` and then one attempt, on the I/O thread, for
    /// the hold held now (a read-write lock's downgrade): true if it answers
    /// with the same fence and grant, and the hold goes on under its new
    /// proof; false if it was lost already, or is lost now (another answer,
    /// or none: the statement failed). IllegalStateError if nothing is held.
    bool regrant(const std::function<void(HoldStatements&)>& change) EXCLUDES(m_);

    /// The hold now, in one piece: its proof and local deadline; nothing
    /// unless held and live.
    struct View {
        HoldProof proof;
        SteadyClock::time_point deadline;
    };
    [[nodiscard]] std::optional<View> view() const EXCLUDES(m_);
    /// Who stood in the way at the last refused attempt ("" if nobody known).
    [[nodiscard]] std::string held_by() const EXCLUDES(m_);

    /// The locker's callbacks (any thread; each replaces the last).
    /// `at_once` (a permit's callbacks): also now, on the handle thread, if
    /// the hold is lost already (its deadline passed) or, for on_suspended,
    /// suspended now; and on_lost is spent when it runs (it runs once; one
    /// set after a loss runs at once).
    void set_on_lost(std::function<void()> cb, bool at_once = false) EXCLUDES(m_);
    void set_on_suspended(std::function<void(SteadyClock::time_point)> cb, bool at_once = false) EXCLUDES(m_);
    void set_on_resumed(std::function<void()> cb) EXCLUDES(m_);

    // SessionHolder
    void kept(const MutexOwner& session) override REQUIRES(io_state);
    void keepalive_failed() override REQUIRES(io_state);
    void ended(const char* why) override REQUIRES(io_state);
    void revoked() override REQUIRES(io_state);

private:
    enum class Phase { idle, waiting, held, lost };
    enum class Callback { lost, suspended, resumed };

    void attempt(std::uint64_t gen);
    void step_at(std::uint64_t gen, SteadyClock::time_point at);
    void granted(std::uint64_t gen, const HoldProof& p, bool in_session);
    void reask(std::uint64_t gen);
    void settle(std::uint64_t gen, std::exception_ptr error);
    void notified(bool registered);
    bool extend(const MutexOwner& lease, bool& resumed) REQUIRES(m_);
    void suspend();
    void lose(std::uint64_t gen, const std::string& why);
    void pay_debt(pqxx::connection& c);
    void release_failed(const std::string& why);
    void watch(std::uint64_t gen, SteadyClock::time_point at);
    std::function<void()> callback(Callback which, SteadyClock::time_point deadline) REQUIRES(m_);
    void run_callback(std::uint64_t gen, Callback which, SteadyClock::time_point deadline = {});
    SteadyClock::duration retry_delay() const;


    const std::shared_ptr<Io> io_;
    const std::unique_ptr<HoldStatements> st_;
    const SteadyClock::duration margin_;
    void register_wait(bool on) REQUIRES(m_);

    mutable Mutex m_ ACQUIRED_AFTER(io_state);
    std::uint64_t subscription_ GUARDED_BY(m_) = 0;
    bool registered_ GUARDED_BY(m_) = false;  // its names registered on the LISTEN connection
    std::function<void()> on_lost_ GUARDED_BY(m_);
    std::function<void(SteadyClock::time_point)> on_suspended_ GUARDED_BY(m_);
    std::function<void()> on_resumed_ GUARDED_BY(m_);
    RunningCallback running_;  // its state under m_ too
    Phase phase_ GUARDED_BY(m_) = Phase::idle;
    bool lost_once_ GUARDED_BY(m_) = false;  // on_lost is spent when it runs (set_on_lost's at_once)
    bool answered_ GUARDED_BY(m_) = false;  // an attempt of this wait was answered (refused, or failed)
    std::uint64_t gen_ GUARDED_BY(m_) = 0;  // the wait or hold tasks belong to
    bool once_ GUARDED_BY(m_) = false;
    bool in_session_ GUARDED_BY(m_) = false;
    bool suspended_ GUARDED_BY(m_) = false;
    bool owed_ GUARDED_BY(m_) = false;  // end()'s release failed: sent before the next attempt (or by the factory)
    HoldProof proof_ GUARDED_BY(m_);
    SteadyClock::time_point deadline_ GUARDED_BY(m_) = {};
    std::function<void(std::exception_ptr)> done_ GUARDED_BY(m_);
    SteadyClock::time_point next_at_ GUARDED_BY(m_) = SteadyClock::time_point::max();  // the next attempt or renewal (I/O)
    NotifyThrottle notify_ GUARDED_BY(m_);  // how soon a NOTIFY may bring the next attempt
    std::string held_by_ GUARDED_BY(m_);
};

}  // namespace simba::pg::detail
