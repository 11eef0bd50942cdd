// The background worker (worker.cpp): what the rest of pg_outbox may ask of
// it.  Its shared state is worker/'s alone (worker_shared.hpp).
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

// Zeroes the worker's totals and forgets its last error
// (outbox.stats_reset()); nothing without shared_preload_libraries.
void worker_reset_totals();

// From _PG_init, while shared_preload_libraries is processed.
void register_worker();

// From the shmem hooks of pg_outbox.cpp (the startup one holds
// AddinShmemInitLock).
void worker_shmem_request();
void worker_shmem_startup();

} // namespace pgoutbox
