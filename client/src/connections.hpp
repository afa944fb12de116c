// simba client (internal): a factory's two connections. The statement
// connection (libpqxx, blocking statements under the StatementWatchdog)
// connects without io_m and reconnects with jittered exponential backoff,
// reset only by a statement that succeeded. The LISTEN connection
// (listen_connection.hpp, asynchronous) follows it to the same server; one
// that misses a deadline reconnects on its own, one the server closed takes
// the statement connection with it (as a lost statement connection takes
// LISTEN), and an idle statement connection the server closed is seen on
// its socket (probe()). See docs/design.md, "Client",
// the "Bounded waits" bullet.
//
// Mostly I/O state (io_state.hpp): what needs io_m says REQUIRES(io_state).
#pragma once

#include <exception>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <pqxx/pqxx>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io_state.hpp"
#include "listen_connection.hpp"
#include "simba/factory.hpp"
#include "simba/log.hpp"
#include "statement_watchdog.hpp"

namespace simba::pg::detail {

/// What the server says on the statement connection outside a statement's
/// reply (a NOTICE; the FATAL it sends before it closes an idle connection):
/// logged, where libpqxx would print it on stderr; the last one kept, for
/// the reason a closed connection gives.
class ServerNotices final : public pqxx::errorhandler {
public:
    explicit ServerNotices(pqxx::connection_base& c) : pqxx::errorhandler(c) {}
    bool operator()(const char msg[]) noexcept override;
    std::string said;
};

class Connections {
public:
    Connections(const FactoryOptions& options, std::string conninfo, std::string listen_info,
                 StatementWatchdog& watchdog);

    /// The I/O thread: the one that reads the LISTEN connection.
    void set_io_thread(std::thread::id id) { io_id_ = id; }

    // ------------------------------------------------- statement connection
    /// Connects (releasing `io_lock` meanwhile: libpq bounds the wait with
    /// connect_timeout per host), then prepares the session and opens
    /// LISTEN. Returns whether it is up; on failure the next try is after
    /// the backoff.
    bool connect(IoLock& io_lock) REQUIRES(io_state);
    /// Shutdown's one reconnect (FactoryOptions::shutdown_timeout): now,
    /// without LISTEN, libpq's connect_timeout cut to that limit (at least
    /// 2 s, libpq's floor) and pinned to the host last reached.
    bool connect_for_shutdown(IoLock& io_lock) REQUIRES(io_state);
    [[nodiscard]] bool up() const { return up_; }
    /// Time for the next connect attempt (while down).
    [[nodiscard]] bool connect_due(SteadyClock::time_point now) const { return !up_ && now >= next_connect_.load(); }
    pqxx::connection& stmt() REQUIRES(io_state) { return *stmt_; }
    /// Logs a failed statement; returns true (and drops both connections,
    /// reconnecting after the backoff) if the connection is lost.
    bool statement_failed(const std::exception& e, const std::string& what) REQUIRES(io_state);
    /// A statement succeeded: the server is really back, reconnects start
    /// from reconnect_initial again.
    void statement_ok() REQUIRES(io_state) { backoff_ = options_.reconnect_initial; }
    /// statement_timeout for the statements from now on (SET when it changes).
    void set_statement_timeout(std::chrono::milliseconds t) REQUIRES(io_state);
    [[nodiscard]] std::chrono::milliseconds statement_timeout() const {
        return std::chrono::milliseconds(stmt_timeout_ms_.load());
    }
    /// How long a statement sent now may take before the watchdog cuts it:
    /// statement_timeout and a half (at least 100 ms more). Any thread.
    [[nodiscard]] SteadyClock::duration statement_deadline() const;
    /// Closes both.
    void drop() REQUIRES(io_state);
    /// I/O thread (nobody else is using the statement connection):
    /// whether the idle statement connection is still there. An idle one
    /// has nothing to read; if its socket is readable, what it holds is
    /// read: a server that closed it (pg_terminate_backend, a pooler
    /// restart, idle_session_timeout) said so and hung up, so it is dropped
    /// with LISTEN (false) now rather than found dead at its next statement.
    bool probe() REQUIRES(io_state);
    /// The statement connection's socket, -1 while down: the I/O thread
    /// polls it while it sleeps, to probe() it as soon as it stirs.
    [[nodiscard]] int stmt_sock() const REQUIRES(io_state) { return up_ && stmt_ ? stmt_->sock() : -1; }

    // ---------------------------------------------------- LISTEN connection
    /// At the top of the I/O loop: applies what happened to
    /// LISTEN while the thread slept (`broke`), retries it when due. Returns
    /// true when LISTEN has just taken effect: every service should attempt
    /// once, for the releases it missed.
    bool after_wake(bool broke, SteadyClock::time_point now) REQUIRES(io_state);
    /// I/O thread only, in poll() without io_m: advances LISTEN and
    /// appends what it heard; false if it failed.
    bool step_listen(short revents, ListenConnection::Heard& heard) EXCLUDES(io_state);
    /// Any thread: LISTEN on a channel besides simba (ListenConnection::want).
    void want_channel(const std::string& channel, bool on) { listen_.want(channel, on); }
    [[nodiscard]] bool channels_pending() const { return listen_.channels_pending(); }
    /// Any thread: a holder of ours may (on) or may no longer wait on
    /// `name`: registered on the LISTEN connection (ListenConnection::want_name).
    void want_name(const std::string& name, bool on) { listen_.want_name(name, on); }
    [[nodiscard]] bool names_pending(SteadyClock::time_point now) const { return listen_.names_pending(now); }
    /// The end of a session holding `name` is announced (ListenConnection::lapses_announced).
    [[nodiscard]] bool lapses_announced(const std::string& name) const { return listen_.lapses_announced(name); }
    /// Announcements stopped since the last call (ListenConnection::take_unannounced).
    [[nodiscard]] bool take_unannounced() { return listen_.take_unannounced(); }
    [[nodiscard]] int listen_sock() const { return listen_.sock(); }
    [[nodiscard]] short listen_events() const { return listen_.events(); }
    [[nodiscard]] bool listen_ready_now() const { return listen_.ready(); }

    /// When the I/O thread must look at the connections again.
    [[nodiscard]] SteadyClock::time_point next_wake() const;

    // ---------------------------------------------------- any thread
    [[nodiscard]] bool connected() const;
    /// Why the last connect failed, when it will fail again or never
    /// succeeded (wrong host, database or role, no server at all): callers
    /// waiting for a lock are told at once. Null once connected, and while a
    /// factory that was connected retries a transient failure.
    [[nodiscard]] std::exception_ptr setup_error() const;
    /// Waits until connected() or `until`; with `or_setup_error`, also
    /// returns (false) as soon as setup_error() is set.
    bool wait_connected(SteadyClock::time_point until, bool or_setup_error = false) const;
    [[nodiscard]] int open_count() const { return open_.load(); }
    [[nodiscard]] std::uint64_t connects() const { return connects_.load(); }

private:
    std::exception_ptr setup_error_locked() const;
    void set_up(bool v);
    /// Drops both connections; the reconnect follows the backoff.
    void lost(LogLevel level = LogLevel::error) REQUIRES(io_state);
    std::chrono::milliseconds next_backoff() REQUIRES(io_state);
    void apply_statement_timeout() REQUIRES(io_state);
    bool connect_to(IoLock& io_lock, const std::string& conninfo, bool listen) REQUIRES(io_state);
    void open_listen() REQUIRES(io_state);
    void close_listen();
    void listen_failed();

    const FactoryOptions& options_;
    const std::string conninfo_;
    const std::string listen_info_;  // empty: poll only
    std::string shutdown_info_ GUARDED_BY(io_state);  // conninfo_ for connect_for_shutdown()
    StatementWatchdog& watchdog_;
    std::thread::id io_id_;

    std::unique_ptr<pqxx::connection> stmt_ GUARDED_BY(io_state);
    // Written with io_state held, by the I/O thread or by a caller's round trip that
    // lost the connection (drop()); atomic because the I/O thread also reads
    // them in next_wake() while it sleeps in poll() without io_m.
    std::atomic<bool> up_{false};
    std::atomic<SteadyClock::time_point> next_connect_{SteadyClock::time_point{}};
    std::chrono::milliseconds backoff_ GUARDED_BY(io_state);
    std::minstd_rand jitter_rng_ GUARDED_BY(io_state);
    std::atomic<std::int64_t> stmt_timeout_ms_;
    std::int64_t applied_timeout_ms_ GUARDED_BY(io_state) = -1;
    std::unique_ptr<ServerNotices> notices_ GUARDED_BY(io_state);  // on stmt_, destroyed before it
    bool said_waiting_ GUARDED_BY(io_state) = false;  // for wait_for_server
    // The setup mistake last logged, and when: logged again only when it
    // changes or a minute has passed (every service retries it each 0.5 s).
    std::string setup_mistake_ GUARDED_BY(io_state);
    SteadyClock::time_point setup_mistake_logged_ GUARDED_BY(io_state){};

    ListenConnection listen_;               // the I/O thread's alone (stepped while it sleeps, without io_state)
    std::atomic<bool> listen_ready_{false};  // LISTEN in place (written by the I/O thread)
    std::atomic<bool> listen_stale_{false};  // dropped by a caller: the I/O thread closes it
    SteadyClock::time_point listen_retry_at_{};
    std::chrono::milliseconds listen_backoff_;

    std::atomic<int> open_{0};
    std::atomic<std::uint64_t> connects_{0};
    mutable std::mutex state_m_;  // a leaf: up_flag_ for connected() and wait_connected()
    std::exception_ptr connect_error_;     // guarded by state_m_: the last connect's failure
    bool connect_error_permanent_ = false; // guarded by state_m_
    mutable std::condition_variable state_cv_;
    bool up_flag_ = false;
};

}  // namespace simba::pg::detail
