// The TCK's worker process for the PostgreSQL backend.
#include "simba/tck/postgres.hpp"

int main(int argc, char** argv) { return simba::tck::worker_main(argc, argv, simba::tck::postgres_backend()); }
