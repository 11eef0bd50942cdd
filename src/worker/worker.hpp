// The background worker (worker.cpp), on top of every other module: its
// registration.  What other modules share with it is in
// worker_state/worker_state.hpp.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

// From _PG_init, while shared_preload_libraries is processed.
void register_worker();

} // namespace pgoutbox
