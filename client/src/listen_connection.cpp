#include "listen_connection.hpp"

#include <poll.h>

#include <chrono>

#include "statements.hpp"

namespace simba::pg::detail {

namespace {

long long ms(SteadyClock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

}  // namespace

bool ListenConnection::open(const std::string& conninfo, SteadyClock::time_point now,
                            SteadyClock::duration connect_deadline) {
    close();
    error_.clear();
    conn_ = PQconnectStart(conninfo.c_str());
    if (!conn_) return fail("out of memory");
    if (PQstatus(conn_) == CONNECTION_BAD) return fail(trimmed_message(PQerrorMessage(conn_)));
    state_ = State::connecting;
    connect_poll_ = PGRES_POLLING_WRITING;  // libpq's documented first wait
    deadline_ = now + connect_deadline;
    return true;
}

void ListenConnection::close() {
    if (conn_) PQfinish(conn_);
    conn_ = nullptr;
    state_ = State::closed;
    in_flight_ = false;
    want_write_ = false;
    std::lock_guard<std::mutex> lock(want_m_);
    have_.clear();
    sending_.clear();
}

void ListenConnection::want(const std::string& channel, bool on) {
    std::lock_guard<std::mutex> lock(want_m_);
    if (on)
        want_.insert(channel);
    else
        want_.erase(channel);
}

bool ListenConnection::channels_pending() const {
    std::lock_guard<std::mutex> lock(want_m_);
    return want_ != have_;
}

bool ListenConnection::fail(const std::string& what) {
    error_ = what;
    close();
    return false;
}

short ListenConnection::events() const {
    switch (state_) {
    case State::closed: return 0;
    case State::connecting: return connect_poll_ == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    default: return static_cast<short>(POLLIN | (want_write_ ? POLLOUT : 0));
    }
}

SteadyClock::time_point ListenConnection::next_step(SteadyClock::duration ping_interval) const {
    if (state_ == State::closed) return SteadyClock::time_point::max();
    if (state_ == State::ready && !in_flight_)
        return channels_pending() ? SteadyClock::time_point{} : last_reply_ + ping_interval;  // a channel to send now
    return deadline_;
}

/// LISTEN simba, and the wanted channels' LISTEN and UNLISTEN, in one
/// exchange (a simple query of several statements).
bool ListenConnection::send_listen(SteadyClock::time_point now, SteadyClock::duration reply_deadline) {
    std::string sql = "LISTEN simba";
    {
        std::lock_guard<std::mutex> lock(want_m_);
        sending_ = want_;
        for (auto& c : want_)
            if (!have_.count(c)) sql += "; LISTEN \"" + c + "\"";
        for (auto& c : have_)
            if (!want_.count(c)) sql += "; UNLISTEN \"" + c + "\"";
    }
    if (!PQsendQuery(conn_, sql.c_str())) return fail("LISTEN could not be sent: " + trimmed_message(PQerrorMessage(conn_)));
    const int f = PQflush(conn_);
    if (f < 0) return fail("LISTEN could not be sent: " + trimmed_message(PQerrorMessage(conn_)));
    want_write_ = f == 1;
    in_flight_ = true;
    deadline_ = now + reply_deadline;
    return true;
}

// Reads what arrived: results of the LISTEN in flight, then NOTIFYs.
bool ListenConnection::read_results(SteadyClock::time_point now, Heard& heard) {
    if (want_write_) {
        const int f = PQflush(conn_);
        if (f < 0) return fail(trimmed_message(PQerrorMessage(conn_)));
        want_write_ = f == 1;
    }
    if (!PQconsumeInput(conn_)) return fail(trimmed_message(PQerrorMessage(conn_)));
    while (in_flight_ && !PQisBusy(conn_)) {
        PGresult* r = PQgetResult(conn_);
        if (!r) {  // the exchange is complete
            in_flight_ = false;
            last_reply_ = now;
            state_ = State::ready;
            std::lock_guard<std::mutex> lock(want_m_);
            for (auto& c : sending_)
                if (!have_.count(c)) heard.listening.push_back(c);
            have_ = std::move(sending_);
            sending_.clear();
            break;
        }
        const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        std::string msg = ok ? "" : trimmed_message(PQresultErrorMessage(r));
        PQclear(r);
        if (!ok) return fail("LISTEN failed: " + msg);
    }
    while (PGnotify* n = PQnotifies(conn_)) {
        const std::string channel = n->relname;
        if (channel == "simba") {
            heard.payloads.emplace_back(n->extra);
        } else {
            std::lock_guard<std::mutex> lock(want_m_);
            if (have_.count(channel) || sending_.count(channel)) heard.channels.push_back(channel);
        }
        PQfreemem(n);
    }
    if (PQstatus(conn_) == CONNECTION_BAD) return fail(trimmed_message(PQerrorMessage(conn_)));
    return true;
}

bool ListenConnection::step(SteadyClock::time_point now, short revents, SteadyClock::duration reply_deadline,
                            SteadyClock::duration ping_interval, Heard& heard) {
    switch (state_) {
    case State::closed:
        return true;
    case State::connecting:
        // PQconnectPoll only when the socket is ready for what it waits on.
        if (now >= deadline_) return fail("connect got no answer within its deadline");
        if (!(revents & (events() | POLLERR | POLLHUP))) return true;
        connect_poll_ = PQconnectPoll(conn_);
        if (connect_poll_ == PGRES_POLLING_FAILED) return fail(trimmed_message(PQerrorMessage(conn_)));
        if (connect_poll_ == PGRES_POLLING_OK) {
            if (PQsetnonblocking(conn_, 1) != 0) return fail(trimmed_message(PQerrorMessage(conn_)));
            state_ = State::listening;
            return send_listen(now, reply_deadline);
        }
        return true;
    case State::listening:
    case State::ready:
        if (!read_results(now, heard)) return false;
        if (in_flight_ && now >= deadline_)
            return fail("the server did not answer LISTEN within " + std::to_string(ms(reply_deadline)) + " ms");
        if (!in_flight_ && (now >= last_reply_ + ping_interval || channels_pending()))
            return send_listen(now, reply_deadline);
        return true;
    }
    return true;
}

}  // namespace simba::pg::detail
