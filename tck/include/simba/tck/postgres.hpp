// simba TCK: the PostgreSQL backend (simba::pg::ContendServiceFactory).
#pragma once

#include "simba/tck/backend.hpp"

namespace simba::tck {

/// PostgreSQL from libpq's environment (PGHOST, PGPORT, ...), as a superuser
/// for the hooks. Each client_tag gets its own login role
/// regress_simba_tck_<tag> (granted with simba_grant) and application_name
/// <tag>: cut_off_client = ALTER ROLE NOLOGIN + pg_terminate_backend.
Backend postgres_backend();

/// The same server behind a transaction-pooling PgBouncer, whose connection
/// string is $SIMBA_POOLER_DSN (test/with-pgbouncer.sh): the factory's
/// statements go through the pooler (FactoryOptions::pooled), LISTEN over a
/// direct connection. server_connections counts the client's connections to
/// the pooler plus its direct ones.
Backend pgbouncer_backend();

namespace detail {
/// postgres_backend(), optionally through a pooler (empty: direct).
Backend postgres_backend_via(std::string name, std::string pooler_dsn, std::vector<std::string> worker_command);
}  // namespace detail

}  // namespace simba::tck
