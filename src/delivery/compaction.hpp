// Compaction: an outbox partition that is mostly dead tuples is rewritten
// with its few live rows, so that dead tuples a held snapshot keeps from
// VACUUM neither slow every drain pass down nor leave the outbox bloated.
//
// A queue table is all inserts and deletes.  VACUUM can only remove a
// deleted row once no snapshot can see it; a REPEATABLE READ transaction, a
// long report or a pg_dump held for an hour keeps every row deleted in that
// hour on disk, and every drain pass reads them (PgQ avoids this by rotating
// its event tables and truncating them; PlanetScale calls it the death
// spiral of a SKIP LOCKED queue).  TRUNCATE does not care about snapshots:
// so, when a partition holds at least outbox.compact_min_size on disk and
// PostgreSQL's statistics say its live rows (at most 10,000) take a small
// part of that, compaction takes the partition's ACCESS EXCLUSIVE lock
// without waiting (a busy partition is tried again next cycle; capture into
// it waits a few milliseconds), copies the live rows, truncates, and writes
// them back with their ids, payloads and schedules.  A session that holds a
// lock on the partition (pg_dump does) keeps it from being compacted.
//
// A drain pass that read the partition before finds it rewritten (a new
// relfilenode, delivery.hpp) and skips the rest of it: the next pass reads it
// again.  Truncation is not MVCC-safe: a snapshot older than the compaction
// sees the partition empty; the rows are all there for everyone else.
#pragma once

#include "registry/table_meta.hpp"

namespace pgoutbox {

// outbox.compact_min_size, in kB; 0: never.
extern int compact_min_size_kb;

// Whether the partition is worth compacting now (force: whatever its size,
// if it has a file at all).
bool compaction_due(Oid partition, bool force);

// Compacts the partition if its lock is free and it has at most 10,000
// live rows; returns whether it did.  Inside SPI, in the caller's
// transaction, which keeps the lock to its end.
bool compact_partition(Oid partition);

} // namespace pgoutbox
