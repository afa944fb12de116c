// sql_fuzz — hostile input against simba's SQL API (a real server, via libpq).
//
// Makes N random calls (default 20,000) to every simba function with values
// drawn from hostile generators: NULLs, empty and 1 MB strings, control
// characters, quotes and backslashes, invalid UTF-8, extreme and calendar
// intervals, negative and huge fences and permits, random tokens. Every call
// must either succeed or fail with a documented SQLSTATE; the connection
// must never break (a crashed backend breaks it). Afterwards the rows must
// still satisfy simba's invariants, and the fences every successful acquire
// returned must never have gone backwards for a mutex.
//
// Usage: sql_fuzz [calls] [seed]   (server from libpq's PG* environment; the
// calls run in a database of their own, simba_fuzz, made anew each run)
// Prints "sql_fuzz: N passed, N failed" and exits non-zero on any violation.
#include <libpq-fe.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using Arg = std::optional<std::string>;  // nullopt = SQL NULL

// What the API may answer besides success (README "Errors and limits").
const std::set<std::string> documented = {
    "22004",                    // NULL argument
    "22023",                    // invalid value
    "22008",                    // lease beyond the timestamp range
    "22021",                    // invalid UTF-8 (rejected by the server's input)
    "22P02", "22007", "22015",  // bad uuid / interval text, interval overflow
    "SB001", "SB002", "SB003",  // fence checks
};

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

struct Call {
    std::string sql;
    std::vector<Arg> args;
};

struct Stats {
    long ok = 0, documented_errors = 0, violations = 0;
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

}  // namespace

int main(int argc, char** argv) {
    const long calls = argc > 1 ? std::atol(argv[1]) : 20000;
    const unsigned long seed = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : std::random_device{}();
    rng.seed(seed);
    std::printf("sql_fuzz: %ld calls, seed %lu\n", calls, seed);

    PGconn* conn = PQconnectdb("");
    if (PQstatus(conn) != CONNECTION_OK) {
        std::fprintf(stderr, "sql_fuzz: cannot connect: %s", PQerrorMessage(conn));
        return 2;
    }
    if (!exec_ok(conn, "SET client_min_messages = error") ||
        !exec_ok(conn, "DROP DATABASE IF EXISTS simba_fuzz") || !exec_ok(conn, "CREATE DATABASE simba_fuzz"))
        return 2;
    PQfinish(conn);
    conn = PQconnectdb("dbname=simba_fuzz");
    if (PQstatus(conn) != CONNECTION_OK) {
        std::fprintf(stderr, "sql_fuzz: cannot connect to simba_fuzz: %s", PQerrorMessage(conn));
        return 2;
    }
    if (!exec_ok(conn, "CREATE EXTENSION simba")) return 2;

    Stats stats;
    std::vector<std::string> tokens;                      // tokens of granted permits
    std::map<std::string, long long> last_fence;          // mutex -> highest fence seen
    std::map<std::string, long> by_state;

    for (long i = 0; i < calls; ++i) {
        Call call;
        int kind = pick(9);
        switch (kind) {
            case 0: case 1:
                call = {"SELECT mutex, owner_id, fence FROM simba_acquire($1, $2, $3::interval, $4::interval)",
                        {name(), contender(), interval(), interval()}};
                break;
            case 2: call = {"SELECT simba_release($1, $2)", {name(), contender()}}; break;
            case 3: call = {"SELECT owner_id FROM simba_owner($1)", {name()}}; break;
            case 4:
                call = {"SELECT simba_fence_check($1, $2, $3::bigint)", {name(), contender(), integer(true)}};
                break;
            case 5:
                call = {"SELECT token FROM simba_semaphore_acquire($1, $2, $3::integer, $4::interval, $5)",
                        {name(), contender(), integer(false), interval(), pick(3) ? Arg{} : name()}};
                break;
            case 6:
                call = {"SELECT simba_semaphore_refresh($1, $2::uuid, $3::interval)",
                        {name(), token(tokens), interval()}};
                break;
            case 7: call = {"SELECT simba_semaphore_release($1, $2::uuid)", {name(), token(tokens)}}; break;
            default:
                call = {"SELECT simba_semaphore_fence_check($1, $2::uuid, $3::bigint)",
                        {name(), token(tokens), integer(true)}};
        }
        PGresult* r = run(conn, call);
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_TUPLES_OK) {
            ++stats.ok;
            ++by_state["ok"];
            if (kind <= 1 && PQntuples(r) == 1 && !PQgetisnull(r, 0, 2)) {
                // Fences of a mutex never go backwards between calls.
                std::string mutex = PQgetvalue(r, 0, 0);
                long long fence = std::atoll(PQgetvalue(r, 0, 2));
                auto it = last_fence.find(mutex);
                if (it != last_fence.end() && fence < it->second)
                    violation(stats, "fence of " + mutex + " went back from " +
                                         std::to_string(it->second) + " to " + std::to_string(fence));
                last_fence[mutex] = fence;
            }
            if (kind == 5 && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0)) tokens.push_back(PQgetvalue(r, 0, 0));
        } else if (st == PGRES_FATAL_ERROR) {
            const char* code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            std::string state = code ? code : "(none)";
            ++by_state[state];
            if (documented.count(state)) {
                ++stats.documented_errors;
            } else {
                violation(stats, "undocumented SQLSTATE " + state + " for " + call.sql + ": " +
                                     PQresultErrorMessage(r));
            }
        } else {
            violation(stats, std::string("unexpected result ") + PQresStatus(st) + " for " + call.sql);
        }
        PQclear(r);
        if (PQstatus(conn) != CONNECTION_OK) {
            violation(stats, "connection broke (server crash?) after " + call.sql);
            break;
        }
    }

    // Invariants on the rows the calls left behind.
    check_rows(conn, stats, "mutex row",
               "SELECT mutex || ': ' || coalesce(owner_id, '<free>') FROM simba_mutex "
               "WHERE fence < 1 OR version < 1 "
               "OR (owner_id IS NULL) <> (transition_at IS NULL) "
               "OR (owner_id IS NULL) <> (ttl_at IS NULL) "
               "OR NOT (acquired_at < ttl_at AND ttl_at <= transition_at) "
               "OR mutex = '' OR char_length(mutex) > 256 OR owner_id = '' OR char_length(owner_id) > 256");
    check_rows(conn, stats, "permit row",
               "SELECT key || '/' || slot FROM simba_semaphore_permit "
               "WHERE fence < 1 OR slot < 0 OR NOT (acquired_at <= expires_at) "
               "OR key = '' OR holder = '' OR char_length(context) > 256");
    check_rows(conn, stats, "over-allocation",
               "SELECT key || ': ' || count(*) || ' live > ' || max(s.permits) "
               "FROM simba_semaphore_permit p JOIN simba_semaphore s USING (key) "
               "WHERE p.expires_at > clock_timestamp() GROUP BY key HAVING count(*) > 10000");
    check_rows(conn, stats, "duplicate fence",
               "SELECT key || ': fence ' || fence FROM simba_semaphore_permit GROUP BY key, fence HAVING count(*) > 1");

    std::printf("sql_fuzz: answers by SQLSTATE:");
    for (const auto& [state, n] : by_state) std::printf(" %s=%ld", state.c_str(), n);
    std::printf("\nsql_fuzz: %ld successful calls, %ld documented errors, %zu mutexes, %zu permits\n",
                stats.ok, stats.documented_errors, last_fence.size(), tokens.size());
    const long checked = stats.ok + stats.documented_errors;
    std::printf("sql_fuzz: %ld passed, %ld failed\n", checked, stats.violations);
    PQfinish(conn);
    return stats.violations == 0 ? 0 : 1;
}
