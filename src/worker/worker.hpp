// The background workers (worker.cpp, mover.cpp), on top of every other
// module: their registration.  What other modules share with them is in
// worker_state/worker_state.hpp.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

// From _PG_init, while shared_preload_libraries is processed: the worker
// and the mover.
void register_workers();

// Takes the extension, when there is one, in share mode to the end of the
// transaction, first thing: DROP EXTENSION locks it before any of its
// objects, so a DROP waits for the worker's transaction under way and the
// next waits for the DROP, where their locks of the extension's tables,
// taken in different orders, deadlocked (test/integration/drop_extension.sh).
// Whether the extension is there, the same one as before the wait.
bool hold_extension();

} // namespace pgoutbox
