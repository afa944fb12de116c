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
#pragma once

#include <libpq-fe.h>

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

    /// Advances on socket readiness (`revents` from poll() for sock()) or
    /// time: reads NOTIFYs into `payloads`, completes the connect, sends and
    /// checks pings. Returns false when the connection failed or missed a
    /// deadline (then closed; see error()).
    bool step(SteadyClock::time_point now, short revents, SteadyClock::duration reply_deadline,
              SteadyClock::duration ping_interval, std::vector<std::string>& payloads);

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
    bool read_results(SteadyClock::time_point now, std::vector<std::string>& payloads);

    PGconn* conn_ = nullptr;
    State state_ = State::closed;
    PostgresPollingStatusType connect_poll_ = PGRES_POLLING_WRITING;
    bool in_flight_ = false;                   // a LISTEN (first or ping) awaits its reply
    bool want_write_ = false;                  // libpq has output queued (PQflush returned 1)
    SteadyClock::time_point deadline_{};       // of the connect or the reply in flight
    SteadyClock::time_point last_reply_{};     // the last exchange that completed
    std::string error_;
};

}  // namespace simba::pg::detail
