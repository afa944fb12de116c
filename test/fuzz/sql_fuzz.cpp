// sql_fuzz — hostile input against simba's SQL API (a real server, via libpq).
//
// Makes N random calls (default 20,000) to every simba function with values
// drawn from hostile generators: NULLs, empty and 1 MB strings, control
// characters, quotes and backslashes, invalid UTF-8, extreme and calendar
// intervals, negative and huge fences and permits, random tokens. The calls
// come from three sessions of three granted roles that share contender ids
// and permit tokens, in autocommit or in explicit transactions (READ
// COMMITTED, REPEATABLE READ or SERIALIZABLE, with savepoints rolled back
// or released, committed or rolled back), interleaved statement by
// statement. Acquires pass, now and then, a simba session: the caller's own
// (opened, kept alive and closed by calls of their own, with hostile
// leases), another role's, an unknown or a malformed one. Every call must
// either succeed or fail with a documented
// SQLSTATE; the connections must never break (a crashed backend breaks
// them). Checked as it goes and on the rows left behind:
//  - a tenure (mutex, fence) belongs to one holder (id and role): no role
//    ever renews, fence-checks or reports another role's tenure as its own;
//  - a permit token works only for the role that took it;
//  - a fence handed out in a transaction or savepoint that rolled back is
//    never seen again; committed fences of a mutex never go backwards;
//  - a multi-lock that did not get every mutex began no tenure;
//  - a read-write lock never has a writer beside another holder;
//  - the usual row invariants (see the end of main).
//
// Usage: sql_fuzz [calls] [seed] [--portable SCRIPT]   (server from libpq's
// PG* environment; the calls run in a database of their own, simba_fuzz (simba_fuzz_portable),
// made anew each run; --portable: the portable edition's script installed
// there instead of the C extension, with psql)
// Prints "sql_fuzz: N passed, N failed" and exits non-zero on any violation.
#include <libpq-fe.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <utility>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

using Arg = std::optional<std::string>;  // nullopt = SQL NULL

// What the API may answer besides success (docs/reference.md, "Errors and limits").
const std::set<std::string> documented = {
    "22004",                    // NULL argument
    "22023",                    // invalid value
    "22008",                    // lease beyond the timestamp range
    "22021",                    // invalid UTF-8 (rejected by the server's input)
    "22P02", "22007", "22015",  // bad uuid / interval text, interval overflow
    "2202E", "54000",           // a multi-lock's names: more than one dimension, over 1,000
    "22P02",                    // a malformed array literal
    "SB001", "SB002", "SB003",  // fence checks
    "SB004",                    // a session that has ended, is unknown or is another role's
    "SB005",                    // a reader of a read-write lock asked to write
    "55P03",                    // lock_timeout: another session's open transaction holds the row
};
// Besides, inside an explicit transaction: a serialization failure or a
// deadlock (docs/reference.md, "Errors and limits": retry the transaction).
const std::set<std::string> documented_in_transaction = {"40001", "40P01"};

std::mt19937_64 rng;

int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }

// A handful of mutex/key names recur, so calls interact with each other.
Arg name() {
    static const std::vector<std::string> common = {
        "alpha", "beta", "gamma", "x'); DROP TABLE simba_mutex; --", "ロック🔒", "tab\there"};
    switch (pick(12)) {
        case 0: return std::nullopt;
        case 1: return std::string();
        case 2: return std::string(1 << 20, 'm');  // 1 MB
        case 3: return std::string(257, 'n');
        case 4: return std::string(256, 'o');
        case 5: {  // control characters and quoting
            std::string s = "c";
            for (int i = 0; i < 8; ++i) s += static_cast<char>(1 + pick(31));
            return s + "\\'\";";
        }
        case 6: return std::string("bad\xff\xfeutf8");  // invalid UTF-8
        case 7: return std::string("\xc3");             // truncated sequence
        default: return common[pick(static_cast<int>(common.size()))];
    }
}

// A multi-lock's names: hostile arrays, or one to four names of name() as an array literal.
Arg names() {
    switch (pick(10)) {
        case 0: return std::nullopt;
        case 1: return std::string("{}");
        case 2: return std::string("{{alpha},{beta}}");
        case 3: return std::string("{alpha,alpha}");
        case 4: {
            std::string s = "{n0";
            for (int i = 1; i <= 1000; ++i) s += ",n" + std::to_string(i);  // 1,001 names
            return s + "}";
        }
        case 5: return std::string("not an array");
        default: {
            std::string s = "{";
            const int n = 1 + pick(4);
            for (int i = 0; i < n; ++i) {
                const Arg a = name();
                s += i ? "," : "";
                if (!a) {
                    s += "NULL";
                    continue;
                }
                s += '"';
                for (char ch : *a) {
                    if (ch == '"' || ch == '\\') s += '\\';
                    s += ch;
                }
                s += '"';
            }
            return s + "}";
        }
    }
}

Arg rw_mode() {
    static const std::vector<std::string> modes = {"read", "write", "read", "write", "READ", "", "exclusive", "write "};
    if (pick(12) == 0) return std::nullopt;
    return modes[pick(static_cast<int>(modes.size()))];
}

Arg contender() {
    static const std::vector<std::string> ids = {"a", "b", "c", "1:42@host", "é"};
    if (pick(6) == 0) return name();
    return ids[pick(static_cast<int>(ids.size()))];
}

Arg interval() {
    static const std::vector<std::string> values = {
        "1ms", "50ms", "1s", "10s", "0s", "-1s", "-1 microsecond", "1 day", "1 mon",
        "2 years", "1000000000 hours", "2562047000 hours", "1 hour -61 minutes",
        "9223372036854775807 microseconds", "178000000 years", "not an interval", "@ 1 sec ago",
        "00:00:00.000001", "P1D", "PT0.5S"};
    if (pick(15) == 0) return std::nullopt;
    return values[pick(static_cast<int>(values.size()))];
}

Arg integer(bool wide) {
    static const std::vector<std::string> values = {
        "0", "-1", "1", "2", "3", "10000", "10001", "-2147483648", "2147483647"};
    static const std::vector<std::string> wide_values = {
        "9223372036854775807", "-9223372036854775808", "1", "2", "100"};
    if (pick(15) == 0) return std::nullopt;
    if (wide && pick(2) == 0) return wide_values[pick(static_cast<int>(wide_values.size()))];
    return values[pick(static_cast<int>(values.size()))];
}

Arg token(const std::vector<std::string>& known) {
    switch (pick(6)) {
        case 0: return std::nullopt;
        case 1: return std::string("00000000-0000-0000-0000-000000000000");
        case 2: return std::string("not-a-uuid");
        default:
            if (!known.empty()) return known[pick(static_cast<int>(known.size()))];
            return std::string("5f0c7b4e-0d6a-4c59-8a4b-0c1d2e3f4a5b");
    }
}

// The live holders of read-write lock $1 when a writer is beside another holder (one row), else none. A
// hold under a session lives while the session does.
const char* const kRwOverlapSql =
    "SELECT string_agg(h.mode || ' ' || h.owner_id, ', ') FROM simba_rwlock_holder h "
    "LEFT JOIN simba_session_lease s ON s.session_id = h.session_id "
    "WHERE h.rwlock = $1 AND h.mode <> 'waiting' AND coalesce(s.transition_at, h.transition_at) > clock_timestamp() "
    "HAVING count(*) FILTER (WHERE h.mode = 'write') > 1 "
    "OR (count(*) FILTER (WHERE h.mode = 'write') = 1 AND count(*) > 1)";

struct Call {
    std::string sql;
    std::vector<Arg> args;
};

struct Stats {
    long ok = 0, documented_errors = 0, violations = 0, under_session = 0;
};

void violation(Stats& stats, const std::string& what) {
    ++stats.violations;
    std::fprintf(stderr, "VIOLATION: %s\n", what.c_str());
}

PGresult* run(PGconn* conn, const Call& call) {
    std::vector<const char*> values;
    for (const Arg& a : call.args) values.push_back(a ? a->c_str() : nullptr);
    return PQexecParams(conn, call.sql.c_str(), static_cast<int>(values.size()), nullptr,
                        values.data(), nullptr, nullptr, 0);
}

bool exec_ok(PGconn* conn, const char* sql) {
    PGresult* r = PQexec(conn, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok) std::fprintf(stderr, "%s: %s", sql, PQerrorMessage(conn));
    PQclear(r);
    return ok;
}

// Each query returns violations as rows (one text column).
void check_rows(PGconn* conn, Stats& stats, const char* label, const char* sql) {
    PGresult* r = PQexec(conn, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        violation(stats, std::string(label) + ": " + PQerrorMessage(conn));
    } else {
        for (int i = 0; i < PQntuples(r); ++i)
            violation(stats, std::string(label) + ": " + PQgetvalue(r, i, 0));
    }
    PQclear(r);
}

// A tenure: who holds a mutex under one fence.
using Holder = std::pair<std::string, std::string>;  // contender id, role
using Tenure = std::pair<std::string, long long>;    // mutex, fence

// One connection, under one role, perhaps inside an explicit transaction.
struct Session {
    PGconn* conn = nullptr;
    std::string role;
    bool in_txn = false, in_savepoint = false;
    int calls_left = 0;
    std::vector<Tenure> new_in_txn, new_in_savepoint;  // tenures this session began, not yet committed
    std::map<std::string, long long> pending_fence;    // mutex -> fence seen inside the transaction
    std::map<std::string, long long> savepoint_fence;  // the same, since the savepoint (gone if it rolls back)
    std::string sid;                                   // the simba session it opened last (maybe ended since)
};

struct Checker {
    Stats stats;
    std::map<Tenure, Holder> holder_of;             // every tenure seen, with its holder
    std::set<Tenure> dead;                          // tenures begun in work that rolled back
    std::map<std::string, long long> last_fence;    // mutex -> highest committed fence seen
    std::map<std::string, std::string> token_role;  // permit token -> role that took it
    std::vector<std::string> tokens;
    std::vector<std::string> sids;                  // every simba session opened, by any role

    // A row simba_acquire returned (mutex, owner_id, fence, owner_role) to `s`.
    void saw_owner(Session& s, const std::string& mutex, const std::string& owner, long long fence,
                   const std::string& role) {
        const Tenure t{mutex, fence};
        if (dead.count(t))
            violation(stats, "fence " + std::to_string(fence) + " of " + mutex +
                                 " came back after the work that got it rolled back");
        auto [it, fresh] = holder_of.emplace(t, Holder{owner, role});
        if (!fresh && it->second != Holder{owner, role})
            violation(stats, "tenure " + mutex + "/" + std::to_string(fence) + " of " + it->second.first + " (" +
                                 it->second.second + ") now reported as " + owner + " (" + role + ")");
        if (fresh && role == s.role && s.in_txn) (s.in_savepoint ? s.new_in_savepoint : s.new_in_txn).push_back(t);
        auto last = last_fence.find(mutex);
        if (last != last_fence.end() && fence < last->second)
            violation(stats, "fence of " + mutex + " went back from " + std::to_string(last->second) + " to " +
                                 std::to_string(fence));
        if (s.in_txn) {
            auto& pending = s.in_savepoint ? s.savepoint_fence : s.pending_fence;
            pending[mutex] = std::max(pending[mutex], fence);
        } else
            last_fence[mutex] = std::max(last_fence[mutex], fence);
    }

    void rolled_back(std::vector<Tenure>& begun) {
        dead.insert(begun.begin(), begun.end());
        begun.clear();
    }

    // The savepoint's work: kept (RELEASE, or a COMMIT over it) or undone.
    static void end_savepoint(Session& s, bool keep) {
        if (keep)
            for (auto& [m, f] : s.savepoint_fence) s.pending_fence[m] = std::max(s.pending_fence[m], f);
        s.savepoint_fence.clear();
    }
};

// The session_id of an acquire: mostly none, else the caller's own, any
// role's, or one never opened or malformed.
Arg session_id(const Session& s, const std::vector<std::string>& sids) {
    switch (pick(10)) {
        case 0: case 1: case 2: return s.sid;
        case 3: if (!sids.empty()) return sids[pick(static_cast<int>(sids.size()))]; return s.sid;
        case 4: return token({});
        default: return std::nullopt;
    }
}

bool command(Session& s, const std::string& sql) {
    PGresult* r = PQexec(s.conn, sql.c_str());
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok;
}

// Ends the session's transaction; a failed COMMIT (40001) rolls back.
void finish(Session& s, Checker& c, bool commit) {
    if (commit && command(s, "COMMIT")) {
        Checker::end_savepoint(s, true);
        for (auto& [m, f] : s.pending_fence) c.last_fence[m] = std::max(c.last_fence[m], f);
    } else {
        command(s, "ROLLBACK");
        c.rolled_back(s.new_in_savepoint);
        c.rolled_back(s.new_in_txn);
    }
    s.new_in_txn.clear();
    s.new_in_savepoint.clear();
    s.pending_fence.clear();
    s.savepoint_fence.clear();
    s.in_txn = s.in_savepoint = false;
}

}  // namespace

int main(int argc, char** argv) {
    long calls = 20000;
    unsigned long seed = std::random_device{}();
    std::string portable;
    CLI::App cli{"sql_fuzz: hostile calls to simba's SQL API (the server from libpq's PG* environment)"};
    cli.add_option("calls", calls, "calls to make")->capture_default_str()->check(CLI::PositiveNumber);
    cli.add_option("seed", seed, "random seed (default: a fresh one; printed, to replay a run)");
    cli.add_option("--portable", portable, "the portable edition's install script, instead of the extension")
        ->check(CLI::ExistingFile);
    CLI11_PARSE(cli, argc, argv);
    rng.seed(seed);
    std::printf("sql_fuzz: %ld calls, seed %lu%s\n", calls, seed, portable.empty() ? "" : ", portable edition");

    const std::vector<std::string> roles = {"simba_fuzz_r0", "simba_fuzz_r1", "simba_fuzz_r2"};
    PGconn* conn = PQconnectdb("");
    if (PQstatus(conn) != CONNECTION_OK) {
        std::fprintf(stderr, "sql_fuzz: cannot connect: %s", PQerrorMessage(conn));
        return 2;
    }
    // A database of each edition's own: make test runs both at once.
    const std::string db = portable.empty() ? "simba_fuzz" : "simba_fuzz_portable";
    if (!exec_ok(conn, "SET client_min_messages = error") ||
        !exec_ok(conn, ("DROP DATABASE IF EXISTS " + db).c_str()) ||
        !exec_ok(conn, ("CREATE DATABASE " + db).c_str()) ||
        (portable.empty() && !exec_ok(conn, ("ALTER DATABASE " + db + " SET simba.history = on").c_str())))
        return 2;
    for (const auto& role : roles)  // roles are cluster-wide: made once, kept for the next run
        if (!exec_ok(conn, ("DO $$ BEGIN CREATE ROLE " + role +
                            "; EXCEPTION WHEN duplicate_object THEN NULL; END $$").c_str()))
            return 2;
    PQfinish(conn);
    conn = PQconnectdb(("dbname=" + db).c_str());
    if (PQstatus(conn) != CONNECTION_OK) {
        std::fprintf(stderr, "sql_fuzz: cannot connect to %s: %s", db.c_str(), PQerrorMessage(conn));
        return 2;
    }
    if (portable.empty()) {
        if (!exec_ok(conn, "CREATE EXTENSION simba")) return 2;
    } else {  // its settings are a row, history on as the extension's above
        const std::string install = "psql -X -q -v ON_ERROR_STOP=1 -v schema=public -d " + db + " -f '" + portable + "'";
        if (std::system(install.c_str()) != 0 || !exec_ok(conn, "UPDATE simba_settings SET history = true")) {
            std::fprintf(stderr, "sql_fuzz: could not install the portable edition: %s\n", install.c_str());
            return 2;
        }
    }
    std::vector<Session> sessions(roles.size());
    for (std::size_t k = 0; k < roles.size(); ++k) {
        sessions[k].role = roles[k];
        sessions[k].conn = PQconnectdb(("dbname=" + db).c_str());
        // A row locked by another session's open transaction answers 55P03
        // at once instead of blocking this single-threaded driver.
        if (PQstatus(sessions[k].conn) != CONNECTION_OK ||
            !exec_ok(conn, ("SELECT simba_grant('" + roles[k] + "')").c_str()) ||
            !exec_ok(sessions[k].conn, ("SET ROLE " + roles[k]).c_str()) ||
            !exec_ok(sessions[k].conn, "SET lock_timeout = '20ms'"))
            return 2;
    }

    Checker c;
    for (auto& s : sessions) {  // a simba session each, to begin with
        PGresult* r = PQexec(s.conn, "SELECT session_id FROM simba_session_open('5s', '5s')");
        if (PQresultStatus(r) != PGRES_TUPLES_OK) return 2;
        s.sid = PQgetvalue(r, 0, 0);
        c.sids.push_back(s.sid);
        PQclear(r);
    }
    Stats& stats = c.stats;
    std::map<std::string, long> by_state;
    static const char* const levels[] = {"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"};

    for (long i = 0; i < calls; ++i) {
        Session& s = sessions[pick(static_cast<int>(sessions.size()))];
        if (!s.in_txn && pick(4) == 0) {
            s.in_txn = command(s, std::string("BEGIN ISOLATION LEVEL ") + levels[pick(3)]);
            s.calls_left = 1 + pick(4);
        }
        if (s.in_txn && !s.in_savepoint && pick(4) == 0) s.in_savepoint = command(s, "SAVEPOINT sp");

        Call call;
        const Arg sess = session_id(s, c.sids);
        int kind = pick(19);
        switch (kind) {
            case 0: case 1:
                call = {"SELECT mutex, owner_id, fence, owner_role FROM simba_acquire($1, $2, $3::interval, $4::interval, "
                        "$5::uuid)",
                        {name(), contender(), interval(), interval(), sess}};
                break;
            case 2: call = {"SELECT simba_release($1, $2)", {name(), contender()}}; break;
            case 3: call = {"SELECT owner_id FROM simba_owner($1)", {name()}}; break;
            case 4:
                call = {"SELECT simba_fence_check($1, $2, $3::bigint)", {name(), contender(), integer(true)}};
                break;
            case 5:
                call = {"SELECT token FROM simba_semaphore_acquire($1, $2, $3::integer, $4::interval, $5, $6::uuid)",
                        {name(), contender(), integer(false), interval(), pick(3) ? Arg{} : name(), sess}};
                break;
            case 6:
                call = {"SELECT simba_semaphore_refresh($1, $2::uuid, $3::interval)",
                        {name(), token(c.tokens), interval()}};
                break;
            case 7: call = {"SELECT simba_semaphore_release($1, $2::uuid)", {name(), token(c.tokens)}}; break;
            case 8:
                call = {"SELECT simba_semaphore_fence_check($1, $2::uuid, $3::bigint)",
                        {name(), token(c.tokens), integer(true)}};
                break;
            case 9:
                call = {"SELECT mutex, owner_id, fence, owner_role FROM simba_acquire_all($1::text[], $2, $3::interval, "
                        "$4::interval, $5::uuid)",
                        {names(), contender(), interval(), interval(), sess}};
                break;
            case 10: call = {"SELECT simba_release_all($1::text[], $2)", {names(), contender()}}; break;
            case 11:
                call = {"SELECT mode, granted, fence FROM simba_rwlock_acquire($1, $2, $3, $4::interval, $5::interval, "
                        "$6::uuid)",
                        {name(), contender(), rw_mode(), interval(), interval(), sess}};
                break;
            case 12: call = {"SELECT simba_rwlock_release($1, $2)", {name(), contender()}}; break;
            case 14:
                call = {"SELECT mutex, owner_id, fence, owner_role FROM simba_fair_acquire($1, $2, $3::interval, "
                        "$4::interval, $5::uuid)",
                        {name(), contender(), interval(), interval(), sess}};
                break;
            case 15: call = {"SELECT simba_fair_release($1, $2)", {name(), contender()}}; break;
            case 16:
                call = {"SELECT revoked FROM simba_session_keepalive($1::uuid)", {sess}};
                break;
            case 17: call = {"SELECT simba_session_close($1::uuid)", {sess}}; break;
            case 18:
                call = {"SELECT session_id FROM simba_session_open($1::interval, $2::interval)", {interval(), interval()}};
                break;
            default:
                call = {"SELECT simba_rwlock_fence_check($1, $2, $3::bigint)", {name(), contender(), integer(true)}};
        }
        PGresult* r = run(s.conn, call);
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_TUPLES_OK) {
            ++stats.ok;
            ++by_state["ok"];
            if ((kind <= 1 || kind == 5 || kind == 9 || kind == 11 || kind == 14) && sess) ++stats.under_session;
            const bool row = PQntuples(r) == 1 && !PQgetisnull(r, 0, 0);
            if ((kind <= 1 || kind == 14) && row && !PQgetisnull(r, 0, 1))
                c.saw_owner(s, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), std::atoll(PQgetvalue(r, 0, 2)),
                            PQgetvalue(r, 0, 3));
            if (kind == 4 && call.args[0] && call.args[1] && call.args[2]) {
                // A passed fence check: the tenure, if seen, is the caller's.
                auto it = c.holder_of.find({*call.args[0], std::atoll(call.args[2]->c_str())});
                if (it != c.holder_of.end() && it->second != Holder{*call.args[1], s.role})
                    violation(stats, s.role + " passed a fence check on " + *call.args[0] + " with the tenure of " +
                                         it->second.first + " (" + it->second.second + ")");
            }
            if (kind == 9) {
                // All or nothing: a refused multi-lock (a member not the
                // caller's) began no tenure, so every row it shows as the
                // caller's is one seen before.
                bool all_mine = true;
                for (int k = 0; k < PQntuples(r); ++k)
                    all_mine = all_mine && !PQgetisnull(r, k, 1) && call.args[1] &&
                               PQgetvalue(r, k, 1) == *call.args[1] && PQgetvalue(r, k, 3) == s.role;
                for (int k = 0; k < PQntuples(r); ++k) {
                    if (PQgetisnull(r, k, 1)) continue;
                    const Tenure t{PQgetvalue(r, k, 0), std::atoll(PQgetvalue(r, k, 2))};
                    if (!all_mine && PQgetvalue(r, k, 3) == s.role && !c.holder_of.count(t))
                        violation(stats, "a refused multi-lock of " + s.role + " began tenure " + t.first + "/" +
                                             std::to_string(t.second));
                    c.saw_owner(s, t.first, PQgetvalue(r, k, 1), t.second, PQgetvalue(r, k, 3));
                }
            }
            if (kind == 11 && !s.in_txn && call.args[0]) {
                // A grant just committed: no writer beside another live holder of that lock.
                const char* v[] = {call.args[0]->c_str()};
                PGresult* o = PQexecParams(conn, kRwOverlapSql, 1, nullptr, v, nullptr, nullptr, 0);
                if (PQresultStatus(o) != PGRES_TUPLES_OK)
                    violation(stats, std::string("rwlock overlap check: ") + PQerrorMessage(conn));
                else if (PQntuples(o) > 0)
                    violation(stats, std::string("rwlock holders overlap: ") + PQgetvalue(o, 0, 0));
                PQclear(o);
            }
            if (kind == 18 && row) {  // the caller's session from now on (unknown if its transaction rolls back)
                s.sid = PQgetvalue(r, 0, 0);
                c.sids.push_back(s.sid);
            }
            if (kind == 5 && row) {
                c.tokens.push_back(PQgetvalue(r, 0, 0));
                c.token_role[PQgetvalue(r, 0, 0)] = s.role;
            }
            if ((kind == 6 || kind == 7 || kind == 8) && call.args[1]) {
                // Refresh and release answer true, a fence check passes, only for the token's own role.
                const bool worked = kind == 8 || (row && std::string(PQgetvalue(r, 0, 0)) == "t");
                auto it = c.token_role.find(*call.args[1]);
                if (worked && it != c.token_role.end() && it->second != s.role)
                    violation(stats, s.role + " used the permit token of " + it->second + " in " + call.sql);
            }
        } else if (st == PGRES_FATAL_ERROR) {
            const char* code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            std::string state = code ? code : "(none)";
            ++by_state[state];
            if (documented.count(state) || (s.in_txn && documented_in_transaction.count(state))) {
                ++stats.documented_errors;
                if (state == "SB004" && sess == s.sid && !s.in_txn) {  // its own session ended: a new one
                    PGresult* o = PQexec(s.conn, "SELECT session_id FROM simba_session_open('5s', '5s')");
                    if (PQresultStatus(o) == PGRES_TUPLES_OK) {
                        s.sid = PQgetvalue(o, 0, 0);
                        c.sids.push_back(s.sid);
                    }
                    PQclear(o);
                }
            } else {
                violation(stats, "undocumented SQLSTATE " + state + " for " + call.sql + ": " +
                                     PQresultErrorMessage(r));
            }
        } else {
            violation(stats, std::string("unexpected result ") + PQresStatus(st) + " for " + call.sql);
        }
        PQclear(r);
        if (PQstatus(s.conn) != CONNECTION_OK) {
            violation(stats, "connection broke (server crash?) after " + call.sql);
            break;
        }
        if (s.in_txn) {
            // An error aborts the work since the savepoint, or the transaction.
            if (st != PGRES_TUPLES_OK && s.in_savepoint && command(s, "ROLLBACK TO SAVEPOINT sp")) {
                c.rolled_back(s.new_in_savepoint);
                Checker::end_savepoint(s, false);
                s.in_savepoint = false;
            } else if (st != PGRES_TUPLES_OK) {
                finish(s, c, false);
            } else if (s.in_savepoint && pick(3) == 0) {
                const bool undo = pick(2) == 0;
                command(s, undo ? "ROLLBACK TO SAVEPOINT sp" : "RELEASE SAVEPOINT sp");
                if (undo) c.rolled_back(s.new_in_savepoint);
                Checker::end_savepoint(s, !undo);
                s.new_in_txn.insert(s.new_in_txn.end(), s.new_in_savepoint.begin(), s.new_in_savepoint.end());
                s.new_in_savepoint.clear();
                s.in_savepoint = false;
            }
            if (s.in_txn && --s.calls_left <= 0) finish(s, c, pick(2) == 0);
        }
    }
    for (auto& s : sessions)
        if (s.in_txn) finish(s, c, true);

    // Invariants on the rows the calls left behind.
    check_rows(conn, stats, "mutex row",
               "SELECT mutex || ': ' || coalesce(owner_id, '<free>') FROM simba_mutex "
               "WHERE fence < 1 OR version < 1 "
               "OR (owner_id IS NULL) <> (transition_at IS NULL) "
               "OR (owner_id IS NULL) <> (ttl_at IS NULL) "
               "OR (owner_id IS NULL) <> (owner_role IS NULL) "
               "OR NOT (CASE WHEN session_id IS NULL THEN acquired_at < ttl_at ELSE acquired_at <= transition_at END "
               "        AND ttl_at <= transition_at) "
               "OR mutex = '' OR char_length(mutex) > 256 OR owner_id = '' OR char_length(owner_id) > 256");
    check_rows(conn, stats, "permit row",
               "SELECT key || '/' || slot FROM simba_semaphore_permit "
               "WHERE fence < 1 OR slot < 0 OR NOT (acquired_at <= expires_at) "
               "OR key = '' OR holder = '' OR holder_role IS NULL OR char_length(context) > 256");
    check_rows(conn, stats, "over-allocation",
               "SELECT key || ': ' || count(*) || ' live > ' || max(s.permits) "
               "FROM simba_semaphore_permit p JOIN simba_semaphore s USING (key) "
               "WHERE p.expires_at > clock_timestamp() GROUP BY key HAVING count(*) > 10000");
    check_rows(conn, stats, "duplicate fence",
               "SELECT key || ': fence ' || fence FROM simba_semaphore_permit GROUP BY key, fence HAVING count(*) > 1");
    check_rows(conn, stats, "tenure begun twice",
               "SELECT mutex || ': fence ' || fence FROM simba_mutex_history "
               "WHERE event IN ('acquired', 'taken_over', 'reacquired') GROUP BY mutex, fence HAVING count(*) > 1");
    // Read-write locks: never a fence above the lock's epoch.
    check_rows(conn, stats, "rwlock fence above its epoch",
               "SELECT h.rwlock || ': ' || h.fence || ' > ' || r.write_fence FROM simba_rwlock_holder h "
               "JOIN simba_rwlock r USING (rwlock) WHERE h.fence > r.write_fence");
    check_rows(conn, stats, "late release repeated",
               "SELECT mutex || ': fence ' || fence FROM simba_mutex_history WHERE event = 'late_release' "
               "GROUP BY mutex, fence HAVING count(*) > 1");
    {
        // The committed fence of every mutex is at least the highest committed fence seen.
        std::string sql = "SELECT m.mutex || ': ' || m.fence || ' < ' || v.f FROM simba_mutex m JOIN (VALUES ";
        bool first = true;
        std::vector<std::string> params;
        for (const auto& [m, f] : c.last_fence) {
            params.push_back(m);
            sql += std::string(first ? "" : ", ") + "($" + std::to_string(params.size()) + "::text, " +
                   std::to_string(f) + "::bigint)";
            first = false;
        }
        sql += ") AS v(mutex, f) USING (mutex) WHERE m.fence < v.f";
        if (!params.empty()) {
            std::vector<const char*> values;
            for (const auto& p : params) values.push_back(p.c_str());
            PGresult* r = PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                                       nullptr, nullptr, 0);
            if (PQresultStatus(r) != PGRES_TUPLES_OK)
                violation(stats, std::string("final fences: ") + PQerrorMessage(conn));
            for (int k = 0; PQresultStatus(r) == PGRES_TUPLES_OK && k < PQntuples(r); ++k)
                violation(stats, std::string("final fence below a committed one: ") + PQgetvalue(r, k, 0));
            PQclear(r);
        }
    }

    std::printf("sql_fuzz: answers by SQLSTATE:");
    for (const auto& [state, n] : by_state) std::printf(" %s=%ld", state.c_str(), n);
    std::printf("\nsql_fuzz: %ld successful calls (%ld acquires under a session), %ld documented errors, %zu tenures, "
                "%zu rolled back, %zu permits\n",
                stats.ok, stats.under_session, stats.documented_errors, c.holder_of.size(), c.dead.size(),
                c.tokens.size());
    const long checked = stats.ok + stats.documented_errors;
    std::printf("sql_fuzz: %ld passed, %ld failed\n", checked, stats.violations);
    for (auto& s : sessions) PQfinish(s.conn);
    PQfinish(conn);
    return stats.violations == 0 ? 0 : 1;
}
