// simba TCK: the PostgreSQL backend through a transaction-pooling PgBouncer.
#include <cstdlib>
#include <stdexcept>

#include "simba/tck/postgres.hpp"

#ifndef SIMBA_TCK_PGBOUNCER_WORKER
#error "SIMBA_TCK_PGBOUNCER_WORKER (path of the PgBouncer tck worker) must be defined"
#endif

namespace simba::tck {

Backend pgbouncer_backend() {
    const char* dsn = std::getenv("SIMBA_POOLER_DSN");
    if (dsn && *dsn) return detail::postgres_backend_via("PgBouncer", dsn, {SIMBA_TCK_PGBOUNCER_WORKER});
    // Listing the cases (gtest_discover_tests, at build time) builds this
    // Backend with no PgBouncer around: fail when a case makes a factory.
    Backend b = detail::postgres_backend_via("PgBouncer", "", {SIMBA_TCK_PGBOUNCER_WORKER});
    b.make_factory = [](const std::string&) -> std::unique_ptr<ContendServiceFactory> {
        throw std::runtime_error("SIMBA_POOLER_DSN is not set: run inside test/with-pgbouncer.sh");
    };
    return b;
}

}  // namespace simba::tck
