// simba benchmarks: small shared helpers (timing, statistics, libpq, JSON
// and argument parsing through nlohmann-json and CLI11).
#pragma once

#include <libpq-fe.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace bench {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: comparable across processes

inline double now_us() {
    return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

inline void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(ms * 1000))); }

// ------------------------------------------------------------ arguments

/// Each benchmark declares its options on one of these (CLI11: an unknown
/// option or a bad value is an error, not a silent default); --help shows
/// every option's default.
struct Options : CLI::App {
    explicit Options(std::string description) : CLI::App(std::move(description)) {
        option_defaults()->always_capture_default();
    }
};

// ------------------------------------------------------------ statistics

struct Summary {
    std::size_t n = 0;
    double min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

inline double percentile(std::vector<double> v, double p) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    double idx = p / 100.0 * (v.size() - 1);
    auto lo = static_cast<std::size_t>(std::floor(idx));
    auto hi = static_cast<std::size_t>(std::ceil(idx));
    return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

inline Summary summarize(const std::vector<double>& v) {
    Summary s;
    s.n = v.size();
    if (v.empty()) return s;
    s.min = *std::min_element(v.begin(), v.end());
    s.max = *std::max_element(v.begin(), v.end());
    s.p50 = percentile(v, 50);
    s.p90 = percentile(v, 90);
    s.p99 = percentile(v, 99);
    double sum = 0;
    for (double x : v) sum += x;
    s.mean = sum / v.size();
    return s;
}

inline double median(std::vector<double> v) { return percentile(std::move(v), 50); }

// ------------------------------------------------------------ output

inline std::string fmt(double v, int prec = 2) {
    if (std::isnan(v)) return "n/a";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", prec, v);
    return buf;
}

/// A number for the gnuplot data files: %.6g, "null" for NaN and infinities.
inline std::string dat_num(double v) {
    if (std::isnan(v) || std::isinf(v)) return "null";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

/// JSON objects keep their keys in the order written (NaN and infinities
/// come out as null).
using Json = nlohmann::ordered_json;

inline Json json_summary(const Summary& s) {
    return {{"n", s.n}, {"min", s.min}, {"p50", s.p50}, {"p90", s.p90},
            {"p99", s.p99}, {"max", s.max}, {"mean", s.mean}};
}

inline void write_file(const std::string& path, const Json& json) {
    if (path.empty()) return;
    std::ofstream f(path);
    f << json.dump() << "\n";
    if (!f) throw std::runtime_error("cannot write " + path);
}

/// A plain-text table: header row, then rows; columns padded.
struct Table {
    std::vector<std::vector<std::string>> rows;
    void print(const std::string& title) const {
        std::vector<std::size_t> w;
        for (auto& r : rows)
            for (std::size_t i = 0; i < r.size(); ++i) {
                if (w.size() <= i) w.push_back(0);
                w[i] = std::max(w[i], r[i].size());
            }
        std::printf("\n%s\n", title.c_str());
        for (std::size_t ri = 0; ri < rows.size(); ++ri) {
            const auto& r = rows[ri];
            for (std::size_t i = 0; i < r.size(); ++i)
                std::printf(i == 0 ? "%-*s" : "  %*s", static_cast<int>(w[i]), r[i].c_str());
            std::printf("\n");
            if (ri == 0) {
                std::size_t total = 0;
                for (auto x : w) total += x + 2;
                std::printf("%s\n", std::string(total - 2, '-').c_str());
            }
        }
        std::fflush(stdout);
    }
};

// ------------------------------------------------------------ libpq

/// The client library's acquire and release statements (kAcquireSql and
/// kReleaseSql of client/src/statements.cpp; keep them in step): the owner
/// row with its times as epoch microseconds, mutex in column 0, owner_id in 1.
inline const char* const kClientAcquireSql =
    "SELECT o.mutex,"
    " CASE WHEN o.owner_role <> current_user AND o.owner_id = $2"
    " THEN o.owner_role || ':' || o.owner_id ELSE o.owner_id END,"
    " simba_epoch_us(o.acquired_at),"
    " simba_epoch_us(o.ttl_at),"
    " simba_epoch_us(o.transition_at),"
    " o.version, o.fence,"
    " simba_epoch_us(o.current_at)"
    " FROM simba_acquire($1, $2, $3::int8 * interval '1 microsecond',"
    " $4::int8 * interval '1 microsecond') AS o";
inline const char* const kClientReleaseSql = "SELECT simba_release($1, $2)";

struct Conn {
    PGconn* c = nullptr;
    explicit Conn(const std::string& conninfo = "") {
        c = PQconnectdb(conninfo.c_str());
        if (PQstatus(c) != CONNECTION_OK) {
            std::string msg = PQerrorMessage(c);
            PQfinish(c);
            c = nullptr;
            throw std::runtime_error("connect: " + msg);
        }
    }
    ~Conn() {
        if (c) PQfinish(c);
    }
    Conn(const Conn&) = delete;
    Conn& operator=(const Conn&) = delete;

    void exec(const std::string& sql) {
        PGresult* r = PQexec(c, sql.c_str());
        auto st = PQresultStatus(r);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            std::string msg = PQresultErrorMessage(r);
            PQclear(r);
            throw std::runtime_error("exec failed: " + sql + ": " + msg);
        }
        PQclear(r);
    }
    /// First column of the first row as text ("" if none).
    std::string value(const std::string& sql) {
        PGresult* r = PQexec(c, sql.c_str());
        auto st = PQresultStatus(r);
        if (st != PGRES_TUPLES_OK) {
            std::string msg = PQresultErrorMessage(r);
            PQclear(r);
            throw std::runtime_error("query failed: " + sql + ": " + msg);
        }
        std::string out = PQntuples(r) > 0 && !PQgetisnull(r, 0, 0) ? PQgetvalue(r, 0, 0) : "";
        PQclear(r);
        return out;
    }
    void prepare(const std::string& name, const std::string& sql) {
        PGresult* r = PQprepare(c, name.c_str(), sql.c_str(), 0, nullptr);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            std::string msg = PQresultErrorMessage(r);
            PQclear(r);
            throw std::runtime_error("prepare failed: " + sql + ": " + msg);
        }
        PQclear(r);
    }
    /// Runs a prepared statement with text parameters; returns rows. `first`
    /// gets the first row's column `col` ("" for NULL).
    int run(const char* name, int n, const char* const* params, std::string* first = nullptr, int col = 0) {
        PGresult* r = PQexecPrepared(c, name, n, params, nullptr, nullptr, 0);
        auto st = PQresultStatus(r);
        int rows;
        if (st == PGRES_TUPLES_OK) {
            rows = PQntuples(r);
            if (first && rows > 0) *first = PQgetisnull(r, 0, col) ? "" : PQgetvalue(r, 0, col);
        } else if (st == PGRES_COMMAND_OK) {
            rows = std::atoi(PQcmdTuples(r));
        } else {
            std::string msg = PQresultErrorMessage(r);
            PQclear(r);
            throw std::runtime_error(std::string("statement ") + name + " failed: " + msg);
        }
        PQclear(r);
        return rows;
    }
};

// ------------------------------------------------------------ process

inline long rss_kb() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

inline int thread_count() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
    return -1;
}

/// User + system CPU seconds of this process.
inline double cpu_seconds() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/// User + system CPU seconds of another process (from /proc/PID/stat).
inline double proc_cpu_seconds(long pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto p = s.rfind(')');
    if (p == std::string::npos) return NAN;
    std::stringstream ss(s.substr(p + 2));
    std::string tok;
    std::vector<std::string> f2;
    while (ss >> tok) f2.push_back(tok);
    // fields after ")": state(3) ... utime is field 14, stime 15 (1-based over the whole line)
    if (f2.size() < 13) return NAN;
    double ticks = std::stod(f2[11]) + std::stod(f2[12]);
    return ticks / sysconf(_SC_CLK_TCK);
}

}  // namespace bench
