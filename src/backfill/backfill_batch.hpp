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

// The largest id among the first limit rows of table (qualified) with id >=
// lower in *result; false when there is none.  As the table's owner,
// inside SPI.
bool upper_id(const char *table, int64 lower, int64 limit, int64 *result);

// The rows of a batch with ids in [$1, $2].
constexpr const char *id_range_condition =
    "t.id OPERATOR(pg_catalog.>=) $1 AND t.id OPERATOR(pg_catalog.<=) $2";

// Whether a shard that the rows of table (rel, qualified) that condition
// (on alias t, with parameters args) selects go to already holds at least
// max_depth outbox rows (outbox.backfill_max_shard_depth): the hot-shard
// guard of backfill and re-sync batches.  The shards are read as the
// current role (the table's owner), the outbox as the extension's owner.
bool shard_at_bound(Relation rel, const TableMeta *meta, const char *table, const char *condition,
                    int nargs, Oid *argtypes, Datum *args, int32 max_depth);

// Reads the columns capture needs of the rows of table (rel, qualified)
// that condition (on alias t, with parameters args) selects, a chunk at a
// time, and writes their outbox rows through capture's row builder, as an
// UPDATE of each would; returns how many.  As the table's owner, inside
// SPI.  The query selects exactly those columns, so meta is re-pointed at
// them: id first, then shard, cell and payload.
int64 write_rows(Relation rel, const TableMeta *meta, const CellTargets &targets, const char *table,
                 const char *condition, int nargs, Oid *argtypes, Datum *args);

// Registered tables local to silo mode `mode` (monolith: all), in the walk's
// stable order (table_key), with their names for the log, allocated in
// context.  Inside SPI and a transaction.
int local_tables(int mode, MemoryContext context, Oid **tables, char ***names);

} // namespace pgoutbox
