// simba client (internal): what the I/O thread does for the services:
// starts and stops them, sends their attempts (renewals and waiters' polls)
// one at a time or batched, applies the replies, and turns NOTIFYs into
// early attempts. I/O state (io_state.hpp).
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "attempt_queue.hpp"
#include "connections.hpp"
#include "io_state.hpp"
#include "factory_metrics.hpp"
#include "owed_releases.hpp"
#include "service_events.hpp"
#include "service_registry.hpp"
#include "session_keeper.hpp"
#include "simba/factory.hpp"
#include "statement_watchdog.hpp"

namespace simba::pg::detail {

class ServiceDriver {
public:
    ServiceDriver(const FactoryOptions& options, Connections& connections, ServiceEvents& events,
               FactoryMetrics& metrics, StatementWatchdog& watchdog)
        : options_(options), conn_(connections), events_(events), metrics_(metrics), watchdog_(watchdog),
          sessions_(options, connections, events, metrics, watchdog,
                    [this](const ServicePtr& svc, SteadyClock::time_point at) {
                        assert_io_held();  // SessionKeeper's calls hold it
                        schedule(svc, at);
                    }) {}

    /// Starts `svc`: its first attempt now, on this thread if `here`, else
    /// from the queue.
    void start(const ServicePtr& svc, bool here) REQUIRES(io_state);
    /// Stops `svcs`, releasing by id (one statement for them all) each that
    /// may hold the lease.
    void stop(const std::vector<ServicePtr>& svcs) REQUIRES(io_state);
    /// Sends the attempts due now (one batch).
    void run_due(SteadyClock::time_point now) REQUIRES(io_state);
    /// Every running service attempts at `now` (after a reconnect); only
    /// those that do not hold the lock with `waiters_only` (once LISTEN is
    /// in place: a release it missed concerns them, an owner renews anyway).
    void attempt_all(SteadyClock::time_point now, bool waiters_only = false) REQUIRES(io_state);
    /// The connection was lost: every held tenure is suspended (no renewal
    /// can succeed before a reconnect).
    void connection_lost() REQUIRES(io_state);
    /// Push wake-ups: the services of these mutexes attempt now, or one
    /// notify_min_interval after the last attempt a NOTIFY caused. With
    /// `waiters_only` (their registration just took effect: a release may
    /// have gone by unheard), only those that do not hold.
    void notified(const std::vector<std::string>& names, bool waiters_only = false) REQUIRES(io_state);
    /// Fair waiters' channels: a NOTIFY on them, or their LISTEN just took
    /// effect: each of those services attempts now (rate-limited as a NOTIFY).
    void woken(const std::vector<std::string>& channels) REQUIRES(io_state);
    /// Connecting failed with a setup mistake: when_owner() callbacks hear it.
    void setup_failed(const std::exception_ptr& error) REQUIRES(io_state);
    /// The factory's sessions (grants in a session, shutdown's closes).
    SessionKeeper& sessions() REQUIRES(io_state) { return sessions_; }
    /// A release that failed for something a session may hold (the
    /// session's keepalives would keep it for good): `pay` sends it again
    /// (throwing what its statement throws) until it succeeds.
    void owe(std::function<void(pqxx::connection&)> pay, std::string what) REQUIRES(io_state);
    /// Shutdown: something is left to send (an owed release, a session to
    /// close, a running service to release).
    [[nodiscard]] bool unfinished() REQUIRES(io_state);
    /// Shutdown: sends every owed release now, whatever its retry time;
    /// what cannot be sent is logged and forgotten (it lapses with its
    /// session on the server).
    void pay_owed_at_exit() REQUIRES(io_state);
    /// When the next attempt, keepalive or owed release is due.
    SteadyClock::time_point next_due() REQUIRES(io_state) {
        return std::min({queue_.next_due(), sessions_.next_due(), owed_.next_due()});
    }

    [[nodiscard]] const ServiceRegistry& registry() const { return registry_; }
    [[nodiscard]] std::size_t running() const REQUIRES(io_state) { return registry_.all().size(); }

private:
    void register_wait(const ServicePtr& svc, bool on) REQUIRES(io_state);
    void schedule(const ServicePtr& svc, SteadyClock::time_point at) REQUIRES(io_state) {
        queue_.schedule(svc, at, registry_.all().size());
    }
    static bool begin_attempt(const ServicePtr& svc) REQUIRES(io_state);
    static SteadyClock::time_point serves_until(const ServicePtr& svc, bool renewing);
    void attempt(const ServicePtr& svc) REQUIRES(io_state) { attempt(svc, begin_attempt(svc)); }
    void attempt(const ServicePtr& svc, bool renewing) REQUIRES(io_state);
    void attempt_batch(std::vector<ServicePtr>& batch) REQUIRES(io_state);
    void finish_attempt(const ServicePtr& svc, const pqxx::row& row, SteadyClock::time_point anchor) REQUIRES(io_state);
    void retry_later(const ServicePtr& svc, bool renewing) REQUIRES(io_state);
    bool give_back(const ServicePtr& svc) REQUIRES(io_state);
    bool release(const ServicePtr& svc, const char* what) REQUIRES(io_state);
    std::vector<bool> release(std::vector<ServicePtr>& owners) REQUIRES(io_state);
    std::chrono::milliseconds retry_delay(const ServicePtr& svc) const;
    void update_statement_timeout() REQUIRES(io_state);
    bool rearm(const ServicePtr& svc) REQUIRES(io_state);
    void listen_for(const ServicePtr& svc) REQUIRES(io_state);
    void fair_reply(const ServicePtr& svc, const pqxx::row& row) REQUIRES(io_state);

    const FactoryOptions& options_;
    Connections& conn_;
    ServiceEvents& events_;
    FactoryMetrics& metrics_;
    StatementWatchdog& watchdog_;
    AttemptQueue queue_ GUARDED_BY(io_state);
    ServiceRegistry registry_;  // its own rules
    SessionKeeper sessions_ GUARDED_BY(io_state);
    // Fair waiters by wake channel, while running.
    std::unordered_map<std::string, ServicePtr> channels_ GUARDED_BY(io_state);
    OwedReleases owed_ GUARDED_BY(io_state){options_.retry_delay};
};

}  // namespace simba::pg::detail
