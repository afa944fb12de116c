#include "listen_connection.hpp"

#include <poll.h>

#include <chrono>
#include <utility>

#include "simba/log.hpp"
#include "statements.hpp"

namespace simba::pg::detail {

namespace {

long long ms(SteadyClock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

}  // namespace

bool ListenConnection::open(const std::string& conninfo, SteadyClock::time_point now,
                            SteadyClock::duration connect_deadline) {
    close();
    error_.clear();
    lost_ = false;
    said_.clear();
    conn_ = PQconnectStart(conninfo.c_str());
    if (!conn_) return fail("out of memory");
    // libpq prints what the server says outside a reply on stderr unless told otherwise
    PQsetNoticeProcessor(
        conn_,
        [](void* self, const char* msg) {
            auto& said = static_cast<ListenConnection*>(self)->said_;
            said = trimmed_message(msg);
            log(LogLevel::debug, "server, on the LISTEN connection: " + said);
        },
        this);
    if (PQstatus(conn_) == CONNECTION_BAD) return fail(trimmed_message(PQerrorMessage(conn_)));
    state_ = State::connecting;
    connect_poll_ = PGRES_POLLING_WRITING;  // libpq's documented first wait
    {
        std::lock_guard<std::mutex> lock(want_m_);
        names_live_ = true;
    }
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
    // A new connection registers afresh whatever is wanted.
    sending_names_.clear();
    refused_.clear();
    dirty_.clear();
    names_live_ = false;
    for (auto it = names_.begin(); it != names_.end();) {
        it->second.registered = it->second.sending = false;
        if (it->second.refs <= 0) {
            it = names_.erase(it);
        } else {
            dirty_.insert(it->first);
            ++it;
        }
    }
    names_retry_at_ = {};
    names_backoff_ = names_retry;
    unannounced_ = unannounced_ || announced_;
    announced_ = asking_waker_ = false;
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

void ListenConnection::want_name(const std::string& name, bool on) {
    std::lock_guard<std::mutex> lock(want_m_);
    auto it = names_.try_emplace(name).first;
    it->second.refs += on ? 1 : -1;
    name_settled(it);
}

bool ListenConnection::lapses_announced(const std::string& name) const {
    std::lock_guard<std::mutex> lock(want_m_);
    if (!announced_) return false;
    auto it = names_.find(name);
    return it != names_.end() && it->second.registered;
}

bool ListenConnection::take_unannounced() {
    std::lock_guard<std::mutex> lock(want_m_);
    return std::exchange(unannounced_, false);
}

bool ListenConnection::names_pending(SteadyClock::time_point now) const {
    std::lock_guard<std::mutex> lock(want_m_);
    return names_live_ && !names_unavailable_ && !dirty_.empty() && now >= names_retry_at_;
}

// A name out of any exchange: due to be sent while wish and state differ,
// forgotten once neither wanted nor registered.
void ListenConnection::name_settled(std::map<std::string, Name>::iterator it) {
    auto& n = it->second;
    if (n.sending) return;  // names_done settles it
    if ((n.refs > 0) != n.registered)
        dirty_.insert(it->first);
    else
        dirty_.erase(it->first);
    if (n.refs <= 0 && !n.registered) names_.erase(it);
}

// Appends the registrations and drops that are due to the exchange's SQL.
void ListenConnection::names_sql(SteadyClock::time_point now, std::string& sql) {
    if (names_unavailable_ || dirty_.empty() || now < names_retry_at_) return;
    std::string add, drop;
    for (auto it = dirty_.begin(); it != dirty_.end() && sending_names_.size() < names_per_exchange;) {
        char* lit = PQescapeLiteral(conn_, it->c_str(), it->size());
        if (!lit) break;  // out of memory: the rest stays due
        auto& n = names_.at(*it);
        auto& list = n.registered ? drop : add;
        list += (list.empty() ? "" : ",") + std::string(lit);
        PQfreemem(lit);
        n.sending = true;
        sending_names_.push_back(*it);
        it = dirty_.erase(it);
    }
    if (!add.empty()) sql += "; SELECT pg_catalog.unnest(simba_wait(ARRAY[" + add + "]::text[])) AS refused";
    if (!drop.empty()) sql += "; SELECT simba_wait(ARRAY[" + drop + "]::text[], false) AS dropped";
}

// The exchange completed: what it registered and dropped is now so, but
// for what the server refused (sent again after the backoff).
void ListenConnection::names_done(SteadyClock::time_point now, bool first, Heard& heard) {
    if (!refused_.empty()) {
        names_retry_at_ = now + names_backoff_;
        names_backoff_ = std::min<SteadyClock::duration>(2 * names_backoff_, names_retry_max);
    } else if (!sending_names_.empty()) {
        names_backoff_ = names_retry;
    }
    for (auto& name : sending_names_) {
        auto it = names_.find(name);
        if (it == names_.end()) continue;
        auto& n = it->second;
        n.sending = false;
        if (!refused_.count(name)) {
            n.registered = !n.registered;
            if (n.registered && !first) heard.registered.push_back(name);
        }
        name_settled(it);
    }
    sending_names_.clear();
    refused_.clear();
}

bool ListenConnection::fail(const std::string& what, const std::string& sqlstate) {
    error_ = what;
    lost_ = (state_ == State::listening || state_ == State::ready) &&
            (PQstatus(conn_) == CONNECTION_BAD || sqlstate.rfind("08", 0) == 0 || sqlstate.rfind("57P", 0) == 0);
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
    if (state_ == State::ready && !in_flight_) {
        if (channels_pending()) return SteadyClock::time_point{};  // a channel to send now
        std::lock_guard<std::mutex> lock(want_m_);
        auto t = last_reply_ + ping_interval;
        if (!names_unavailable_ && !dirty_.empty()) t = std::min(t, names_retry_at_);
        return t;
    }
    return deadline_;
}

/// LISTEN simba, the wanted channels' LISTEN and UNLISTEN, and the names'
/// registrations, in one exchange (a simple query of several statements).
bool ListenConnection::send_listen(SteadyClock::time_point now, SteadyClock::duration reply_deadline) {
    std::string sql = "LISTEN simba";
    {
        std::lock_guard<std::mutex> lock(want_m_);
        sending_ = want_;
        for (auto& c : want_)
            if (!have_.count(c)) sql += "; LISTEN \"" + c + "\"";
        for (auto& c : have_)
            if (!want_.count(c)) sql += "; UNLISTEN \"" + c + "\"";
        names_sql(now, sql);
        // After the registrations: a waker that answers true stays while they do (lapse.c).
        asking_waker_ = !waker_unavailable_ && !names_unavailable_ && !names_.empty();
        if (asking_waker_) sql += "; SELECT simba_waker() AS waker";
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
            const bool first = state_ == State::listening;  // a reconnect attempts everything anyway
            state_ = State::ready;
            std::lock_guard<std::mutex> lock(want_m_);
            for (auto& c : sending_)
                if (!have_.count(c)) heard.listening.push_back(c);
            have_ = std::move(sending_);
            sending_.clear();
            names_done(now, first, heard);
            asking_waker_ = false;
            break;
        }
        const auto status = PQresultStatus(r);
        if (status == PGRES_TUPLES_OK && PQnfields(r) == 1 && std::string(PQfname(r, 0)) == "refused") {
            std::lock_guard<std::mutex> lock(want_m_);
            for (int i = 0; i < PQntuples(r); ++i) refused_.insert(PQgetvalue(r, i, 0));
        }
        if (status == PGRES_TUPLES_OK && PQnfields(r) == 1 && std::string(PQfname(r, 0)) == "waker") {
            std::lock_guard<std::mutex> lock(want_m_);
            const bool announced = PQntuples(r) == 1 && std::string(PQgetvalue(r, 0, 0)) == "t";
            unannounced_ = unannounced_ || (announced_ && !announced);
            announced_ = announced;
        }
        const bool ok = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
        std::string msg = ok ? "" : trimmed_message(PQresultErrorMessage(r));
        const char* code = ok ? nullptr : PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const std::string sqlstate = code ? code : "";
        PQclear(r);
        if (!ok) {
            // An extension without simba_wait, or a role not granted it: no
            // registrations from now on (the process is woken under
            // simba.notify = always, and polls under registered), not a
            // connection that fails again on every exchange.
            std::lock_guard<std::mutex> lock(want_m_);
            if (!sending_names_.empty() && (sqlstate == "42883" || sqlstate == "42501")) {
                names_unavailable_ = true;
                msg += " (this process no longer registers its waits: under simba.notify = registered it polls)";
            } else if (asking_waker_ && (sqlstate == "42883" || sqlstate == "42501")) {
                waker_unavailable_ = true;  // an extension before simba_waker: waiters poll at each lease's end
                msg += " (this process no longer asks simba_waker(): its waiters poll at each lease's end)";
            }
        }
        if (!ok) return fail("LISTEN failed: " + msg, sqlstate);
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
        if (!in_flight_ && (now >= last_reply_ + ping_interval || channels_pending() || names_pending(now)))
            return send_listen(now, reply_deadline);
        return true;
    }
    return true;
}

}  // namespace simba::pg::detail
