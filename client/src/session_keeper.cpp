#include "session_keeper.hpp"

#include <algorithm>
#include <vector>

#include "simba/log.hpp"

namespace simba::pg::detail {

using std::chrono::milliseconds;

/// The session `svc` attempts under, opened first if none is (a statement of
/// its own): its id, or nullptr without sessions. Throws what the open throws.
const char* SessionKeeper::session_for(const ServicePtr& svc) {
    if (!options_.sessions) return nullptr;
    auto& l = leases_.of(*svc);
    if (!l.is_open()) {
        auto watch = watchdog_.watch(conn_.stmt().sock());
        open(l);
    }
    svc->session = l.proof.id;
    return svc->session.c_str();
}

void SessionKeeper::open(SessionLease& l) {
    metrics_.count_session_statement();
    Sessions::open(conn_.stmt(), l);
    log(LogLevel::debug, "opened session " + l.proof.id);
}

/// One keepalive renews every tenure under the session. A session no
/// running service uses is closed instead.
void SessionKeeper::keepalive(SessionLease& l) {
    if (l.unused()) return close_session(l, "nothing is held under it");
    metrics_.count_session_statement();
    try {
        bool revoked;
        {
            // A keepalive still in flight at the session's proven end proves
            // nothing more (as a renewal); one sent after it must still be
            // answered (SB004, or a session the server kept longer).
            const auto end = l.end();
            auto watch = watchdog_.watch(conn_.stmt().sock(),
                                         end > SteadyClock::now() ? end : SteadyClock::time_point::max());
            revoked = Sessions::keepalive(conn_.stmt(), l);
        }
        conn_.statement_ok();
        const auto now = SteadyClock::now();
        for (auto& s : l.members) {
            if (s->session != l.proof.id || !events_.keepalive(s, l.proof.lease) || !revoked) continue;
            s->verify = true;  // an admin took one of the session's tenures: each holder checks its own
            schedule_(s, now);
        }
        // A copy: a holder may leave the session from here.
        for (auto& h : std::vector<HolderPtr>(l.holders.begin(), l.holders.end())) {
            h->kept(l.proof.lease);
            if (revoked) h->revoked();
        }
    } catch (const std::exception& e) {
        if (conn_.statement_failed(e, "keepalive of session " + l.proof.id)) return;  // due again on reconnect
        if (sqlstate_of(e) == "SB004") return session_ended(l);
        suspend(l);
        const auto quarter = std::chrono::duration_cast<milliseconds>(l.ttl / 4);
        l.next_at = SteadyClock::now() + std::max(milliseconds(10), std::min(options_.retry_delay, quarter));
    }
}

/// The server says the session has ended (SB004): nothing under it is held
/// any more. Its tenures end now; its services contend again (a single
/// tenure's is over), under a new session.
void SessionKeeper::session_ended(SessionLease& l) {
    const auto id = Sessions::forget(l);
    log(LogLevel::warning, "session " + id + " has ended on the server: its tenures and permits are lost");
    end_holders(l, "its session ended on the server");
    const auto now = SteadyClock::now();
    for (auto& s : l.members) {
        if (s->session != id) continue;
        s->session.clear();
        if (s->last.is_owner(s->id)) {
            const MutexOwner prev = std::exchange(s->last, MutexOwner::none(s->mutex, now));
            events_.apply(s, prev, s->last);
        }
        schedule_(s, now);
    }
}

void SessionKeeper::close_session(SessionLease& l, const char* why) {
    const auto id = l.proof.id;
    try {
        metrics_.count_session_statement();
        auto watch = watchdog_.watch(conn_.stmt().sock());
        Sessions::close(conn_.stmt(), l);
        conn_.statement_ok();
        log(LogLevel::debug, "closed session " + id + ": " + why);
    } catch (const std::exception& e) {
        // It ends on the server at its deadline anyway.
        conn_.statement_failed(e, "close of session " + id);
    }
}

void SessionKeeper::close_sessions() {
    for (auto& [key, l] : leases_.all()) {
        end_holders(l, "the factory shut down");
        if (!l.is_open()) continue;
        // Each tenure ends here before the close can hand it to a waiter
        // (as stop() does): the rows stop() would release go with the session.
        for (auto& s : l.members) {
            if (s->session != l.proof.id) continue;
            events_.end_locally(s);
            s->last = MutexOwner::none(s->mutex);
            s->unknown = false;
        }
        if (conn_.up())
            close_session(l, "the factory shuts down");
        else
            log(LogLevel::error, "session " + l.proof.id +
                                     " not closed at shutdown (no connection): what it holds lapses at its end");
    }
}

/// A keepalive of `l` failed: what is held under it is suspended until one
/// gets through (or ends at its deadline).
void SessionKeeper::suspend(SessionLease& l) {
    for (auto& s : l.members)
        if (s->session == l.proof.id) events_.suspend(s);
    for (auto& h : l.holders) h->keepalive_failed();
}

void SessionKeeper::end_holders(SessionLease& l, const char* why) {
    for (auto& h : std::exchange(l.holders, {})) h->ended(why);
}


bool SessionKeeper::grant_in_session(const HolderPtr& holder, const std::function<bool(const SessionProof*)>& grant) {
    if (!options_.sessions) return grant(nullptr);
    auto& l = leases_.of(holder->ttl, holder->transition);
    for (int tries = 0;; ++tries) {
        if (!l.is_open()) open(l);  // watched by the caller (Io::run)
        try {
            if (!grant(&l.proof)) return false;
        } catch (const std::exception& e) {
            // Its session ended before the grant: once more under a new one.
            if (tries > 0 || sqlstate_of(e) != "SB004") throw;
            session_ended(l);
            continue;
        }
        l.holders.insert(holder);
        return true;
    }
}

void SessionKeeper::leave(const HolderPtr& holder) {
    leases_.of(holder->ttl, holder->transition).holders.erase(holder);
}

void SessionKeeper::ended_under(const ServicePtr& svc) {
    auto& l = leases_.of(*svc);
    if (l.is_open() && l.proof.id == svc->session) session_ended(l);
}

void SessionKeeper::connection_lost() {
    for (auto& [key, l] : leases_.all())
        for (auto& h : l.holders) h->keepalive_failed();
}

bool SessionKeeper::any_open() {
    for (auto& [key, l] : leases_.all())
        if (l.is_open()) return true;
    return false;
}

}  // namespace simba::pg::detail
