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
#pragma once

#include <libpq-fe.h>

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
        [[nodiscard]] bool empty() const { return payloads.empty() && channels.empty() && listening.empty(); }
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

    [[nodiscard]] bool is_open() const { return conn_ != nullptr; }
    /// Connected and listening.
    [[nodiscard]] bool ready() const { return state_ == State::ready; }
    /// The socket to poll (-1 if none) and the events step() waits for.
    [[nodiscard]] int sock() const { return conn_ ? PQsocket(conn_) : -1; }
    [[nodiscard]] short events() const;
    /// When step() must run at the latest (a deadline or a ping falls due).
    [[nodiscard]] SteadyClock::time_point next_step(SteadyClock::duration ping_interval) const;
    [[nodiscard]] const std::string& error() const { return error_; }

private:
    enum class State { closed, connecting, listening, ready };

    bool fail(const std::string& what);
    bool send_listen(SteadyClock::time_point now, SteadyClock::duration reply_deadline);
    bool read_results(SteadyClock::time_point now, Heard& heard);

    PGconn* conn_ = nullptr;
    State state_ = State::closed;
    PostgresPollingStatusType connect_poll_ = PGRES_POLLING_WRITING;
    bool in_flight_ = false;                   // a LISTEN (first or ping) awaits its reply
    bool want_write_ = false;                  // libpq has output queued (PQflush returned 1)
    SteadyClock::time_point deadline_{};       // of the connect or the reply in flight
    SteadyClock::time_point last_reply_{};     // the last exchange that completed
    std::string error_;

    mutable std::mutex want_m_;       // a leaf: guards want_ and have_
    std::set<std::string> want_;      // channels asked for
    std::set<std::string> have_;      // listened on by this connection
    std::set<std::string> sending_;   // what the exchange in flight makes of have_
};

}  // namespace simba::pg::detail
