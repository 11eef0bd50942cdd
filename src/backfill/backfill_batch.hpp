// One batch of the ID-range backfill (backfill_batch.cpp), and the tables
// the walk goes through (backfill_walk.cpp).
#pragma once

#include "backfill/batch_plan.hpp"
#include "capture/outbox_rows.hpp"
#include "pg/postgres.hpp"

namespace pgoutbox {

// A registered table as the backfill sees it: its key, category, versions
// and target cells.
struct Registration {
    char *table_key;
    int32 category;
    int32 coded_version;
    int32 target_version;
    bool has_target_cells; // the target_cells option is a list
    int ntarget_cells;     // outbox.target_cells(tbl): registered cells only
    char **target_cells;
};

// Reads it; inside SPI, as the extension's owner.
Registration load_registration(Oid relid, bool force_synchronous);

// The cells a control table's rows are backfilled to.
CellTargets backfill_targets(const TableMeta *meta, const Registration &reg);

// outbox.process_backfill_batch(relid, batch_size, force_synchronous) in
// the caller's transaction: false when there is nothing to do (the SQL
// function's NULL), else the batch's plan and the outbox rows it wrote.
// With max_shard_depth > 0, a batch that would add rows to a shard already
// holding that many outbox rows writes nothing, moves no cursor, sets
// *throttled and returns false (the worker's hot-shard guard).
bool backfill_batch(Oid relid, int32 batch_size, bool force_synchronous, int32 max_shard_depth,
                    BatchPlan *plan, int64 *written, bool *throttled);

// Registered tables local to silo mode `mode` (monolith: all), in the walk's
// stable order (table_key), with their names for the log, allocated in
// context.  Inside SPI and a transaction.
int local_tables(int mode, MemoryContext context, Oid **tables, char ***names);

} // namespace pgoutbox
