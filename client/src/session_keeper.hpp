// simba client (internal): SessionKeeper, the factory's sessions at work
// (FactoryOptions::sessions; docs/design.md, "Sessions"): it opens the
// session of a lease length when an attempt or a grant first needs it,
// sends each keepalive when due and hands its proof to the tenures and
// holders under it, and ends what a session held when the session ends
// (on the server, or at shutdown). Without sessions it keeps nothing.
// I/O state (io_state.hpp).
#pragma once

#include <functional>

#include "connections.hpp"
#include "io_state.hpp"
#include "factory_metrics.hpp"
#include "service_events.hpp"
#include "sessions.hpp"
#include "simba/factory.hpp"
#include "statement_watchdog.hpp"

namespace simba::pg::detail {

class SessionKeeper {
public:
    /// `schedule`: the service's next attempt at that time (ServiceDriver's queue).
    using Schedule = std::function<void(const ServicePtr&, SteadyClock::time_point)>;

    SessionKeeper(const FactoryOptions& options, Connections& connections, ServiceEvents& events,
                  FactoryMetrics& metrics, StatementWatchdog& watchdog, Schedule schedule)
        : options_(options), conn_(connections), events_(events), metrics_(metrics), watchdog_(watchdog),
          schedule_(std::move(schedule)) {}

    /// A running service of that lease length (its session keeps its tenures).
    void join(const ServicePtr& svc) REQUIRES(io_state) {
        if (options_.sessions) leases_.join(svc);
    }
    void leave(const ServicePtr& svc) REQUIRES(io_state) {
        if (options_.sessions) leases_.leave(svc);
    }
    /// The session `svc` attempts under, opened first if none is (a
    /// statement of its own): its id, or nullptr without sessions. Throws
    /// what the open throws.
    const char* session_for(const ServicePtr& svc) REQUIRES(io_state);
    /// `svc`'s attempt was answered SB004: the session it used, if still
    /// the open one, has ended.
    void ended_under(const ServicePtr& svc) REQUIRES(io_state);
    /// A permit's or a lock hold's grant (detail::Io::grant_in_session):
    /// `grant` runs under the session of `holder`'s lease length (opened
    /// if need be; once more under a new one if it had ended), which keeps
    /// the holder from then on if it grants.
    bool grant_in_session(const HolderPtr& holder, const std::function<bool(const SessionProof*)>& grant)
        REQUIRES(io_state);
    /// `holder` is no longer held: its session no longer keeps it.
    void leave(const HolderPtr& holder) REQUIRES(io_state);

    /// Sends the keepalives due at `now` while the connection is up.
    void keep_due(SteadyClock::time_point now) REQUIRES(io_state) {
        while (auto* l = conn_.up() ? leases_.due(now) : nullptr) keepalive(*l);
    }
    /// Every open session's keepalive is due now (after a reconnect).
    void all_due(SteadyClock::time_point now) REQUIRES(io_state) { leases_.all_due(now); }
    [[nodiscard]] SteadyClock::time_point next_due() const REQUIRES(io_state) { return leases_.next_due(); }
    /// The connection was lost: the holders are suspended (the services'
    /// tenures are told by their own events).
    void connection_lost() REQUIRES(io_state);
    [[nodiscard]] bool any_open() REQUIRES(io_state);
    /// Shutdown: every session is closed, one statement each releasing all
    /// it holds; its services' tenures end here first.
    void close_sessions() REQUIRES(io_state);

private:
    void open(SessionLease& l) REQUIRES(io_state);
    void keepalive(SessionLease& l) REQUIRES(io_state);
    void session_ended(SessionLease& l) REQUIRES(io_state);
    void close_session(SessionLease& l, const char* why) REQUIRES(io_state);
    void suspend(SessionLease& l) REQUIRES(io_state);
    void end_holders(SessionLease& l, const char* why) REQUIRES(io_state);

    const FactoryOptions& options_;
    Connections& conn_;
    ServiceEvents& events_;
    FactoryMetrics& metrics_;
    StatementWatchdog& watchdog_;
    const Schedule schedule_;
    Sessions leases_ GUARDED_BY(io_state);
};

}  // namespace simba::pg::detail
