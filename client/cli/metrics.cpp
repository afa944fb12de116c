// simba CLI: `simba metrics` — the server-side numbers in the Prometheus text
// format, printed once or served on /metrics (--listen) with cpp-httplib.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include <httplib.h>

#include "cli.hpp"
#include "simba/metrics.hpp"

namespace simba::cli {

namespace {

/// Drops the newlines libpq ends its messages with.
std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

/// One family per column of a query's rows, keyed by the first `keys` columns.
struct Fam {
    const char* name;
    const char* type;
    const char* help;
    int col;
};

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

std::string server_metrics(pqxx::connection& conn) {
    PrometheusText x;
    pqxx::result mutexes, sems;
    bool history = false;
    try {
        pqxx::nontransaction tx(conn);
        mutexes = tx.exec(
            "SELECT mutex, owner_id, state, coalesce(extract(epoch FROM time_left)::float8, 0), fence, version"
            " FROM simba_mutex_status ORDER BY mutex");
        sems = tx.exec(
            "SELECT key, count(*), max(permits), max(fence) FROM simba_semaphore_status GROUP BY key ORDER BY key");
        history = tx.exec1("SELECT coalesce(current_setting('simba.history', true), 'off')")[0].as<std::string>() == "on";
    } catch (const pqxx::failure& e) {
        fail_sql(e, "reading simba_mutex_status");
    }
    std::string stats_error, sessions_error, rwlocks_error;
    const pqxx::result stats = optional_rows(
        conn,
        "SELECT mutex, coalesce(holder, ''), acquisitions, releases, late_releases, expired, forced_releases,"
        " coalesce(extract(epoch FROM last_event_at)::float8, 0) FROM simba_mutex_stats ORDER BY 1, 2",
        stats_error);
    // Every state, also those with no session now, so an alert on one sees 0, not nothing.
    const pqxx::result sessions = optional_rows(
        conn,
        "SELECT s.state, count(v.session_id), coalesce(sum(v.mutexes), 0), coalesce(sum(v.permits), 0),"
        " coalesce(sum(v.rwlocks), 0)"
        " FROM unnest(ARRAY['held', 'transition', 'ended']) AS s(state)"
        " LEFT JOIN simba_session_status v ON v.state = s.state GROUP BY s.state ORDER BY s.state",
        sessions_error);
    const pqxx::result rwlocks = optional_rows(
        conn,
        "SELECT rwlock, CASE WHEN mode = 'read' THEN cardinality(holders) ELSE 0 END,"
        " (mode = 'write')::int, waiting_writers, write_fence FROM simba_rwlock_status ORDER BY rwlock",
        rwlocks_error);

    const Fam mfams[] = {
        {"simba_mutex_held", "gauge", "1 while the mutex has an owner whose lease has not ended (held or transition).", -1},
        {"simba_mutex_in_transition", "gauge", "1 while the owner's ttl has passed but its transition has not.", -2},
        {"simba_mutex_time_left_seconds", "gauge", "Seconds until others may take the mutex (0 when free).", 3},
        {"simba_mutex_fence", "gauge", "Fence of the latest tenure of the mutex.", 4},
        {"simba_mutex_version", "gauge", "Change counter of the mutex row (acquisitions, renewals, releases).", 5},
    };
    for (auto& f : mfams) {
        x.family(f.name, f.type, f.help);
        for (auto r : mutexes) {
            double v;
            const std::string state = str(r[2]);
            if (f.col == -1) v = (state == "held" || state == "transition") ? 1 : 0;
            else if (f.col == -2) v = state == "transition" ? 1 : 0;
            else v = num(r[f.col]);
            x.sample(f.name, {{"mutex", str(r[0])}}, v);
        }
    }
    x.family("simba_mutex_owner_info", "gauge", "1 for the current owner of each held mutex (owner as a label).");
    for (auto r : mutexes)
        if (!r[1].is_null() && str(r[2]) != "free") x.sample("simba_mutex_owner_info", {{"mutex", str(r[0])}, {"owner", str(r[1])}}, 1);

    const Fam sfams[] = {
        {"simba_semaphore_permits_held", "gauge", "Live permits of the semaphore key.", 1},
        {"simba_semaphore_permits_limit", "gauge", "The permits limit of the latest acquire of the key.", 2},
        {"simba_semaphore_fence", "gauge", "Highest fence among the live permits of the key.", 3},
    };
    for (auto& f : sfams) {
        x.family(f.name, f.type, f.help);
        for (auto r : sems) x.sample(f.name, {{"key", str(r[0])}}, num(r[f.col]));
    }

    if (!sessions_error.empty()) x.comment("simba_session_status unavailable: " + sessions_error);
    const Fam sessfams[] = {
        {"simba_session_count", "gauge",
         "Sessions by state: held, transition (its keepalive is late), ended (not yet collected).", 1},
        {"simba_session_mutexes", "gauge", "Mutexes held under the sessions of each state.", 2},
        {"simba_session_permits", "gauge", "Semaphore permits held under the sessions of each state.", 3},
        {"simba_session_rwlocks", "gauge", "Read-write lock holds under the sessions of each state.", 4},
    };
    for (auto& f : sessfams) {
        x.family(f.name, f.type, f.help);
        for (auto r : sessions) x.sample(f.name, {{"state", str(r[0])}}, num(r[f.col]));
    }

    if (!rwlocks_error.empty()) x.comment("simba_rwlock_status unavailable: " + rwlocks_error);
    const Fam rwfams[] = {
        {"simba_rwlock_readers", "gauge", "Live read holds of the read-write lock.", 1},
        {"simba_rwlock_write_held", "gauge", "1 while a writer holds the read-write lock.", 2},
        {"simba_rwlock_waiting_writers", "gauge", "Writers queued for the read-write lock (new readers wait).", 3},
        {"simba_rwlock_write_fence", "gauge", "Fence of the latest writer: the write epoch readers read under.", 4},
    };
    for (auto& f : rwfams) {
        x.family(f.name, f.type, f.help);
        for (auto r : rwlocks) x.sample(f.name, {{"rwlock", str(r[0])}}, num(r[f.col]));
    }

    x.family("simba_history_enabled", "gauge",
             "1 when simba.history is on for this database (the *_total per-holder counters need it).");
    x.sample("simba_history_enabled", {}, history ? 1 : 0);
    if (!stats_error.empty()) x.comment("simba_mutex_stats unavailable: " + stats_error);
    const Fam hfams[] = {
        {"simba_mutex_acquisitions_total", "counter", "Tenures begun by the holder (from simba_mutex_history).", 2},
        {"simba_mutex_releases_total", "counter", "Releases by the holder.", 3},
        {"simba_mutex_late_releases_total", "counter",
         "Releases by the holder that found its lease already ended (finished after the lease ended).", 4},
        {"simba_mutex_expired_total", "counter", "Tenures of the holder that ended by expiry (lease lost).", 5},
        {"simba_mutex_forced_releases_total", "counter", "Tenures of the holder ended by simba_force_release.", 6},
        {"simba_mutex_last_event_timestamp_seconds", "gauge", "Unix time of the holder's latest history event.", 7},
    };
    for (auto& f : hfams) {
        x.family(f.name, f.type, f.help);
        for (auto r : stats) x.sample(f.name, {{"mutex", str(r[0])}, {"holder", str(r[1])}}, num(r[f.col]));
    }
    return x.str();
}

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
