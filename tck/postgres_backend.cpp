// simba TCK: the PostgreSQL backend description.
//
// Hooks use one superuser connection from libpq's environment (opened on
// first use, one statement at a time). Each client_tag is a login role
// regress_simba_tck_<tag>, granted with simba_grant, whose connections carry
// application_name <tag>; cutting a client off = ALTER ROLE ... NOLOGIN and
// pg_terminate_backend of the role's sessions, so its reconnects fail too.
#include <libpq-fe.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>

#include "simba/tck/postgres.hpp"

#ifndef SIMBA_TCK_POSTGRES_WORKER
#error "SIMBA_TCK_POSTGRES_WORKER (path of the PostgreSQL tck worker) must be defined"
#endif

namespace simba::tck {
namespace {

struct Admin {
    std::mutex m;
    std::unique_ptr<pqxx::connection> c;

    template <class F>
    auto with(F&& f) {
        std::lock_guard<std::mutex> lock(m);
        for (int attempt = 0;; ++attempt) {
            try {
                if (!c || !c->is_open()) c = std::make_unique<pqxx::connection>("application_name=simba-tck-admin");
                return f(*c);
            } catch (const pqxx::broken_connection&) {
                c.reset();
                if (attempt >= 2) throw;
            }
        }
    }
};

std::string role_of(const std::string& tag) { return "regress_simba_tck_" + tag; }

// A tenure under a session has the session's lease (its own times are only
// for show): the row's times are read from the session when it has one.
const char* const kRowSql =
    "SELECT m.owner_id, m.fence, m.version,"
    " (extract(epoch FROM m.acquired_at) * 1000000)::int8,"
    " (extract(epoch FROM COALESCE(s.ttl_at, m.ttl_at)) * 1000000)::int8,"
    " (extract(epoch FROM COALESCE(s.transition_at, m.transition_at)) * 1000000)::int8,"
    " (extract(epoch FROM c.t) * 1000000)::int8"
    " FROM (SELECT clock_timestamp() AS t) c LEFT JOIN simba_mutex m ON m.mutex = $1"
    " LEFT JOIN simba_session_lease s ON s.session_id = m.session_id";

std::int64_t or_zero(const pqxx::field& f) { return f.is_null() ? 0 : f.as<std::int64_t>(); }

/// Column `column` of a PgBouncer admin console command's rows, those where it
/// equals `only` (all rows when `only` is empty). Plain libpq: libpqxx refuses
/// the console's own server version.
std::vector<std::string> pooler_rows(const std::string& pooler_dsn, const char* command, const char* column,
                                     const std::string& only) {
    std::vector<std::string> out;
    PGconn* c = PQconnectdb((pooler_dsn + " dbname=pgbouncer").c_str());
    PGresult* r = PQstatus(c) == CONNECTION_OK ? PQexec(c, command) : nullptr;
    const int col = r ? PQfnumber(r, column) : -1;
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK || col < 0) {
        std::string err = PQerrorMessage(c);
        if (r) PQclear(r);
        PQfinish(c);
        throw std::runtime_error(std::string("pgbouncer console ") + command + ": " + err);
    }
    for (int i = 0; i < PQntuples(r); ++i)
        if (only.empty() || only == PQgetvalue(r, i, col)) out.emplace_back(PQgetvalue(r, i, col));
    PQclear(r);
    PQfinish(c);
    return out;
}

}  // namespace

Backend postgres_backend() { return detail::postgres_backend_via("Postgres", "", {SIMBA_TCK_POSTGRES_WORKER}); }

Backend detail::postgres_backend_via(std::string name, std::string pooler_dsn, std::vector<std::string> worker) {
    auto admin = std::make_shared<Admin>();
    Backend b;
    b.name = std::move(name);
    b.worker_command = std::move(worker);
    b.fixed_connections = pg::ContendServiceFactory::max_connections;

    b.make_factory = [admin, pooler_dsn](const std::string& tag) -> std::unique_ptr<ContendServiceFactory> {
        const auto role = role_of(tag);
        admin->with([&](pqxx::connection& c) {
            pqxx::nontransaction tx(c);
            // The portable edition is installed by the run (client/test/pg-run.sh).
            const char* edition = std::getenv("SIMBA_TEST_EDITION");
            if (!edition || std::string(edition) != "portable") tx.exec0("CREATE EXTENSION IF NOT EXISTS simba");
            if (tx.exec_params("SELECT 1 FROM pg_roles WHERE rolname = $1", role).empty())
                tx.exec0("CREATE ROLE " + c.quote_name(role) + " LOGIN");
            tx.exec_params("SELECT simba_grant($1::regrole)", c.quote_name(role));
            return 0;
        });
        pg::FactoryOptions o;
        o.application_name = tag;
        // SIMBA_TCK_SESSIONS=0: a lease per tenure (the TCK runs in both modes;
        // the workers inherit it).
        const char* sessions = std::getenv("SIMBA_TCK_SESSIONS");
        o.sessions = !(sessions && std::string(sessions) == "0");
        o.reconnect_initial = std::chrono::milliseconds(50);
        o.reconnect_max = std::chrono::milliseconds(200);
        if (pooler_dsn.empty()) return std::make_unique<pg::ContendServiceFactory>("user=" + role, o);
        // Statements through the pooler, LISTEN on a direct connection.
        o.pooled = true;
        o.listen_conninfo = "user=" + role;
        return std::make_unique<pg::ContendServiceFactory>(pooler_dsn + " user=" + role, o);
    };

    b.server_connections = [admin, pooler_dsn](const std::string& tag) {
        const auto role = role_of(tag);
        if (pooler_dsn.empty()) {
            return admin->with([&](pqxx::connection& c) {
                pqxx::nontransaction tx(c);
                return tx.exec_params1("SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role)[0].as<int>();
            });
        }
        // Through the pooler: the client's connections to the pooler, plus
        // its direct ones (the role's backends that are not pooler servers).
        // Backends are listed first, the pooler's servers after: a server
        // connection still logging in when listed (the pooler shows its pid
        // only once the login is done) has finished by then, and is not
        // miscounted as a direct connection.
        const auto backends = admin->with([&](pqxx::connection& c) {
            pqxx::nontransaction tx(c);
            std::vector<std::string> pids;
            for (const auto& r : tx.exec_params("SELECT pid::text FROM pg_stat_activity WHERE usename = $1", role))
                pids.push_back(r[0].as<std::string>());
            return pids;
        });
        const auto servers = pooler_rows(pooler_dsn, "SHOW SERVERS", "remote_pid", "");
        const auto pooled = pooler_rows(pooler_dsn, "SHOW CLIENTS", "user", role);
        int direct = 0;
        for (const auto& pid : backends)
            direct += std::find(servers.begin(), servers.end(), pid) == servers.end();
        return static_cast<int>(pooled.size()) + direct;
    };

    b.cut_off_client = [admin](const std::string& tag) {
        const auto role = role_of(tag);
        admin->with([&](pqxx::connection& c) {
            pqxx::nontransaction tx(c);
            tx.exec0("ALTER ROLE " + c.quote_name(role) + " NOLOGIN");
            // A connection that passed authentication just before the ALTER
            // may show up a moment later: terminate until none is left.
            for (int i = 0; i < 1000; ++i) {
                auto r = tx.exec_params(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role);
                if (r.empty() && i >= 3) break;
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
            return 0;
        });
    };

    b.restore_client = [admin](const std::string& tag) {
        admin->with([&](pqxx::connection& c) {
            pqxx::nontransaction tx(c);
            tx.exec0("ALTER ROLE " + c.quote_name(role_of(tag)) + " LOGIN");
            return 0;
        });
    };

    b.read_row = [admin](const std::string& mutex) {
        return admin->with([&](pqxx::connection& c) {
            pqxx::nontransaction tx(c);
            auto r = tx.exec_params1(kRowSql, mutex);
            ServerRow row;
            row.exists = !r[1].is_null();
            row.owner_id = r[0].is_null() ? std::string() : r[0].as<std::string>();
            row.fence = or_zero(r[1]);
            row.version = or_zero(r[2]);
            row.acquired_at = ServerTime(or_zero(r[3]));
            row.ttl_at = ServerTime(or_zero(r[4]));
            row.transition_at = ServerTime(or_zero(r[5]));
            row.current_at = ServerTime(or_zero(r[6]));
            return row;
        });
    };

    b.fence_check = [admin](const std::string& tag, const std::string& mutex, const std::string& id,
                            std::int64_t fence) {
        return admin->with([&](pqxx::connection& c) -> std::string {
            try {
                pqxx::work tx(c);
                tx.exec0("SET LOCAL ROLE " + c.quote_name(role_of(tag)));
                tx.exec_params("SELECT simba_fence_check($1, $2, $3)", mutex, id, fence);
                tx.commit();
                return {};
            } catch (const pqxx::sql_error& e) {
                return "SQLSTATE " + e.sqlstate() + ": " + e.what();
            }
        });
    };

    b.cleanup = [admin](const std::string& prefix) {
        admin->with([&](pqxx::connection& c) {
            pqxx::nontransaction tx(c);
            auto roles = tx.exec_params("SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)",
                                        role_of(prefix));
            for (const auto& r : roles) {
                const auto role = r[0].as<std::string>();
                try {
                    tx.exec_params("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role);
                    tx.exec_params("SELECT simba_revoke($1::regrole)", c.quote_name(role));
                    tx.exec0("DROP ROLE " + c.quote_name(role));
                } catch (const pqxx::sql_error&) {
                    // best effort: a throwaway cluster is removed anyway
                }
            }
            return 0;
        });
    };
    return b;
}

}  // namespace simba::tck
