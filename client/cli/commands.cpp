// simba CLI: the one-shot commands — status, acquire, release, owner.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "simba/errors.hpp"

namespace simba::cli {

using std::chrono::microseconds;
/// Keys in the order the README documents them.
using Json = nlohmann::ordered_json;

namespace {
/// One line of JSON. Bytes that are not UTF-8 (a SQL_ASCII database) become
/// U+FFFD instead of an exception.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n"; }
}  // namespace

namespace {

std::string default_contender() {
    if (const char* env = std::getenv("SIMBA_CONTENDER"); env && *env) return env;
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
    return "sh-" + std::to_string(::getppid()) + "@" + host;
}


/// The filter's parameters in every statement below: $1 one mutex (--mutex),
/// $2 a LIKE pattern, $3 everything, $4 how recent a change still shows.
/// A free mutex shows while its fair queue has a live waiter or within $4
/// of its release or lease end (idle_since); a read-write lock while held
/// or waited for; a session until it ends.
#define SIMBA_CLI_FILTER_ARGS f.exact, f.pattern, f.all, to_interval(f.recent)
const char* const kMutexShown =
    "(state <> 'free' OR waiting > 0 OR idle_since > pg_catalog.now() - $4::interval)";
const char* const kMutexNamed = "($1::text IS NULL OR mutex = $1) AND ($2::text IS NULL OR mutex LIKE $2)";
const char* const kRwlockShown = "(mode <> 'free' OR waiting_writers > 0)";
const char* const kRwlockNamed = "$1::text IS NULL AND ($2::text IS NULL OR rwlock LIKE $2)";
const char* const kSessionShown = "state <> 'ended'";
const char* const kSessionNamed = "$1::text IS NULL AND $2::text IS NULL";

}  // namespace

std::string glob_to_like(const std::string& glob) {
    std::string out;
    for (char c : glob) {
        if (c == '*') out += '%';
        else if (c == '?') out += '_';
        else {
            if (c == '%' || c == '_' || c == '\\') out += '\\';
            out += c;
        }
    }
    return out;
}

ViewFilter view_filter(const Args& a) {
    ViewFilter f;
    f.all = a.all;
    if (a.pattern) {
        if (a.pattern->empty()) throw UsageError("--pattern must not be empty (use '*' for every name)");
        f.pattern = glob_to_like(*a.pattern);
    }
    f.exact = a.mutex;
    if (a.recent) {
        f.recent = parse_duration(*a.recent, "--recent");
        if (f.recent.count() < 0) throw UsageError("--recent must not be negative");
    }
    return f;
}

StatusSnapshot read_snapshot(pqxx::connection& c, const ViewFilter& f) {
    StatusSnapshot s;
    pqxx::nontransaction tx(c);
    const std::string every = "($3 OR $1::text IS NOT NULL OR ";
    // One scan of the view for the rows shown and the count of the rest: the
    // first row is a shown one if any (else one hidden row, dropped here).
    // Held and in transition first, then free with waiters, then lately freed.
    auto rows = tx.exec_params(
        std::string("SELECT mutex, owner_id, state, time_left, fence, version, acquired_at, ttl_at, transition_at,"
                    " waiting, idle_since, shown, hidden FROM ("
                    "SELECT mutex, owner_id, state, extract(epoch FROM time_left)::float8 AS time_left, fence, version,"
                    " to_json(acquired_at) #>> '{}' AS acquired_at, to_json(ttl_at) #>> '{}' AS ttl_at,"
                    " to_json(transition_at) #>> '{}' AS transition_at, waiting,"
                    " to_json(idle_since) #>> '{}' AS idle_since, shown,"
                    " count(*) FILTER (WHERE NOT shown) OVER () AS hidden,"
                    " row_number() OVER (ORDER BY shown DESC) AS n"
                    " FROM (SELECT *, " + every + kMutexShown + ") AS shown FROM simba_mutex_status WHERE ") +
            kMutexNamed + ") AS v) AS w WHERE shown OR n = 1 ORDER BY state = 'free', waiting = 0, mutex",
        SIMBA_CLI_FILTER_ARGS);
    for (auto r : rows) {
        s.hidden_mutexes = r[12].as<long long>(0);
        break;
    }
    // Keep only the shown rows (a result is immutable: read them again without the odd one).
    bool any_hidden_row = false;
    for (auto r : rows) any_hidden_row |= !r[11].as<bool>();
    s.mutexes = any_hidden_row ? pqxx::result() : rows;
    s.rwlocks = tx.exec_params(
        std::string("SELECT rwlock, mode, array_to_string(holders, ', '), waiting_writers, write_fence,"
                    " coalesce(to_json(holders), '[]')::text"
                    " FROM simba_rwlock_status WHERE ") +
            kRwlockNamed + " AND " + every + kRwlockShown + ") AND $4::interval IS NOT NULL ORDER BY rwlock",
        SIMBA_CLI_FILTER_ARGS);
    s.semaphores = tx.exec_params(
        "SELECT key, slot, holder, context, extract(epoch FROM time_left)::float8, fence, permits,"
        " to_json(acquired_at) #>> '{}', to_json(expires_at) #>> '{}'"
        " FROM simba_semaphore_status WHERE $1::text IS NULL AND ($2::text IS NULL OR key LIKE $2)"
        " AND $3::boolean IS NOT NULL AND $4::interval IS NOT NULL ORDER BY key, slot",
        SIMBA_CLI_FILTER_ARGS);
    s.sessions = tx.exec_params(
        std::string("SELECT session_id, owner_role, state, extract(epoch FROM time_left)::float8, mutexes, permits,"
                    " rwlocks, to_json(transition_at) #>> '{}'"
                    " FROM simba_session_status WHERE ") +
            kSessionNamed + " AND ($3 OR " + kSessionShown + ") AND $4::interval IS NOT NULL ORDER BY opened_at, session_id",
        SIMBA_CLI_FILTER_ARGS);
    if (!f.all && !f.exact) {
        auto h = tx.exec_params1(
            std::string("SELECT (SELECT count(*) FROM simba_rwlock_status WHERE ") + kRwlockNamed + " AND NOT " +
                kRwlockShown + "), (SELECT count(*) FROM simba_session_status WHERE " + kSessionNamed + " AND NOT " +
                kSessionShown + " AND NOT $3) WHERE $4::interval IS NOT NULL",
            SIMBA_CLI_FILTER_ARGS);
        s.hidden_rwlocks = h[0].as<long long>(0);
        s.hidden_sessions = h[1].as<long long>(0);
    }
    return s;
}

std::string hidden_note(const StatusSnapshot& s) {
    std::vector<std::string> parts;
    if (s.hidden_mutexes > 0) parts.push_back(std::to_string(s.hidden_mutexes) + " idle mutexes");
    if (s.hidden_rwlocks > 0) parts.push_back(std::to_string(s.hidden_rwlocks) + " free read-write locks");
    if (s.hidden_sessions > 0) parts.push_back(std::to_string(s.hidden_sessions) + " ended sessions");
    if (parts.empty()) return {};
    std::string out = "(not shown: ";
    for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
    return out + "; --all shows them)";
}

namespace {

std::string left_of(const pqxx::field& f) {
    return f.is_null() ? "-" : format_duration(microseconds(static_cast<std::int64_t>(num(f) * 1e6)));
}

std::string render_table(const StatusSnapshot& s) {
    std::ostringstream out;
    std::size_t wm = 5, wo = 5;
    for (auto r : s.mutexes) {
        wm = std::max(wm, str(r[0]).size());
        wo = std::max(wo, str(r[1]).size());
    }
    out << pad("MUTEX", wm) << "  " << pad("OWNER", wo) << "  " << pad("STATE", 10) << "  " << pad("TIME LEFT", 9)
        << "  " << pad("FENCE", 6) << "  WAITING\n";
    for (auto r : s.mutexes)
        out << pad(str(r[0]), wm) << "  " << pad(r[1].is_null() ? "-" : str(r[1]), wo) << "  " << pad(str(r[2]), 10)
            << "  " << pad(left_of(r[3]), 9) << "  " << pad(str(r[4]), 6) << "  " << str(r[9]) << "\n";
    if (s.mutexes.empty()) out << "(no mutexes held, waited for or changed lately)\n";
    if (!s.rwlocks.empty()) {
        std::size_t wr = 6, wh = 7;
        for (auto r : s.rwlocks) {
            wr = std::max(wr, str(r[0]).size());
            wh = std::max(wh, str(r[2]).size());
        }
        out << "\n" << pad("RWLOCK", wr) << "  " << pad("MODE", 5) << "  " << pad("HOLDERS", wh)
            << "  WAITING WRITERS  WRITE FENCE\n";
        for (auto r : s.rwlocks)
            out << pad(str(r[0]), wr) << "  " << pad(str(r[1]), 5) << "  " << pad(r[2].is_null() ? "-" : str(r[2]), wh)
                << "  " << pad(str(r[3]), 15) << "  " << str(r[4]) << "\n";
    }
    if (!s.semaphores.empty()) {
        std::size_t wk = 9, wh = 6;
        for (auto r : s.semaphores) {
            wk = std::max(wk, str(r[0]).size());
            wh = std::max(wh, str(r[2]).size());
        }
        out << "\n" << pad("SEMAPHORE", wk) << "  SLOT  " << pad("HOLDER", wh) << "  " << pad("TIME LEFT", 9)
            << "  " << pad("FENCE", 6) << "  LIMIT  CONTEXT\n";
        for (auto r : s.semaphores)
            out << pad(str(r[0]), wk) << "  " << pad(str(r[1]), 4) << "  " << pad(str(r[2]), wh) << "  "
                << pad(left_of(r[4]), 9) << "  " << pad(str(r[5]), 6) << "  " << pad(str(r[6]), 5) << "  " << str(r[3])
                << "\n";
    }
    if (!s.sessions.empty()) {
        std::size_t wr = 4;
        for (auto r : s.sessions) wr = std::max(wr, str(r[1]).size());
        out << "\n" << pad("SESSION", 36) << "  " << pad("ROLE", wr) << "  " << pad("STATE", 10) << "  "
            << pad("TIME LEFT", 9) << "  MUTEXES  PERMITS  RWLOCKS\n";
        for (auto r : s.sessions)
            out << pad(str(r[0]), 36) << "  " << pad(str(r[1]), wr) << "  " << pad(str(r[2]), 10) << "  "
                << pad(left_of(r[3]), 9) << "  " << pad(str(r[4]), 7) << "  " << pad(str(r[5]), 7) << "  "
                << str(r[6]) << "\n";
    }
    if (auto note = hidden_note(s); !note.empty()) out << "\n" << note << "\n";
    return out.str();
}

/// null, or the field as a JSON string (timestamps already ISO 8601 from to_json).
Json string_or_null(const pqxx::field& f) { return f.is_null() ? Json() : Json(f.c_str()); }
std::int64_t int_or_zero(const pqxx::field& f) { return f.is_null() ? 0 : f.as<std::int64_t>(); }
/// Seconds to the millisecond, or null.
Json seconds_or_null(const pqxx::field& f) {
    return f.is_null() ? Json() : Json(std::round(f.as<double>() * 1000) / 1000);
}

std::string render_json(const StatusSnapshot& s) {
    Json out = {{"mutexes", Json::array()},
                {"rwlocks", Json::array()},
                {"semaphores", Json::array()},
                {"sessions", Json::array()},
                {"not_shown", {{"mutexes", s.hidden_mutexes}, {"rwlocks", s.hidden_rwlocks},
                               {"sessions", s.hidden_sessions}}}};
    for (auto r : s.mutexes)
        out["mutexes"].push_back({{"mutex", str(r[0])},
                                  {"owner", string_or_null(r[1])},
                                  {"state", str(r[2])},
                                  {"time_left_seconds", seconds_or_null(r[3])},
                                  {"fence", int_or_zero(r[4])},
                                  {"version", int_or_zero(r[5])},
                                  {"acquired_at", string_or_null(r[6])},
                                  {"ttl_at", string_or_null(r[7])},
                                  {"transition_at", string_or_null(r[8])},
                                  {"waiting", int_or_zero(r[9])},
                                  {"idle_since", string_or_null(r[10])}});
    for (auto r : s.rwlocks)
        out["rwlocks"].push_back({{"rwlock", str(r[0])},
                                  {"mode", str(r[1])},
                                  {"holders", Json::parse(str(r[5]), nullptr, false)},
                                  {"waiting_writers", int_or_zero(r[3])},
                                  {"write_fence", int_or_zero(r[4])}});
    for (auto r : s.semaphores)
        out["semaphores"].push_back({{"key", str(r[0])},
                                     {"slot", int_or_zero(r[1])},
                                     {"holder", string_or_null(r[2])},
                                     {"context", string_or_null(r[3])},
                                     {"time_left_seconds", seconds_or_null(r[4])},
                                     {"fence", int_or_zero(r[5])},
                                     {"permits", int_or_zero(r[6])},
                                     {"acquired_at", string_or_null(r[7])},
                                     {"expires_at", string_or_null(r[8])}});
    for (auto r : s.sessions)
        out["sessions"].push_back({{"session_id", str(r[0])},
                                   {"role", str(r[1])},
                                   {"state", str(r[2])},
                                   {"time_left_seconds", seconds_or_null(r[3])},
                                   {"mutexes", int_or_zero(r[4])},
                                   {"permits", int_or_zero(r[5])},
                                   {"rwlocks", int_or_zero(r[6])},
                                   {"transition_at", string_or_null(r[7])}});
    return dump(out);
}

}  // namespace

namespace {
StatusSnapshot read_status(pqxx::connection& c, const ViewFilter& f) {
    try {
        return read_snapshot(c, f);
    } catch (const pqxx::failure& e) {
        fail_sql(e, "reading simba_mutex_status");
    }
}
}  // namespace

int cmd_status(const Args& a) {
    auto interval = parse_duration(a.interval.value_or("2s"), "--interval");
    if (interval.count() <= 0) throw UsageError("--interval must be greater than 0");
    const ViewFilter filter = view_filter(a);
    auto conn = connect(a.dsn, "simba-cli");
    if (!a.watch) {
        AnswerDeadline deadline(*conn);
        auto s = read_status(*conn, filter);
        std::fputs((a.json ? render_json(s) : render_table(s)).c_str(), stdout);
        return ok;
    }
    // --watch: redraw until SIGINT/SIGTERM (taken synchronously, so the exit is clean).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    const bool tty = ::isatty(STDOUT_FILENO);
    for (;;) {
        std::string body;
        try {
            if (!conn || !conn->is_open()) conn = connect(a.dsn, "simba-cli");
            AnswerDeadline deadline(*conn);
            auto s = read_status(*conn, filter);
            body = a.json ? render_json(s) : render_table(s);
        } catch (const Failure& e) {
            body = std::string("error: ") + e.what() + "\n";
            conn.reset();
        }
        std::time_t now = std::time(nullptr);
        char stamp[64];
        std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
        if (tty) std::fputs("\033[H\033[2J", stdout);
        if (!a.json) std::printf("Every %s: simba status%s    %s\n\n", format_duration(interval).c_str(),
                                 a.mutex ? (" --mutex " + *a.mutex).c_str() : "", stamp);
        std::fputs(body.c_str(), stdout);
        if (!tty && !a.json) std::fputs("\n", stdout);
        std::fflush(stdout);
        timespec ts{static_cast<time_t>(interval.count() / 1000000), static_cast<long>(interval.count() % 1000000) * 1000};
        int sig = sigtimedwait(&set, nullptr, &ts);
        if (sig > 0) return ok;
    }
}

namespace {

struct OwnerRow {
    std::string owner;
    std::string state;
    std::int64_t fence = 0;
    double time_left = 0;
    bool time_left_null = true;
};

std::optional<OwnerRow> read_owner(pqxx::connection& c, const std::string& mutex) {
    pqxx::nontransaction tx(c);
    auto r = tx.exec_params(
        "SELECT owner_id, state, fence, extract(epoch FROM time_left)::float8 FROM simba_mutex_status WHERE mutex = $1",
        mutex);
    if (r.empty()) return std::nullopt;
    OwnerRow o;
    o.owner = str(r[0][0]);
    o.state = str(r[0][1]);
    o.fence = r[0][2].is_null() ? 0 : r[0][2].as<std::int64_t>();
    o.time_left_null = r[0][3].is_null();
    o.time_left = num(r[0][3]);
    return o;
}

std::string describe_holder(const std::optional<OwnerRow>& o) {
    if (!o || o->owner.empty() || o->state == "free") return "free";
    return "held by " + o->owner + " (" + o->state + ", fence " + std::to_string(o->fence) +
           (o->time_left_null ? "" : ", " + format_duration(microseconds(static_cast<std::int64_t>(o->time_left * 1e6))) + " left") +
           ")";
}

}  // namespace

int cmd_acquire(const Args& a) {
    if (!a.mutex) throw UsageError("simba acquire: --mutex NAME is required");
    const std::string mutex = *a.mutex;
    const std::string id = a.contender ? *a.contender : default_contender();
    auto ttl = parse_duration(a.ttl.value_or("10s"), "--ttl");
    auto transition = parse_duration(a.transition.value_or("6s"), "--transition");
    validate_mutex(mutex);
    validate_contender_id(id);
    validate_ttl(ttl);
    validate_transition(transition);
    auto conn = connect(a.dsn, "simba-cli");
    AnswerDeadline deadline(*conn);
    pqxx::result r;
    try {
        pqxx::nontransaction tx(*conn);
        r = tx.exec_params(
            "SELECT " SIMBA_CLI_OWNER_ID ", fence, extract(epoch FROM transition_at - current_at)::float8,"
            " to_json(ttl_at) #>> '{}', to_json(transition_at) #>> '{}'"
            " FROM simba_acquire($1, $2, $3::interval, $4::interval)",
            mutex, id, to_interval(ttl), to_interval(transition));
    } catch (const pqxx::failure& e) {
        fail_sql(e, "simba_acquire");
    }
    const bool won = str(r[0][0]) == id;
    if (a.json) {
        const Json out = {{"mutex", mutex},
                          {"contender", id},
                          {"acquired", won},
                          {"owner", string_or_null(r[0][0])},
                          {"fence", int_or_zero(r[0][1])},
                          {"ttl_at", string_or_null(r[0][3])},
                          {"transition_at", string_or_null(r[0][4])}};
        std::fputs(dump(out).c_str(), stdout);
    } else if (won) {
        std::printf("%s\n", r[0][1].c_str());  // the fence, for $(simba acquire ...)
        std::fprintf(stderr, "simba acquire: %s holds %s, fence %s, lease ends in %s\n", id.c_str(), mutex.c_str(),
                     r[0][1].c_str(),
                     format_duration(microseconds(static_cast<std::int64_t>(num(r[0][2]) * 1e6))).c_str());
    } else {
        std::fprintf(stderr, "simba acquire: %s is held by %s (fence %s, others may take it in %s)\n", mutex.c_str(),
                     str(r[0][0]).c_str(), r[0][1].c_str(),
                     format_duration(microseconds(static_cast<std::int64_t>(num(r[0][2]) * 1e6))).c_str());
    }
    return won ? ok : busy;
}

int cmd_release(const Args& a) {
    if (!a.mutex) throw UsageError("simba release: --mutex NAME is required");
    const std::string mutex = *a.mutex;
    validate_mutex(mutex);
    if (a.force && a.contender)
        throw UsageError("simba release: --force clears whoever holds the mutex; drop --contender");
    auto conn = connect(a.dsn, "simba-cli");
    AnswerDeadline deadline(*conn);
    if (a.force) {
        bool cleared = false;
        try {
            pqxx::nontransaction tx(*conn);
            cleared = tx.exec_params1("SELECT simba_force_release($1)", mutex)[0].as<bool>();
        } catch (const pqxx::failure& e) {
            std::string state;
            if (auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) state = sql->sqlstate();
            if (state == "42501" || dynamic_cast<const pqxx::insufficient_privilege*>(&e))
                throw Failure(no_permission,
                              "permission denied for simba_force_release: forcing a release is an admin action.\n"
                              "hint: run it as a superuser, or have the DBA grant it to an operator role:\n"
                              "      GRANT EXECUTE ON FUNCTION simba_force_release(text) TO ops_admin;");
            if (state == "42883" || dynamic_cast<const pqxx::undefined_function*>(&e))
                throw Failure(config, "simba_force_release does not exist: it needs extension version 1.2\n"
                                      "hint: ALTER EXTENSION simba UPDATE (as a superuser)");
            fail_sql(e, "simba_force_release");
        }
        std::fprintf(stderr, "simba release: %s\n",
                     cleared ? ("forced release of " + mutex + ": the next holder gets the next fence").c_str()
                             : (mutex + " was free: nothing to release").c_str());
        return cleared ? ok : not_held;
    }
    const std::string id = a.contender ? *a.contender : default_contender();
    validate_contender_id(id);
    bool released = false;
    try {
        pqxx::nontransaction tx(*conn);
        released = tx.exec_params1("SELECT simba_release($1, $2)", mutex, id)[0].as<bool>();
    } catch (const pqxx::failure& e) {
        fail_sql(e, "simba_release");
    }
    if (released) {
        std::fprintf(stderr, "simba release: %s released %s\n", id.c_str(), mutex.c_str());
        return ok;
    }
    std::optional<OwnerRow> now;
    try {
        now = read_owner(*conn, mutex);
    } catch (const pqxx::failure&) {
    }
    std::fprintf(stderr,
                 "simba release: %s did not hold a live lease on %s (now %s); nothing changed\n"
                 "hint: if it held it before, its lease ended first: the work finished after the lease ended\n",
                 id.c_str(), mutex.c_str(), describe_holder(now).c_str());
    return not_held;
}

int cmd_owner(const Args& a) {
    if (!a.mutex) throw UsageError("simba owner: --mutex NAME is required");
    const std::string mutex = *a.mutex;
    validate_mutex(mutex);
    auto conn = connect(a.dsn, "simba-cli");
    AnswerDeadline deadline(*conn);
    std::optional<OwnerRow> row;
    try {
        row = read_owner(*conn, mutex);
    } catch (const pqxx::failure& e) {
        fail_sql(e, "reading simba_mutex_status");
    }
    const bool held = row && !row->owner.empty() && row->state != "free";
    if (a.json) {
        const Json out = {{"mutex", mutex},
                          {"owner", held ? Json(row->owner) : Json()},
                          {"state", row ? row->state : "free"},
                          {"fence", row ? row->fence : 0},
                          {"time_left_seconds", held && !row->time_left_null
                                                    ? Json(std::round(row->time_left * 1000) / 1000)
                                                    : Json()}};
        std::fputs(dump(out).c_str(), stdout);
    } else if (held) {
        std::printf("%s\n", row->owner.c_str());
    }
    return held ? ok : not_held;
}

}  // namespace simba::cli
