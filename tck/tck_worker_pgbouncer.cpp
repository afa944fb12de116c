// The TCK's worker process for the PgBouncer backend.
#include "simba/tck/postgres.hpp"

int main(int argc, char** argv) { return simba::tck::worker_main(argc, argv, simba::tck::pgbouncer_backend()); }
