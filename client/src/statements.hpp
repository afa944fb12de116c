// simba client (internal): the SQL the factory sends and how it reads the
// answers: the owner row, server times as epoch microseconds, SQLSTATEs.
#pragma once

#include <cstddef>
#include <exception>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "simba/owner.hpp"

namespace simba::pg::detail {

/// simba_acquire($1 mutex, $2 id, $3 ttl µs, $4 transition µs, $5 session
/// id or NULL): one owner row (under a session: the session's times).
extern const char* const kAcquireSql;
/// Many attempts in one statement ($1..$5 arrays); column 8 = the attempt's
/// 1-based index.
extern const char* const kAcquireBatchSql;
/// simba_renew($1 mutex, $2 id, $3 fence, $4 ttl µs, $5 transition µs):
/// renews that tenure only, never takes the mutex; one owner row.
extern const char* const kRenewSql;
/// simba_fair_acquire($1 mutex, $2 id, $3 ttl µs, $4 transition µs, $5
/// session id or NULL): the owner row, then column 8 = the caller's place in
/// the queue (NULL: it holds the mutex), column 9 = its wake channel.
extern const char* const kFairAcquireSql;
/// simba_release($1 mutex, $2 id): true if it was the holder.
extern const char* const kReleaseSql;
/// simba_fair_release($1 mutex, $2 id): true if it was the holder (a
/// waiter's place is withdrawn either way); wakes the next in the queue.
extern const char* const kFairReleaseSql;
/// simba_release (simba_fair_release where $3 bool[] says so) over $1
/// mutexes[], $2 ids[]: a row per pair, in order;
/// at most kReleaseBatchMax pairs a statement (about 30 ms: 200 took 6 ms
/// in pg.Handoff.StoppingManyServicesAtOnce...).
extern const char* const kReleaseBatchSql;
constexpr std::ptrdiff_t kReleaseBatchMax = 1000;
/// simba_acquire_all($1 mutexes[], $2 id, $3 ttl µs, $4 transition µs, $5
/// session id or NULL): an owner row per mutex, in byte order of the names.
extern const char* const kAcquireAllSql;
/// simba_renew of each of $1 mutexes[] by its fence in $3 int8[] for $2 id
/// ($4 ttl µs, $5 transition µs): owner rows in the order given.
extern const char* const kRenewAllSql;
/// simba_release_all($1 mutexes[], $2 id): how many were released.
extern const char* const kReleaseAllSql;
/// simba_rwlock_acquire($1 rwlock, $2 id, $3 mode, $4 ttl µs, $5 transition
/// µs, $6 session id or NULL): held as asked, fence, acquired_at, ttl_at,
/// transition_at, current_at (epoch µs), mode.
extern const char* const kRwlockAcquireSql;
/// simba_rwlock_release($1 rwlock, $2 id).
extern const char* const kRwlockReleaseSql;
/// simba_session_open($1 ttl µs, $2 transition µs), simba_session_keepalive($1
/// id): one session row (parse_session).
extern const char* const kSessionOpenSql;
extern const char* const kSessionKeepaliveSql;
/// simba_session_close($1 id): how many tenures and permits it released.
extern const char* const kSessionCloseSql;

/// A session row as the client reads it: its id, its lease as an owner row
/// (to_steady, transition_deadline and ContendPeriod::owner_delay apply), and
/// how many of its tenures were taken by simba_force_release so far.
struct SessionProof {
    std::string id;
    MutexOwner lease;
    std::int64_t revoked = 0;
};
SessionProof parse_session(const pqxx::row& r, SteadyClock::time_point anchor);

/// A PostgreSQL array literal of `items`, every element quoted.
template <typename T, typename F>
std::string array_literal(const std::vector<T>& items, F&& element) {
    std::string out = "{";
    for (const auto& it : items) {
        if (out.size() > 1) out += ',';
        out += '"';
        for (char c : element(it)) {
            if (c == '"' || c == '\\') out += '\\';
            out += c;
        }
        out += '"';
    }
    return out + "}";
}

/// SQLSTATE of a libpqxx error ("" if none).
std::string sqlstate_of(const std::exception& e);
/// A libpq or libpqxx error text without its trailing newline (and spaces);
/// libpqxx's "Could not obtain client encoding: not connected" in plain words.
std::string trimmed_message(std::string msg);
/// Whether an attempt failing with `sqlstate` fails the same way when
/// retried (a setup mistake: the extension missing or too old, no grant, a
/// bad argument, no such database, authentication), so callers are told at
/// once instead of retrying until their deadline.
bool permanent_sqlstate(const std::string& sqlstate);
/// A setup mistake's server message (42883: the extension missing or old;
/// 42501: no grant) cut to its first line, with what to do about it.
std::string with_setup_hint(const std::string& sqlstate, const std::string& msg);
/// `e` (being handled: call it in a catch block) as the matching
/// simba::Error with the server's message and SQLSTATE; a ConnectionError
/// (08006) when the statement's connection was `lost`.
std::exception_ptr typed_error(const std::exception& e, bool lost = false);
/// The SQLSTATE of a failed connect: libpq reports none for a connection it
/// could not open, so it is read off libpq's English message where it can
/// be (3D000, 28P01, 28000, 42501); 08001 (sqlclient_unable_to_establish_
/// sqlconnection) otherwise: no server, say.
std::string connect_sqlstate(const std::exception& e);
/// An owner row of kAcquireSql / kRenewSql / kAcquireBatchSql, for a request sent at `anchor`.
MutexOwner parse_owner(const pqxx::row& r, const std::string& mutex, SteadyClock::time_point anchor);

}  // namespace simba::pg::detail
