// Writes outbox rows straight into pg_outbox's storage: no executor and no
// SPI.  Rows are buffered per partition and written with table_multi_insert
// (COPY's path: one WAL record per page instead of one per row), plus any
// index entries.  This is the capture hot path; it bypasses privilege checks
// on purpose (the application role holds none on the outbox), and it writes
// in the caller's transaction and command, so a rollback removes the rows
// with the change that caused them.
#pragma once

#include "registry/table_meta.hpp"

namespace pgoutbox {

struct OutboxRow {
    int32 shard_scope;
    int64 shard_identifier;
    int32 category;
    int64 object_identifier;
    Datum payload;         // jsonb, or 0 for NULL
    const char *cell_name; // control rows only
};

struct OutboxWriter;

// A writer in its own memory context under CurrentMemoryContext.  capture:
// its rows count as saved in outbox.stats (backfill counts its own).
OutboxWriter *outbox_writer_begin(const Registry *registry, bool capture);
void outbox_writer_add(OutboxWriter *writer, Silo silo, const OutboxRow *row);
// Writes what is buffered and frees the writer; returns the rows it wrote.
int64 outbox_writer_finish(OutboxWriter *writer);

} // namespace pgoutbox
