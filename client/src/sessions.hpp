// simba client (internal): a factory's sessions (docs/design.md, "Sessions"
// and "Client"). One per lease length (ttl, transition) its services and
// permits use, opened by the first attempt that needs it. Its keepalive, one
// statement per period whatever the number of tenures and permits under it,
// renews them all; once nothing uses it, it is closed at its next keepalive
// instead; at shutdown one statement per session releases everything. I/O
// state: SessionKeeper's (io_state.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>

#include "io_state.hpp"
#include "service_state.hpp"
#include "statements.hpp"

namespace simba::pg::detail {

/// What a session keeps alive besides services' tenures: a LockHold
/// (lock_hold.cpp), the hold of a semaphore's permit, a SharedLocker or a
/// MultiLocker. Called with io_state held (io_state.hpp): quick, no
/// statements.
class SessionHolder {
public:
    SessionHolder(std::chrono::microseconds t, std::chrono::microseconds tr) : ttl(t), transition(tr) {}
    virtual ~SessionHolder() = default;
    /// The lease length of its session.
    const std::chrono::microseconds ttl;
    const std::chrono::microseconds transition;
    /// The open or a keepalive proved the session until `session`'s
    /// transition deadline.
    virtual void kept(const MutexOwner& session) REQUIRES(io_state) = 0;
    /// A keepalive failed; it is retried until the session's end.
    virtual void keepalive_failed() REQUIRES(io_state) = 0;
    /// Nothing under the session is held any more (ended on the server,
    /// or closed at shutdown).
    virtual void ended(const char* why) REQUIRES(io_state) = 0;
    /// An operator took one of the session's tenures (simba_force_release:
    /// its `revoked` count grew): a holder of tenures checks its own.
    virtual void revoked() REQUIRES(io_state) {}
};
using HolderPtr = std::shared_ptr<SessionHolder>;

struct SessionLease {
    SessionLease(std::chrono::microseconds t, std::chrono::microseconds tr) : ttl(t), transition(tr) {}
    const std::chrono::microseconds ttl;
    const std::chrono::microseconds transition;
    SessionProof proof;  // the open or keepalive that last proved it; proof.id empty: none open
    SteadyClock::time_point next_at = SteadyClock::time_point::max();  // its keepalive is due (max: none open)
    std::unordered_set<ServicePtr> members;  // the running services of this lease length
    std::unordered_set<HolderPtr> holders;   // the holds (permits, lockers') held under it

    [[nodiscard]] bool is_open() const { return !proof.id.empty(); }
    [[nodiscard]] bool unused() const { return members.empty() && holders.empty(); }
    /// The end of the session as its last proof shows it on the steady clock.
    [[nodiscard]] SteadyClock::time_point end() const { return proof.lease.transition_deadline(); }
};

class Sessions {
public:
    /// The session of `svc`'s lease length (created, not opened, on first use).
    SessionLease& of(const ServiceState& svc) { return of(svc.options.ttl, svc.options.transition); }
    SessionLease& of(std::chrono::microseconds ttl, std::chrono::microseconds transition);
    void join(const ServicePtr& svc) { of(*svc).members.insert(svc); }
    void leave(const ServicePtr& svc) { of(*svc).members.erase(svc); }
    /// A session whose keepalive is due by `now`, or nullptr.
    SessionLease* due(SteadyClock::time_point now);
    [[nodiscard]] SteadyClock::time_point next_due() const;
    /// Every open session's keepalive is due now (after a reconnect).
    void all_due(SteadyClock::time_point now);
    std::map<std::pair<std::int64_t, std::int64_t>, SessionLease>& all() { return leases_; }

    // One statement each on `c`; they throw what the statement throws.
    /// Opens `l` (a new session id) and times its first keepalive.
    static void open(pqxx::connection& c, SessionLease& l);
    /// Renews `l`; returns whether its `revoked` count grew (an admin took
    /// one of its tenures: the holders check theirs).
    static bool keepalive(pqxx::connection& c, SessionLease& l);
    /// Closes `l` (releasing what it holds) and forgets it.
    static void close(pqxx::connection& c, SessionLease& l);
    /// `l` is no longer open (the next use opens a new session); returns its id.
    static std::string forget(SessionLease& l);

private:
    static void proven(SessionLease& l, const pqxx::row& row, SteadyClock::time_point anchor);

    std::map<std::pair<std::int64_t, std::int64_t>, SessionLease> leases_;
};

}  // namespace simba::pg::detail
