// The TCK instantiated for the PostgreSQL factory: this one line.
#include "simba/tck/postgres.hpp"

SIMBA_TCK_INSTANTIATE(Postgres, simba::tck::postgres_backend());
