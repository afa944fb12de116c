// simba TCK: the PostgreSQL backend description.
//
// Hooks use one superuser connection from libpq's environment (opened on
// first use, one statement at a time). Each client_tag is a login role
// regress_simba_tck_<tag>, granted with simba_grant, whose connections carry
// application_name <tag>; cutting a client off = ALTER ROLE ... NOLOGIN and
// pg_terminate_backend of the role's sessions, so its reconnects fail too.
#include <pqxx/pqxx>

#include <mutex>
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

const char* const kRowSql =
    "SELECT m.owner_id, m.fence, m.version,"
    " (extract(epoch FROM m.acquired_at) * 1000000)::int8,"
    " (extract(epoch FROM m.ttl_at) * 1000000)::int8,"
    " (extract(epoch FROM m.transition_at) * 1000000)::int8,"
    " (extract(epoch FROM c.t) * 1000000)::int8"
    " FROM (SELECT clock_timestamp() AS t) c LEFT JOIN simba_mutex m ON m.mutex = $1";

std::int64_t or_zero(const pqxx::field& f) { return f.is_null() ? 0 : f.as<std::int64_t>(); }

}  // namespace

Backend postgres_backend() {
    auto admin = std::make_shared<Admin>();
    Backend b;
    b.name = "Postgres";
    b.worker_command = {SIMBA_TCK_POSTGRES_WORKER};
    b.fixed_connections = pg::ContendServiceFactory::max_connections;

    b.make_factory = [admin](const std::string& tag) -> std::unique_ptr<ContendServiceFactory> {
        const auto role = role_of(tag);
        admin->with([&](pqxx::connection& c) {
            pqxx::nontransaction tx(c);
            tx.exec0("CREATE EXTENSION IF NOT EXISTS simba");
            if (tx.exec_params("SELECT 1 FROM pg_roles WHERE rolname = $1", role).empty())
                tx.exec0("CREATE ROLE " + c.quote_name(role) + " LOGIN");
            tx.exec_params("SELECT simba_grant($1::regrole)", c.quote_name(role));
            return 0;
        });
        pg::FactoryOptions o;
        o.application_name = tag;
        o.reconnect_initial = std::chrono::milliseconds(50);
        o.reconnect_max = std::chrono::milliseconds(200);
        return std::make_unique<pg::ContendServiceFactory>("user=" + role, o);
    };

    b.server_connections = [admin](const std::string& tag) {
        return admin->with([&](pqxx::connection& c) {
            pqxx::nontransaction tx(c);
            return tx.exec_params1("SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role_of(tag))[0]
                .as<int>();
        });
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

    b.fence_check = [admin](const std::string& mutex, const std::string& id, std::int64_t fence) {
        return admin->with([&](pqxx::connection& c) -> std::string {
            try {
                pqxx::work tx(c);
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
