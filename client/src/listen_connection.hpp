// simba client (internal): the factory's LISTEN connection, on libpq's
// asynchronous API so that the I/O thread never blocks on it.
//
// It connects (PQconnectStart/PQconnectPoll), sends LISTEN simba and then
// hands over the payloads of NOTIFY simba as they arrive. Every exchange has
// a deadline: the connect, the LISTEN and a liveness ping sent after
// `ping_interval` without one. A connection that misses a deadline (a frozen
// backend, a blackholed server: the bytes are taken, nothing answers, and no
// error ever comes) is reported failed, so the factory reconnects instead of
// waiting forever for wake-ups that will not come. The ping is LISTEN simba
// again: a no-op for the server that keeps pg_stat_activity showing what the
// connection is for.
//
// Besides simba, it listens on the channels asked for with want() (a fair
// lock's waiter is woken on a channel of its own): each exchange also
// LISTENs on the wanted channels it does not have yet and UNLISTENs those no
// longer wanted, and a reconnect LISTENs on all of them again.
//
// It also registers, with simba_wait, every name some holder of this process
// may wait on (want_name()), so that a release under simba.notify =
// registered still notifies it. A name is registered once for all the
// holders that want it; only names whose wish changed are sent, so a
// process with 100,000 names sends each once, not with every exchange.
// A registration the server refused (a release of the name's
// bucket was under way) is sent again after names_retry, doubling up to
// names_retry_max while refusals go on; once it succeeds,
// heard.registered names it: its waiters attempt once more, since a release
// may have gone by unheard before (docs/design.md, "Wake-ups").
//
// While it has names, each exchange also asks simba_waker(): whether the
// server's lapse waker runs and so announces the end of every session. A
// waiter whose name is registered and whose holder's lease is a session's
// then polls only as a backstop (lapses_announced()); when the answer turns
// false or the connection goes, take_unannounced() says so once, and those
// waiters attempt again.
#pragma once

#include <libpq-fe.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "simba/clock.hpp"

namespace simba::pg::detail {

class ListenConnection {
public:
    ListenConnection() = default;
    ~ListenConnection() { close(); }
    ListenConnection(const ListenConnection&) = delete;
    ListenConnection& operator=(const ListenConnection&) = delete;

    /// Starts connecting to `conninfo`; the connect and the LISTEN must be
    /// done by now + `connect_deadline`. Returns false (see error()) if
    /// libpq refuses at once.
    bool open(const std::string& conninfo, SteadyClock::time_point now, SteadyClock::duration connect_deadline);
    void close();

    /// What a step heard.
    struct Heard {
        std::vector<std::string> payloads;   ///< of NOTIFY simba
        std::vector<std::string> channels;   ///< a NOTIFY on a wanted channel, by channel
        std::vector<std::string> listening;  ///< wanted channels whose LISTEN just took effect
        std::vector<std::string> registered;  ///< names just registered (not on a reconnect's first exchange)
        [[nodiscard]] bool empty() const {
            return payloads.empty() && channels.empty() && listening.empty() && registered.empty();
        }
    };

    /// Advances on socket readiness (`revents` from poll() for sock()) or
    /// time: reads NOTIFYs into `heard`, completes the connect, sends and
    /// checks pings and the wanted channels. Returns false when the
    /// connection failed or missed a deadline (then closed; see error()).
    bool step(SteadyClock::time_point now, short revents, SteadyClock::duration reply_deadline,
              SteadyClock::duration ping_interval, Heard& heard);

    /// Any thread: LISTEN on `channel` (an identifier of letters, digits
    /// and _) from the next exchange on, or (on = false) no longer.
    void want(const std::string& channel, bool on);
    /// Any thread: a wanted channel is not listened on yet, or an unwanted
    /// one still is.
    [[nodiscard]] bool channels_pending() const;
    /// Any thread: one more (on) or one fewer holder may wait on `name`;
    /// registered with simba_wait while any does. O(log N) in the names.
    void want_name(const std::string& name, bool on);
    /// Any thread: a name's registration is due to be sent or dropped.
    [[nodiscard]] bool names_pending(SteadyClock::time_point now) const;
    /// Any thread: `name` is registered here and the server said its lapse
    /// waker runs: the end of a session holding it will be announced.
    [[nodiscard]] bool lapses_announced(const std::string& name) const;
    /// Any thread: lapses were announced and no longer are (the waker
    /// stopped, the connection went) since the last call.
    [[nodiscard]] bool take_unannounced();

    [[nodiscard]] bool is_open() const { return conn_ != nullptr; }
    /// Connected and listening.
    [[nodiscard]] bool ready() const { return state_ == State::ready; }
    /// The socket to poll (-1 if none) and the events step() waits for.
    [[nodiscard]] int sock() const { return conn_ ? PQsocket(conn_) : -1; }
    [[nodiscard]] short events() const;
    /// When step() must run at the latest (a deadline or a ping falls due).
    [[nodiscard]] SteadyClock::time_point next_step(SteadyClock::duration ping_interval) const;
    [[nodiscard]] const std::string& error() const { return error_; }
    /// The last failure lost an established connection (the server closed
    /// it or said it ends: 08xxx, 57Pxx), not a deadline or a connect: the
    /// server side of the factory is gone, the statement connection's too
    /// (a pooler restart, a failover, pg_terminate_backend).
    [[nodiscard]] bool lost() const { return lost_; }
    /// The last thing the server said outside a statement's reply: the
    /// reason it closed the connection ("FATAL:  terminating connection due
    /// to idle-session timeout"), if it gave one.
    [[nodiscard]] const std::string& said() const { return said_; }

private:
    enum class State { closed, connecting, listening, ready };

    bool fail(const std::string& what, const std::string& sqlstate = {});
    bool send_listen(SteadyClock::time_point now, SteadyClock::duration reply_deadline);
    bool read_results(SteadyClock::time_point now, Heard& heard);
    void names_sql(SteadyClock::time_point now, std::string& sql);  // want_m_ held
    void names_done(SteadyClock::time_point now, bool first, Heard& heard);  // want_m_ held

    PGconn* conn_ = nullptr;
    State state_ = State::closed;
    PostgresPollingStatusType connect_poll_ = PGRES_POLLING_WRITING;
    bool in_flight_ = false;                   // a LISTEN (first or ping) awaits its reply
    bool want_write_ = false;                  // libpq has output queued (PQflush returned 1)
    SteadyClock::time_point deadline_{};       // of the connect or the reply in flight
    SteadyClock::time_point last_reply_{};     // the last exchange that completed
    std::string error_;
    bool lost_ = false;                        // of the last failure (lost())
    std::string said_;                         // said()

    mutable std::mutex want_m_;       // a leaf: guards want_ and have_
    std::set<std::string> want_;      // channels asked for
    std::set<std::string> have_;      // listened on by this connection
    std::set<std::string> sending_;   // what the exchange in flight makes of have_

    // Registrations (simba_wait), by name: wanted while refs > 0.
    struct Name {
        int refs = 0;
        bool registered = false;  // on this connection
        bool sending = false;     // in the exchange in flight
    };
    std::map<std::string, Name> names_;
    std::set<std::string> dirty_;                // refs > 0 differs from registered, not sending
    std::vector<std::string> sending_names_;     // in the exchange in flight
    std::set<std::string> refused_;              // by the exchange in flight
    SteadyClock::time_point names_retry_at_{};   // after a refusal
    SteadyClock::duration names_backoff_ = names_retry;  // doubles while refusals go on
    bool names_unavailable_ = false;             // simba_wait missing or not granted: never again
    bool announced_ = false;                     // simba_waker() said true on this connection
    bool asking_waker_ = false;                  // the exchange in flight asks it
    bool waker_unavailable_ = false;             // simba_waker missing or not granted: never again
    bool unannounced_ = false;                   // announced_ went from true to false (take_unannounced)
    bool names_live_ = false;                    // a connection is open to send them on
    static constexpr auto names_retry = std::chrono::milliseconds(20);
    static constexpr auto names_retry_max = std::chrono::seconds(1);  // a bucket held for long (a long release, a stranger)
    static constexpr std::size_t names_per_exchange = 10000;  // keeps an exchange well inside its deadline
    void name_settled(std::map<std::string, Name>::iterator it);  // want_m_ held
};

}  // namespace simba::pg::detail
