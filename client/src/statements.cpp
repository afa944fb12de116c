#include "statements.hpp"

#include "simba/errors.hpp"

namespace simba::pg::detail {

using std::chrono::microseconds;

namespace {

std::int64_t micros_or_zero(const pqxx::field& f) { return f.is_null() ? 0 : f.as<std::int64_t>(); }

}  // namespace

// The owner row as the client reads it: times as epoch microseconds
// (simba_epoch_us, extension 1.4: exact, and unlike extract(epoch ...) no
// numeric arithmetic on the server). A tenure belongs to an id and the role
// that took it (extension 1.3): another role holding our own id reads as
// "role:id", so it never looks like ours.
#define SIMBA_OWNER_COLUMNS(id)                                                 \
    "o.mutex,"                                                                  \
    " CASE WHEN o.owner_role <> current_user AND o.owner_id = " id              \
    " THEN o.owner_role || ':' || o.owner_id ELSE o.owner_id END,"              \
    " simba_epoch_us(o.acquired_at),"                                           \
    " simba_epoch_us(o.ttl_at),"                                                \
    " simba_epoch_us(o.transition_at),"                                         \
    " o.version, o.fence,"                                                      \
    " simba_epoch_us(o.current_at),"                                            \
    " o.session_id IS NOT NULL"

const char* const kAcquireSql =
    "SELECT " SIMBA_OWNER_COLUMNS("$2")
    " FROM simba_acquire($1, $2, $3::int8 * interval '1 microsecond',"
    " $4::int8 * interval '1 microsecond', $5::uuid) AS o";
const char* const kRenewSql =
    "SELECT " SIMBA_OWNER_COLUMNS("$2")
    " FROM simba_renew($1, $2, $3, $4::int8 * interval '1 microsecond',"
    " $5::int8 * interval '1 microsecond') AS o";
// Many attempts in one statement, in array order (the client sorts them by
// mutex name, so batches of different processes lock rows in one order and
// cannot deadlock each other); column 9 = the attempt's 1-based index.
const char* const kAcquireBatchSql =
    "SELECT " SIMBA_OWNER_COLUMNS("a.id") ", a.i"
    " FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::uuid[])"
    " WITH ORDINALITY AS a(mutex, id, ttl, tr, session, i),"
    " LATERAL simba_acquire(a.mutex, a.id, a.ttl * interval '1 microsecond',"
    " a.tr * interval '1 microsecond', a.session) AS o";
// The fair lock: the owner row, then the caller's place (NULL when it holds
// the mutex) and the channel it is woken on.
const char* const kFairAcquireSql =
    "SELECT " SIMBA_OWNER_COLUMNS("$2") ", o.position, o.wake_channel"
    " FROM simba_fair_acquire($1, $2, $3::int8 * interval '1 microsecond',"
    " $4::int8 * interval '1 microsecond', $5::uuid) AS o";
// A multi-lock: simba_acquire_all's rows come in byte order of the names;
// the renewal asks simba_renew for each member by its fence, in that order
// too (rows locked in one order: no deadlock with an acquire_all).
const char* const kAcquireAllSql =
    "SELECT " SIMBA_OWNER_COLUMNS("$2")
    " FROM simba_acquire_all($1::text[], $2, $3::int8 * interval '1 microsecond',"
    " $4::int8 * interval '1 microsecond', $5::uuid) AS o";
const char* const kRenewAllSql =
    "SELECT " SIMBA_OWNER_COLUMNS("$2")
    " FROM unnest($1::text[], $3::int8[]) WITH ORDINALITY AS u(m, f, i),"
    " LATERAL simba_renew(u.m, $2, u.f, $4::int8 * interval '1 microsecond',"
    " $5::int8 * interval '1 microsecond') AS o ORDER BY u.i";
#undef SIMBA_OWNER_COLUMNS
const char* const kReleaseAllSql = "SELECT simba_release_all($1::text[], $2)";
const char* const kRwlockAcquireSql =
    "SELECT g.granted IS TRUE AND g.mode = $3, g.fence, simba_epoch_us(g.acquired_at),"
    " simba_epoch_us(g.ttl_at), simba_epoch_us(g.transition_at), simba_epoch_us(g.current_at), g.mode"
    " FROM simba_rwlock_acquire($1, $2, $3, $4::int8 * interval '1 microsecond',"
    " $5::int8 * interval '1 microsecond', $6::uuid) AS g";
const char* const kRwlockReleaseSql = "SELECT simba_rwlock_release($1, $2)";
const char* const kReleaseSql = "SELECT simba_release($1, $2)";
const char* const kFairReleaseSql = "SELECT simba_fair_release($1, $2)";
const char* const kReleaseBatchSql =
    "SELECT CASE WHEN u.f THEN simba_fair_release(u.m, u.c) ELSE simba_release(u.m, u.c) END"
    " FROM unnest($1::text[], $2::text[], $3::bool[]) WITH ORDINALITY AS u(m, c, f, i) ORDER BY u.i";

#define SIMBA_SESSION_COLUMNS                                \
    "s.session_id::text,"                                    \
    " simba_epoch_us(s.ttl_at),"                             \
    " simba_epoch_us(s.transition_at),"                      \
    " simba_epoch_us(s.current_at), s.revoked"
const char* const kSessionOpenSql =
    "SELECT " SIMBA_SESSION_COLUMNS
    " FROM simba_session_open($1::int8 * interval '1 microsecond', $2::int8 * interval '1 microsecond') AS s";
const char* const kSessionKeepaliveSql =
    "SELECT " SIMBA_SESSION_COLUMNS " FROM simba_session_keepalive($1::uuid) AS s";
#undef SIMBA_SESSION_COLUMNS
const char* const kSessionCloseSql = "SELECT simba_session_close($1::uuid)";

std::string trimmed_message(std::string msg) {
    // libpqxx's words for a statement on a connection it already dropped
    if (msg.rfind("Could not obtain client encoding: not connected", 0) == 0)
        return "not connected: the connection broke or the server closed it";
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    return msg;
}

bool permanent_sqlstate(const std::string& s) {
    return s == "42883" || s == "42P01" || s == "42501" || s == "22023" || s == "22004" || s == "55000" ||
           s == "3D000" || s == "28000" || s == "28P01";
}

/// The two setup mistakes a new user meets first, said in their terms. The
/// server's own text names a function simba's statement called, then gives
/// that statement's position and a hint about casts: only its first line
/// is kept.
std::string with_setup_hint(const std::string& state, const std::string& msg) {
    const char* hint = state == "42883" ? "is the simba extension installed in this database, at its latest"
                                          " version? CREATE EXTENSION simba, or ALTER EXTENSION simba UPDATE;"
                                          " or is its portable edition's schema on the role's search_path?"
                       : state == "42501" ? "simba's owner grants it to a role (a superuser for the extension,"
                                            " the installing role for the portable edition):"
                                            " SELECT simba_grant('role')"
                                          : nullptr;
    if (!hint || msg.find("simba_") == std::string::npos) return msg;
    return msg.substr(0, msg.find('\n')) + " (" + hint + ")";
}

std::exception_ptr typed_error(const std::exception& e, bool lost) {
    if (dynamic_cast<const Error*>(&e)) return std::current_exception();
    const std::string msg = trimmed_message(e.what());
    if (lost) return std::make_exception_ptr(ConnectionError(msg, "08006"));
    try {
        const auto state = sqlstate_of(e);
        throw_sqlstate(state, with_setup_hint(state, msg));
    } catch (...) {
        return std::current_exception();
    }
}

std::string connect_sqlstate(const std::exception& e) {
    if (auto state = sqlstate_of(e); !state.empty()) return state;
    const std::string msg = e.what();
    auto has = [&](const char* s) { return msg.find(s) != std::string::npos; };
    if (has("database \"") && has("does not exist")) return "3D000";
    if (has("password authentication failed")) return "28P01";
    if (has("role \"") && has("does not exist")) return "28000";
    if (has("no pg_hba.conf entry")) return "28000";
    if (has("permission denied for database")) return "42501";
    return "08001";
}

/// SQLSTATE of a libpqxx error. libpqxx 6.4 drops the SQLSTATE when a lazy
/// PREPARE fails (e.g. permission denied on first use), but still throws the
/// matching class: recover the code from the class then.
std::string sqlstate_of(const std::exception& e) {
    auto* sql = dynamic_cast<const pqxx::sql_error*>(&e);
    if (!sql) return {};
    if (!sql->sqlstate().empty()) return sql->sqlstate();
    if (dynamic_cast<const pqxx::insufficient_privilege*>(&e)) return "42501";
    if (dynamic_cast<const pqxx::undefined_function*>(&e)) return "42883";
    if (dynamic_cast<const pqxx::undefined_table*>(&e)) return "42P01";
    if (dynamic_cast<const pqxx::undefined_column*>(&e)) return "42703";
    if (dynamic_cast<const pqxx::syntax_error*>(&e)) return "42601";
    if (dynamic_cast<const pqxx::data_exception*>(&e)) return "22000";
    return {};
}

SessionProof parse_session(const pqxx::row& r, SteadyClock::time_point anchor) {
    SessionProof p;
    p.id = r[0].as<std::string>();
    p.lease.owner_id = p.id;
    p.lease.acquired_at = p.lease.current_at = microseconds(r[3].as<std::int64_t>());
    p.lease.ttl_at = microseconds(r[1].as<std::int64_t>());
    p.lease.transition_at = microseconds(r[2].as<std::int64_t>());
    p.lease.anchor = anchor;
    p.revoked = r[4].as<std::int64_t>();
    return p;
}

MutexOwner parse_owner(const pqxx::row& r, const std::string& mutex, SteadyClock::time_point anchor) {
    MutexOwner o;
    o.mutex = r[0].is_null() ? mutex : r[0].as<std::string>();
    o.owner_id = r[1].is_null() ? std::string() : r[1].as<std::string>();
    o.acquired_at = microseconds(micros_or_zero(r[2]));
    o.ttl_at = microseconds(micros_or_zero(r[3]));
    o.transition_at = microseconds(micros_or_zero(r[4]));
    o.version = r[5].is_null() ? 0 : r[5].as<std::int64_t>();
    o.fence = r[6].is_null() ? 0 : r[6].as<std::int64_t>();
    o.current_at = microseconds(micros_or_zero(r[7]));
    o.under_session = !r[8].is_null() && r[8].as<bool>();
    o.anchor = anchor;
    return o;
}

}  // namespace simba::pg::detail
