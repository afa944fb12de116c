// simba client: factories of contend services.
//
// simba::ContendServiceFactory is the backend-neutral interface (a TCK is
// written once against it); simba::pg::ContendServiceFactory is PostgreSQL.
//
// Thread-safety: every member of a factory may be called from any threads
// at once, from callbacks too (a wait_connected() there holds up every
// callback of the factory while it waits). The factory must outlive the
// services, Lockers, Schedulers, Semaphores and Permits made from it; a
// callback may destroy its own service and then the factory. FactoryOptions
// is a plain value, read once by the constructor.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "simba/contender.hpp"
#include "simba/metrics.hpp"
#include "simba/service.hpp"

namespace simba {

class ContendServiceFactory {
public:
    virtual ~ContendServiceFactory() = default;
    /// A new service in status INITIAL for `contender`. The factory must
    /// outlive every service it created.
    [[nodiscard]] virtual std::unique_ptr<MutexContendService> create(
        std::shared_ptr<MutexContender> contender, ContendOptions options = {}) = 0;
};

namespace pg {

class ContendServiceFactory;
namespace detail {
class Io;
std::shared_ptr<Io> io_of(ContendServiceFactory& factory);
}  // namespace detail

struct FactoryOptions {
    /// Where LISTEN simba (push wake-ups) connects. Empty: the same as the
    /// connection string, or none when pooled. Behind a transaction-pooling
    /// PgBouncer LISTEN needs a direct connection to the server: give its
    /// connection string here, or "none" to poll only (a release then
    /// reaches waiters at their next poll instead of at once).
    std::string listen_conninfo;
    /// The connection string leads to a transaction-pooling pooler (PgBouncer
    /// pool_mode = transaction): statements go unprepared and no session
    /// setting is made, so statement_timeout is not set by the factory — set
    /// it on the role (ALTER ROLE app SET statement_timeout = '2s') or use the
    /// pooler's query_timeout. Lease deadlines hold either way.
    bool pooled = false;
    /// Sent as application_name on both connections (unless the connection
    /// string sets one); lets operators and tests find them in pg_stat_activity.
    std::string application_name = "simba-client";
    /// statement_timeout on the statement connection. The factory lowers it
    /// further to half the shortest lease (ttl + transition) in use.
    std::chrono::milliseconds statement_timeout{2000};
    /// lock_timeout on the statement connection (at most statement_timeout;
    /// 0 = none). An attempt that waits this long for a row lock (a user's
    /// fenced transaction on that mutex) fails with 55P03 and is retried
    /// alone, after the batch's renewals: one locked row never costs another
    /// mutex its lease. Not set when pooled (no session settings).
    std::chrono::milliseconds lock_timeout{200};
    /// Reconnect backoff: starts here, doubles, capped at reconnect_max.
    std::chrono::milliseconds reconnect_initial{100};
    std::chrono::milliseconds reconnect_max{5000};
    /// Retry delay after a failed statement on a healthy connection (capped
    /// by a quarter of the service's ttl).
    std::chrono::milliseconds retry_delay{500};
    /// Batching: due attempts (renewals and waiters' polls) of up to
    /// batch_max services go to the server in one statement, sorted by mutex
    /// name. An attempt due within batch_window (at most a tenth of its ttl)
    /// joins an earlier one's batch: with many services the server sees a
    /// few statements a second instead of one per attempt. batch_max = 1
    /// sends one statement per attempt.
    int batch_max = 100;
    std::chrono::milliseconds batch_window{50};
    /// libpq connect_timeout (whole seconds, libpq's minimum is 2, per host
    /// of a multi-host string) and TCP keepalives; each of these and
    /// tcp_user_timeout is used only when the connection string does not set
    /// it. None may be negative (InvalidArgumentError, 22023).
    std::chrono::seconds connect_timeout{5};
    std::chrono::seconds keepalives_idle{5};
    std::chrono::seconds keepalives_interval{2};
    int keepalives_count = 3;
    /// libpq tcp_user_timeout: a TCP connection whose sent data (or
    /// keepalive probes) stay unacknowledged this long is dropped by the
    /// kernel, instead of after Linux's ~15 minutes of retransmissions (a
    /// blackholed server). Statements also have a deadline of their own:
    /// statement_timeout and a half, past which the factory drops the
    /// connection and reconnects, even to a server whose TCP still answers.
    std::chrono::milliseconds tcp_user_timeout{10000};
    /// The LISTEN connection is idle by nature, so nothing would notice it
    /// frozen or blackholed: after this long without an exchange the
    /// factory sends LISTEN again and drops the connection (and reconnects
    /// it; waiters poll meanwhile) if no answer comes within the statement
    /// deadline (statement_timeout and a half).
    std::chrono::milliseconds listen_ping_interval{5000};
    /// NOTIFY simba is a hint, not a command: PostgreSQL has no privileges on
    /// NOTIFY channels, so any role that can connect may send one, in a loop.
    /// A NOTIFY makes the services of its mutex attempt at once (a waiter: a
    /// release; the holder: maybe an admin's simba_force_release), but no
    /// service attempts for a NOTIFY sooner than this after the last attempt
    /// a NOTIFY made it send; NOTIFYs meanwhile are merged into that one. So
    /// a storm of NOTIFYs costs at most one attempt per interval per service,
    /// and a release heard during one waits at most this long. After an
    /// attempt that saw the mutex change hands the next NOTIFY acts at once
    /// again. Semaphore::acquire() retries for a NOTIFY no sooner than this
    /// after its last try. Must be positive.
    std::chrono::milliseconds notify_min_interval{100};
    /// Sessions (extension 1.4; last, so that code initialising the fields
    /// above by position keeps its meaning): the factory opens one session
    /// per lease length (ttl, transition) its services and permits use and
    /// takes every tenure and permit under it; one keepalive per period
    /// renews them all, whatever their number, and a process that dies loses
    /// them all together. A tenure's local deadline follows the keepalive
    /// that proved it (send time + lease - margin), as a renewal's does.
    /// false: each tenure and permit is a lease of its own, renewed on its
    /// own (Simba's protocol, the client before 1.4).
    bool sessions = true;
    /// Destroying the factory while its connection is down, with something
    /// still to send (a release a lost connection left owed, its sessions'
    /// closes), makes a bounded effort first: it reconnects once (to the
    /// host reached last), sends the owed releases and closes the sessions
    /// (one statement each), all within this long (a connect that hangs:
    /// libpq's connect_timeout, at least 2 s). What it could not send is
    /// logged and lapses on the server with its lease. 0: no reconnect at
    /// shutdown.
    std::chrono::milliseconds shutdown_timeout{2000};
    /// A server that cannot be reached before the factory's first
    /// connection is a setup mistake by default: lock(), acquire() and the
    /// other waits throw its ConnectionError (08001) at once. true: it is a
    /// fault to wait out, as after a first connection (their deadlines
    /// still apply; the factory retries after the backoff and says once, as
    /// a warning, that it waits), so a service can start before its
    /// database. A wrong database, role or password still throws at once.
    bool wait_for_server = false;
    /// Where the server's lapse waker runs (extension 1.4, simba_waker():
    /// it announces the end of every session), a waiter whose holder's lease
    /// is a session's polls this rarely instead of at each lease's end: a
    /// backstop, since the NOTIFY brings its attempt at the lapse. Waiters
    /// of holders with leases of their own, and any waiter while LISTEN is
    /// down, poll as before. Must be positive.
    std::chrono::milliseconds announced_lapse_poll{300000};
};

/// PostgreSQL factory. Whatever the number of services: two connections (one
/// for statements, one for LISTEN simba) and two threads (the I/O thread that
/// drives every service from a timer queue, and the handle thread that runs
/// callbacks and fires on_released at lease deadlines).
class ContendServiceFactory final : public simba::ContendServiceFactory {
public:
    /// `conninfo` is a libpq connection string or URI; empty = libpq's
    /// environment (PGHOST, PGPORT, ...). Does not block: the I/O thread
    /// connects, and reconnects with capped exponential backoff.
    explicit ContendServiceFactory(std::string conninfo = {}, FactoryOptions options = {});
    /// Stops services still running (releasing their locks), then the threads.
    ~ContendServiceFactory() override;
    ContendServiceFactory(const ContendServiceFactory&) = delete;
    ContendServiceFactory& operator=(const ContendServiceFactory&) = delete;

    [[nodiscard]] std::unique_ptr<MutexContendService> create(
        std::shared_ptr<MutexContender> contender, ContendOptions options = {}) override;

    /// Stops every one of `services` as its stop() would (their tenures end,
    /// on_released runs, it returns once their callbacks have run), but
    /// releases what they hold with one statement per 1,000 of them instead
    /// of a round trip each: stopping 10,000 services costs 10 statements,
    /// not 10,000. Each must come from this factory, once, and be RUNNING;
    /// otherwise none is stopped (InvalidArgumentError 22023;
    /// IllegalStateError for one not RUNNING).
    void stop(const std::vector<MutexContendService*>& services);

    /// Connections the factory has open right now (0, 1 or 2).
    [[nodiscard]] int connection_count() const;
    /// Connections the factory ever holds at once.
    static constexpr int max_connections = 2;
    /// Threads the factory runs (I/O + handle), whatever the number of services.
    static constexpr int thread_count = 2;
    /// Both connections are up and listening.
    [[nodiscard]] bool connected() const;
    /// Waits until connected(), up to `timeout`; returns connected().
    [[nodiscard]] bool wait_connected(std::chrono::milliseconds timeout) const;
    /// Successful (re)connections so far; 1 after the first connect.
    [[nodiscard]] std::uint64_t connects() const;
    /// A snapshot of the services' metrics per (mutex, contender id): counters
    /// since the factory was made, gauges of now, latency histograms.
    [[nodiscard]] Metrics metrics() const;
    /// The application_name in effect on the connections (the connection
    /// string's, if it sets one, else FactoryOptions::application_name).
    [[nodiscard]] const std::string& application_name() const;
    /// The statement_timeout currently in effect on the statement connection.
    [[nodiscard]] std::chrono::milliseconds statement_timeout() const;

    struct Core;

private:
    friend std::shared_ptr<detail::Io> detail::io_of(ContendServiceFactory& factory);
    std::shared_ptr<Core> core_;
};

}  // namespace pg
}  // namespace simba
