// Writes one outbox row straight into pg_outbox's storage: heap insert plus
// index entries, no executor and no SPI.  This is the capture hot path; it
// bypasses privilege checks on purpose (the application role holds none on
// the outbox), and it runs in the caller's transaction and command, so a
// rollback removes the row with the change that caused it.
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

void outbox_write(const Registry *registry, Silo silo, const OutboxRow *row);

} // namespace pgoutbox
