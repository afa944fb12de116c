// simba CLI: `simba metrics` — the server-side numbers in the Prometheus text
// format, printed once or served on /metrics (--listen) with cpp-httplib.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include <httplib.h>

#include "cli.hpp"
#include "metrics_text.hpp"
#include "simba/metrics.hpp"

namespace simba::cli {

namespace {

/// Drops the newlines libpq ends its messages with.
std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

/// An optional part of the exposition: its rows, or why it could not be
/// read (an older extension, no SELECT on the view), which the text then
/// says in a comment while the rest is still printed.
pqxx::result optional_rows(pqxx::connection& c, const char* sql, std::string& error) {
    try {
        pqxx::nontransaction tx(c);
        return tx.exec(sql);
    } catch (const pqxx::broken_connection&) {
        throw;
    } catch (const pqxx::failure& e) {
        error = trimmed(e.what());
        return {};
    }
}

/// The views every exposition needs, in one nontransaction: a failure is the command's.
void read_required(pqxx::connection& conn, ServerRows& rows) {
    try {
        pqxx::nontransaction tx(conn);
        for (auto r : tx.exec("SELECT mutex, owner_id, state, coalesce(extract(epoch FROM time_left)::float8, 0), fence,"
                              " version FROM simba_mutex_status ORDER BY mutex"))
            rows.mutexes.push_back({str(r[0]), r[1].is_null() ? std::nullopt : std::optional<std::string>(str(r[1])),
                                    str(r[2]), num(r[3]), num(r[4]), num(r[5])});
        for (auto r : tx.exec("SELECT key, count(*), max(permits), max(fence) FROM simba_semaphore_status GROUP BY key"
                              " ORDER BY key"))
            rows.semaphores.push_back({str(r[0]), num(r[1]), num(r[2]), num(r[3])});
        rows.history =
            tx.exec1("SELECT coalesce(current_setting('simba.history', true), 'off')")[0].as<std::string>() == "on";
    } catch (const pqxx::failure& e) {
        fail_sql(e, "reading simba_mutex_status");
    }
}

ServerRows read_server_rows(pqxx::connection& conn) {
    ServerRows rows;
    read_required(conn, rows);
    for (auto r : optional_rows(
             conn,
             "SELECT mutex, coalesce(holder, ''), acquisitions, releases, late_releases, expired, forced_releases,"
             " coalesce(extract(epoch FROM last_event_at)::float8, 0) FROM simba_mutex_stats ORDER BY 1, 2",
             rows.stats_error))
        rows.stats.push_back({str(r[0]), str(r[1]), num(r[2]), num(r[3]), num(r[4]), num(r[5]), num(r[6]), num(r[7])});
    // Every state, also those with no session now, so an alert on one sees 0, not nothing.
    for (auto r : optional_rows(
             conn,
             "SELECT s.state, count(v.session_id), coalesce(sum(v.mutexes), 0), coalesce(sum(v.permits), 0),"
             " coalesce(sum(v.rwlocks), 0)"
             " FROM unnest(ARRAY['held', 'transition', 'ended']) AS s(state)"
             " LEFT JOIN simba_session_status v ON v.state = s.state GROUP BY s.state ORDER BY s.state",
             rows.sessions_error))
        rows.sessions.push_back({str(r[0]), num(r[1]), num(r[2]), num(r[3]), num(r[4])});
    for (auto r : optional_rows(
             conn,
             "SELECT rwlock, CASE WHEN mode = 'read' THEN cardinality(holders) ELSE 0 END,"
             " (mode = 'write')::int, waiting_writers, write_fence FROM simba_rwlock_status ORDER BY rwlock",
             rows.rwlocks_error))
        rows.rwlocks.push_back({str(r[0]), num(r[1]), num(r[2]), num(r[3]), num(r[4])});
    return rows;
}

std::string server_metrics(pqxx::connection& conn) { return server_metrics_text(read_server_rows(conn)); }

struct ListenAddress {
    std::string host;
    int port;
};

/// "HOST:PORT", "[IPV6]:PORT" or ":PORT" (every IPv4 address); port 0 picks a free one.
ListenAddress parse_listen(const std::string& text) {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos)
        throw UsageError("--listen wants ADDRESS:PORT (127.0.0.1:9808, [::1]:9808, :9808), not \"" + text + "\"");
    std::string host = text.substr(0, colon);
    const std::string port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host.empty()) host = "0.0.0.0";
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) > 65535)
        throw UsageError("--listen: the port must be a number from 0 to 65535, not \"" + port + "\"");
    return {host, std::stoi(port)};
}

/// /metrics answers from one connection, opened again after it is lost: a
/// scrape while the database is unreachable (down, failing over, a wrong
/// DSN) answers simba_up 0 and why, in a comment, instead of failing.
class Exporter {
public:
    explicit Exporter(std::string dsn) : dsn_(std::move(dsn)) {}

    std::string scrape() {
        std::lock_guard<std::mutex> g(m_);
        std::string body, error;
        try {
            if (!conn_) conn_ = connect(dsn_, "simba-metrics");
            AnswerDeadline deadline(*conn_);
            body = server_metrics(*conn_);
        } catch (const Failure& e) {
            error = e.what();
            if (e.code == unavailable) conn_.reset();
        } catch (const std::exception& e) {
            error = e.what();
            conn_.reset();
        }
        // Said once per change, not at every scrape.
        if (error.empty() != up_) {
            up_ = error.empty();
            if (up_) std::fprintf(stderr, "simba metrics: the database answers again\n");
            else std::fprintf(stderr, "simba metrics: scrape failed, simba_up 0: %s\n", error.c_str());
        }
        PrometheusText x;
        x.family("simba_up", "gauge", "1 when this exporter's last query of the database succeeded.");
        x.sample("simba_up", {}, error.empty() ? 1 : 0);
        if (!error.empty()) x.comment("simba metrics: " + error);
        return x.str() + body;
    }

private:
    const std::string dsn_;
    std::mutex m_;
    std::unique_ptr<pqxx::connection> conn_;
    bool up_ = true;
};

int serve(const Args& a) {
    const ListenAddress where = parse_listen(*a.listen);
    // SIGTERM and SIGINT stop the server: blocked here before any thread
    // starts, so every thread inherits the mask and one thread waits for them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    Exporter exporter(a.dsn);
    httplib::Server server;
    server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
        res.set_content(exporter.scrape(), "text/plain; version=0.0.4; charset=utf-8");
    });
    server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });

    errno = 0;
    const int port = where.port == 0 ? server.bind_to_any_port(where.host) : server.bind_to_port(where.host, where.port) ? where.port : -1;
    if (port < 0)
        throw Failure(unavailable, "could not listen on " + *a.listen +
                                       (errno ? std::string(": ") + std::strerror(errno) : std::string()));
    const bool v6 = where.host.find(':') != std::string::npos;
    std::fprintf(stderr, "simba metrics: serving http://%s%s%s:%d/metrics\n", v6 ? "[" : "", where.host.c_str(),
                 v6 ? "]" : "", port);

    std::thread stopper([&] {
        int sig = 0;
        sigwait(&stop_signals, &sig);
        server.stop();
    });
    const bool listened = server.listen_after_bind();
    // listen_after_bind returns only when stopped (or on a failed accept):
    // wake the stopper if no signal did.
    if (stopper.joinable()) {
        ::kill(::getpid(), SIGTERM);
        stopper.join();
    }
    return listened ? ok : software;
}

}  // namespace

int cmd_metrics(const Args& a) {
    if (a.listen) return serve(a);
    auto conn = connect(a.dsn, "simba-metrics");
    AnswerDeadline deadline(*conn);
    std::fputs(server_metrics(*conn).c_str(), stdout);
    return ok;
}

}  // namespace simba::cli
