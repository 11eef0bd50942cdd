// One batch of the ID-range backfill (backfill_batch.cpp), and the tables
// the walk goes through (backfill_walk.cpp).
#pragma once

#include "backfill/batch_plan.hpp"
#include "pg/postgres.hpp"

namespace pgoutbox {

// outbox.process_backfill_batch(relid, batch_size, force_synchronous) in
// the caller's transaction: false when there is nothing to do (the SQL
// function's NULL), else the batch's plan and the outbox rows it wrote.
bool backfill_batch(Oid relid, int32 batch_size, bool force_synchronous, BatchPlan *plan,
                    int64 *written);

// Registered tables local to silo mode `mode` (monolith: all), in the walk's
// stable order (table_key), with their names for the log, allocated in
// context.  Inside SPI and a transaction.
int local_tables(int mode, MemoryContext context, Oid **tables, char ***names);

} // namespace pgoutbox
