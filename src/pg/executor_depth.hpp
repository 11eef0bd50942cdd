// How many executors run in this backend, one inside the other: a
// statement's own AFTER triggers fire at its depth (in its ExecutorFinish),
// while the statements its triggers, defaults or functions run are one
// deeper.  So "this statement's rows, and not what its triggers write" is a
// depth (capture/uncaptured.hpp).  Counted by ExecutorRun and
// ExecutorFinish hooks installed at load; a library loaded inside a query
// counts from there, which keeps depths relative to each other right.
#pragma once

namespace pgoutbox::pg {

int executor_depth();

// Once, from _PG_init.
void install_executor_depth();

} // namespace pgoutbox::pg
