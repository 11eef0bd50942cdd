// The background workers (worker.cpp, mover.cpp), on top of every other
// module: their registration.  What other modules share with them is in
// worker_state/worker_state.hpp.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

// From _PG_init, while shared_preload_libraries is processed: the worker
// and the mover.
void register_workers();

} // namespace pgoutbox
