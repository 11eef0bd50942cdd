// Backfill cursors, kept in Redis (outbox.cursor_store = redis, Sentry's
// key outbox_backfill.<table_key>) or in outbox.cursors (= table).
//
// The cursor moves only when the batch commits.  In Redis that means after
// the commit: writes are kept per transaction (and per subtransaction, so a
// rolled-back savepoint takes its writes with it), later reads in the same
// transaction see them, and they are sent once the transaction has
// committed.  A Redis failure then is a WARNING, and the batch is simply done
// again later: a row may be written twice, never skipped.  In the table the
// write is part of the transaction itself.
#pragma once

#include "pg/postgres.hpp"

#include "cursor/cursor_value.hpp"

namespace pgoutbox {

// table_key: a registered table's key, or "resync.<job>" for a re-sync
// job's cursor (Redis key outbox_resync.<job>).
//
// The cursor of table_key; a missing one is created as [0, 1] (at commit).
// ERROR (naming the key and showing the value) when the stored value is not
// a cursor; it is never reset silently.
Cursor cursor_read(const char *table_key);

// The cursor of table_key as stored, without creating a missing one (false):
// monitoring reads cursors, and a read-only transaction (or a standby) must
// be able to.
bool cursor_peek(const char *table_key, Cursor *cursor);

void cursor_write(const char *table_key, const Cursor &cursor);

// Deletes the cursor of table_key, with the same commit rule (a re-sync
// job's, once the job has ended); reads in the transaction then find none.
void cursor_forget(const char *table_key);

// A watermark of the cross-silo cascade (cascade/), in the same store and
// with the same commit rule: Redis key <outbox.redis_key_prefix><key>
// holding Sentry's [low, "<transaction id>"], or a row of
// outbox.watermarks.
struct StoredWatermark {
    int64 low;
    char transaction_id[64];
};

// The watermark under key; a missing one is stored as [0, <random hex>],
// as Sentry does.  ERROR (naming the key, showing the value) when the stored
// value is not a watermark; it is never reset silently.
StoredWatermark watermark_read(const char *key);
// As stored, without creating a missing one (false).
bool watermark_peek(const char *key, StoredWatermark *watermark);
void watermark_write(const char *key, const StoredWatermark &watermark);

} // namespace pgoutbox
