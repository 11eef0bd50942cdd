#include "cursor/cursor_store.hpp"

#include "cursor/redis_client.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "settings.hpp"

extern "C" {
#include "mb/pg_wchar.h"
#include "nodes/pg_list.h"
}

namespace pgoutbox {

namespace {

// A cursor written in this transaction and not yet sent to Redis.
struct PendingWrite {
    char *redis_key;
    Cursor cursor;
    SubTransactionId subxact;
};

List *pending = NIL; // of PendingWrite *, oldest first, in TopTransactionContext
bool callbacks_registered = false;

char *redis_key_for(const char *table_key) {
    return psprintf("%soutbox_backfill.%s", redis_key_prefix ? redis_key_prefix : "", table_key);
}

const PendingWrite *latest_pending(const char *redis_key) {
    const PendingWrite *found = nullptr;
    ListCell *lc;
    foreach (lc, pending) {
        auto *write = (PendingWrite *)lfirst(lc);
        if (strcmp(write->redis_key, redis_key) == 0)
            found = write;
    }
    return found;
}

// Runs at commit with interrupts held; must not raise an ERROR.  One MSET
// for every key the transaction moved (its last value), so a Redis that is
// down or hung costs one timeout, not one per key, and a cancel or terminate
// ends the wait (redis_client.hpp).
void flush_pending() {
    List *writes = pending;
    pending = NIL;
    // Allocations that fail return NULL here: an ERROR in a commit callback
    // would be a PANIC.  Then the batches are simply done again.
    int n = list_length(writes);
    auto **keys = (const char **)palloc_extended(sizeof(char *) * n, MCXT_ALLOC_NO_OOM);
    auto **values = (const char **)palloc_extended(sizeof(char *) * n, MCXT_ALLOC_NO_OOM);
    if (keys == nullptr || values == nullptr)
        return;
    int nkeys = 0;
    ListCell *lc;
    foreach (lc, writes) {
        auto *write = (PendingWrite *)lfirst(lc);
        // Written again later in the transaction: only the last write counts.
        bool superseded = false;
        for (ListCell *later = lnext(writes, lc); later != nullptr; later = lnext(writes, later))
            if (strcmp(((PendingWrite *)lfirst(later))->redis_key, write->redis_key) == 0)
                superseded = true;
        if (superseded)
            continue;
        // No C++ exception may leave a commit callback: format into a buffer.
        char *value = (char *)palloc_extended(64, MCXT_ALLOC_NO_OOM);
        if (value == nullptr)
            continue;
        try {
            strlcpy(value, format_cursor(write->cursor).c_str(), 64);
        } catch (...) {
            continue; // out of memory: the batch will simply be done again
        }
        keys[nkeys] = write->redis_key;
        values[nkeys++] = value;
    }
    if (nkeys == 0)
        return;
    redis::Error error;
    volatile bool ok = false;
    PG_TRY();
    { ok = redis::mset(nkeys, keys, values, &error); }
    PG_CATCH();
    {
        pg::forget_abandoned_frames();
        FlushErrorState();
        strlcpy(error.message, "unexpected error while writing to Redis", sizeof error.message);
    }
    PG_END_TRY();
    if (!ok && nkeys == 1)
        ereport(WARNING, (errmsg("backfill cursor %s was not moved to %s: %s", keys[0], values[0],
                                 error.message),
                          errdetail("The batch committed; it will be backfilled again from the old "
                                    "cursor (no row is skipped).")));
    else if (!ok)
        ereport(WARNING,
                (errmsg("%d backfill cursors were not moved (%s to %s among them): %s", nkeys,
                        keys[0], values[0], error.message),
                 errdetail("The batches committed; they will be backfilled again from the old "
                           "cursors (no row is skipped).")));
}

void on_xact(XactEvent event, void *) {
    pg::forget_abandoned_frames();
    switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
        if (pending != NIL)
            flush_pending();
        break;
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
        pending = NIL;
        break;
    case XACT_EVENT_PRE_PREPARE:
        if (pending != NIL)
            ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                            errmsg("cannot PREPARE a transaction that moved a backfill cursor "
                                   "kept in Redis"),
                            errhint("Set outbox.cursor_store = table to backfill in prepared "
                                    "transactions.")));
        break;
    default:
        break;
    }
}

void on_subxact(SubXactEvent event, SubTransactionId subxact, SubTransactionId parent, void *) {
    pg::forget_abandoned_frames();
    if (pending == NIL)
        return;
    if (event == SUBXACT_EVENT_ABORT_SUB) {
        // In place: the current memory context is the aborting
        // subtransaction's, reset at its cleanup, so a list rebuilt here
        // would be freed under the transaction (issue 9: a released write was
        // lost, and with more allocations meanwhile the backend crashed).
        ListCell *lc;
        foreach (lc, pending) {
            auto *write = (PendingWrite *)lfirst(lc);
            if (write->subxact >= subxact)
                pending = foreach_delete_current(pending, lc);
        }
    } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
        ListCell *lc;
        foreach (lc, pending) {
            auto *write = (PendingWrite *)lfirst(lc);
            if (write->subxact >= subxact)
                write->subxact = parent;
        }
    }
}

void ensure_callbacks() {
    if (callbacks_registered)
        return;
    RegisterXactCallback(on_xact, nullptr);
    RegisterSubXactCallback(on_subxact, nullptr);
    callbacks_registered = true;
}

void add_pending(const char *redis_key, const Cursor &cursor) {
    ensure_callbacks();
    MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
    auto *write = (PendingWrite *)palloc(sizeof(PendingWrite));
    write->redis_key = pstrdup(redis_key);
    write->cursor = cursor;
    write->subxact = GetCurrentSubTransactionId();
    pending = lappend(pending, write);
    MemoryContextSwitchTo(old);
}

// At most this much of a value that is not a cursor goes into a message: a
// hostile Redis value would otherwise be logged whole.
constexpr int shown_bytes = 100;

[[noreturn]] void corrupt(const char *where, const char *value) {
    int length = (int)strlen(value);
    int shown = pg_mbcliplen(value, length, shown_bytes);
    const char *excerpt =
        shown < length
            ? psprintf("%s... (%d bytes)", quote_literal_cstr(pnstrdup(value, shown)), length)
            : quote_literal_cstr(value);
    ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                    errmsg("backfill cursor %s is not [lower_bound, version]: %s", where, excerpt),
                    errhint("Fix the value with outbox.set_processing_state(); pg_outbox does "
                            "not reset a cursor it cannot read.")));
    pg_unreachable();
}

Cursor parse_or_error(const char *where, const char *value) {
    auto cursor = parse_cursor(value);
    if (!cursor)
        corrupt(where, value);
    return *cursor;
}

// outbox.cursors, through SPI as the extension owner.
bool table_read(const char *table_key, Cursor *cursor) {
    Oid argtypes[1] = {TEXTOID};
    Datum args[1] = {CStringGetTextDatum(table_key)};
    auto read = [cursor](uint64 rows) {
        if (rows == 0)
            return;
        bool isnull;
        cursor->lower_bound =
            DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
        cursor->version =
            DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
    };
    return pg::spi_run_as(pg::extension_owner_role, "reading a cursor",
                          "SELECT lower_bound, version FROM outbox.cursors WHERE table_key = $1", 1,
                          argtypes, args, nullptr, false, 1, SPI_OK_SELECT, read) == 1;
}

void table_write(const char *table_key, const Cursor &cursor) {
    Oid argtypes[3] = {TEXTOID, INT8OID, INT4OID};
    Datum args[3] = {CStringGetTextDatum(table_key), Int64GetDatum(cursor.lower_bound),
                     Int32GetDatum(cursor.version)};
    pg::spi_run_as(pg::extension_owner_role, "writing a cursor",
                   "INSERT INTO outbox.cursors AS c (table_key, lower_bound, version)"
                   " VALUES ($1, $2, $3) ON CONFLICT (table_key) DO UPDATE SET"
                   " lower_bound = excluded.lower_bound, version = excluded.version",
                   3, argtypes, args, nullptr, false, 0, SPI_OK_INSERT);
}

} // namespace

Cursor cursor_read(const char *table_key) {
    if (cursor_store == CURSOR_STORE_TABLE) {
        Cursor cursor;
        if (table_read(table_key, &cursor))
            return cursor;
        table_write(table_key, initial_cursor);
        return initial_cursor;
    }
    char *key = redis_key_for(table_key);
    if (const PendingWrite *write = latest_pending(key))
        return write->cursor;
    char *value = redis::get_or_error(key);
    if (value == nullptr) {
        add_pending(key, initial_cursor);
        return initial_cursor;
    }
    return parse_or_error(psprintf("at Redis key \"%s\"", key), value);
}

bool cursor_peek(const char *table_key, Cursor *cursor) {
    if (cursor_store == CURSOR_STORE_TABLE)
        return table_read(table_key, cursor);
    char *key = redis_key_for(table_key);
    if (const PendingWrite *write = latest_pending(key)) {
        *cursor = write->cursor;
        return true;
    }
    char *value = redis::get_or_error(key);
    if (value == nullptr)
        return false;
    *cursor = parse_or_error(psprintf("at Redis key \"%s\"", key), value);
    return true;
}

void cursor_write(const char *table_key, const Cursor &cursor) {
    if (cursor_store == CURSOR_STORE_TABLE)
        table_write(table_key, cursor);
    else
        add_pending(redis_key_for(table_key), cursor);
}

} // namespace pgoutbox
