// simba CLI: durations, connecting, error mapping.
#include <sys/socket.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cli.hpp"

namespace simba::cli {

std::chrono::microseconds parse_duration(const std::string& text, const std::string& what) {
    const char* p = text.c_str();
    char* end = nullptr;
    double v = std::strtod(p, &end);
    std::string unit = end ? std::string(end) : std::string();
    double mult = 0;
    if (unit.empty() || unit == "s") mult = 1e6;
    else if (unit == "ms") mult = 1e3;
    else if (unit == "us") mult = 1;
    else if (unit == "m" || unit == "min") mult = 60e6;
    else if (unit == "h") mult = 3600e6;
    if (end == p || mult == 0 || !std::isfinite(v) || v < 0 || v * mult > 1e15)
        throw UsageError("invalid " + what + " \"" + text + "\": use a duration like 10s, 500ms, 1.5s, 2m");
    return std::chrono::microseconds(static_cast<std::int64_t>(std::llround(v * mult)));
}

std::string format_duration(std::chrono::microseconds d) {
    char buf[64];
    double s = static_cast<double>(d.count()) / 1e6;
    if (s < 1) std::snprintf(buf, sizeof buf, "%.0fms", s * 1e3);
    else if (s < 120) std::snprintf(buf, sizeof buf, "%.1fs", s);
    else std::snprintf(buf, sizeof buf, "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
    return buf;
}

std::string to_interval(std::chrono::microseconds d) { return std::to_string(d.count()) + " microseconds"; }

std::unique_ptr<pqxx::connection> connect(const std::string& dsn, const std::string& application_name) {
    // application_name unless the DSN sets one (libpq: a later keyword wins, so prepend).
    std::string conninfo = "application_name='" + application_name + "' connect_timeout=5";
    if (!dsn.empty()) {
        if (dsn.find("://") != std::string::npos) conninfo = dsn;  // a URI cannot be mixed with keywords
        else conninfo += " " + dsn;
    }
    try {
        return std::make_unique<pqxx::connection>(conninfo);
    } catch (const std::exception& e) {
        std::string msg = e.what();
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
        throw Failure(unavailable, "could not connect to the server: " + msg +
                                       "\nhint: set PGHOST, PGPORT, PGDATABASE, PGUSER (libpq's environment) "
                                       "or pass --dsn 'host=... dbname=... user=...'");
    }
}

AnswerDeadline::AnswerDeadline(pqxx::connection& c) {
    const int sock = c.sock();
    t_ = std::thread([this, sock] {
        std::unique_lock<std::mutex> lock(m_);
        if (cv_.wait_for(lock, answer_deadline, [this] { return done_; })) return;
        std::fprintf(stderr,
                     "simba: no answer from the server within %s: giving up (the server, a pooler or the network is "
                     "stuck, or a long transaction locks the row); a change the command asked for may still happen\n",
                     format_duration(answer_deadline).c_str());
        ::shutdown(sock, SHUT_RDWR);
    });
}

AnswerDeadline::~AnswerDeadline() {
    {
        std::lock_guard<std::mutex> lock(m_);
        done_ = true;
    }
    cv_.notify_one();
    t_.join();
}

void fail_sql(const std::exception& e, const std::string& doing) {
    std::string msg = e.what();
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    std::string state;
    if (auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) state = sql->sqlstate();
    if (dynamic_cast<const pqxx::broken_connection*>(&e) || state.rfind("08", 0) == 0)
        throw Failure(unavailable, doing + ": connection lost: " + msg);
    if (state == "42501" || dynamic_cast<const pqxx::insufficient_privilege*>(&e))
        throw Failure(no_permission, doing + ": permission denied: " + msg +
                                         "\nhint: simba's owner (a superuser for the extension, the installing role "
                                         "for the portable edition) runs SELECT simba_grant('<role>') to let a role "
                                         "use simba");
    if (state == "42883" || state == "42P01" || dynamic_cast<const pqxx::undefined_function*>(&e) ||
        dynamic_cast<const pqxx::undefined_table*>(&e))
        throw Failure(config, doing + ": " + msg +
                                  "\nhint: the simba extension is missing or too old in this database: "
                                  "CREATE EXTENSION simba (or ALTER EXTENSION simba UPDATE) as a superuser; "
                                  "with the portable edition, put its schema on the role's search_path");
    if (state.rfind("22", 0) == 0) throw Failure(usage, doing + ": " + msg);
    throw Failure(software, doing + ": " + msg + (state.empty() ? "" : " (SQLSTATE " + state + ")"));
}

}  // namespace simba::cli
