// The TCK through a transaction-pooling PgBouncer (run inside test/with-pgbouncer.sh).
#include "simba/tck/postgres.hpp"

SIMBA_TCK_INSTANTIATE(PgBouncer, simba::tck::pgbouncer_backend());
