// The outbox rows that a row of a registered table stands for: its key (id,
// shard, target cell) and its payload, written once per target cell.  The
// one place that turns a table row into outbox rows, for capture (every
// write) and for backfill (each row, as an UPDATE of it would write).
//
// Calls PostgreSQL directly and owns no C++ objects with destructors: an
// ERROR may unwind through it.  Allocates in CurrentMemoryContext.
#pragma once

#include "capture/outbox_writer.hpp"

namespace pgoutbox {

struct RowKey {
    int64 object_identifier;
    int64 shard_identifier;
    const char *cell; // the row's own cell (a control table with a cell column), else NULL
};

// Where a control row goes.  Without a cell column: one row per listed cell
// (none listed is an ERROR, unless only_listed: the change would reach
// nobody).  With one: the row's own cell, and, when only_listed, only if it
// is listed.  Capture lists every registered cell; a backfill lists its
// target_cells, with only_listed.
struct CellTargets {
    int ncells;
    const char *const *cells;
    bool only_listed;
};

// ERROR when this database's silo mode refuses writes to the table.
void check_silo(const TableMeta *meta);

RowKey row_key(const TableMeta *meta, TupleTableSlot *slot);
bool same_key(const RowKey &a, const RowKey &b);
// jsonb of the payload columns, or 0 when the table has none.
Datum row_payload(const TableMeta *meta, TupleTableSlot *slot);

// The outbox rows of one key, with that payload.
void write_key_rows(OutboxWriter *writer, const TableMeta *meta, const CellTargets &targets,
                    const RowKey &key, Datum payload);

// What an INSERT or a DELETE of the row, or an UPDATE that keeps its key,
// writes.
void write_row(OutboxWriter *writer, const TableMeta *meta, const CellTargets &targets,
               TupleTableSlot *slot);

} // namespace pgoutbox

namespace pgoutbox {

// write_row for every row of a plain table, read with the latest snapshot:
// the caller holds a lock that keeps other writers out (TRUNCATE, ATTACH and
// DETACH PARTITION all hold ACCESS EXCLUSIVE), so that snapshot sees every
// row, including ones committed after the transaction's own snapshot.
void write_all_rows(OutboxWriter *writer, Relation rel, const TableMeta *meta,
                    const CellTargets &targets);

} // namespace pgoutbox
