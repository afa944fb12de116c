// simba TCK: the PostgreSQL backend (simba::pg::ContendServiceFactory).
#pragma once

#include "simba/tck/backend.hpp"

namespace simba::tck {

/// PostgreSQL from libpq's environment (PGHOST, PGPORT, ...), as a superuser
/// for the hooks. Each client_tag gets its own login role
/// regress_simba_tck_<tag> (granted with simba_grant) and application_name
/// <tag>: cut_off_client = ALTER ROLE NOLOGIN + pg_terminate_backend.
Backend postgres_backend();

}  // namespace simba::tck
