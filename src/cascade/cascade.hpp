// The cross-silo cascade (cascade.cpp): one step of a registered reference.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

// Child rows one step deletes or updates at most (outbox.cascade_chunk_size).
extern int cascade_chunk_size;

// The batch size of the worker's steps: Sentry's default.
constexpr int32 cascade_batch_size = 500;

// outbox.process_foreign_key_cascade(relid, column_name, batch_size) in the
// caller's transaction: the row walk's batch, then, once it has caught up,
// the tombstone walk's.  Whether there is more to do; *ids_covered: the ids
// the batches covered (0: nothing to do).
bool cascade_step(Oid relid, const char *column_name, int32 batch_size, int64 *ids_covered);

// The registered references, in a stable order, as (table, column) with the
// table's name for the log, allocated in context.  Inside SPI.
int registered_foreign_keys(MemoryContext context, Oid **tables, char ***columns, char ***names);

} // namespace pgoutbox
