#include "cursor/cursor_store.hpp"

#include "cursor/redis_client.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "settings.hpp"

extern "C" {
#include "access/xlog.h"
#include "mb/pg_wchar.h"
#include "nodes/pg_list.h"
}

namespace pgoutbox {

namespace {

// What a Redis key holds: a backfill cursor or a cascade watermark.
enum class KeyKind { Cursor, Watermark };

// A value written in this transaction and not yet sent to Redis.
struct PendingWrite {
    char *redis_key;
    char *value; // formatted (cursor_value.hpp); NULL: the key is deleted
    KeyKind kind;
    // The initial cursor that a read of a missing key creates: a default,
    // set only if the key is still missing at commit (SET NX), so that a
    // value another client set meanwhile is not overwritten.
    bool if_absent;
    SubTransactionId subxact;
};

List *pending = NIL; // of PendingWrite *, oldest first, in TopTransactionContext
bool callbacks_registered = false;

char *redis_key_for(const char *table_key) {
    // Table keys have no dot ([a-z_][a-z0-9_]*): a key with one is a cursor
    // of pg_outbox's own, "<what>.<n>", kept at outbox_<what>.<n> (a
    // re-sync job's: outbox_resync.<job>).
    if (strchr(table_key, '.') != nullptr)
        return psprintf("%soutbox_%s", redis_key_prefix ? redis_key_prefix : "", table_key);
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
    auto *kinds = (KeyKind *)palloc_extended(sizeof(KeyKind) * n, MCXT_ALLOC_NO_OOM);
    auto **deleted = (const char **)palloc_extended(sizeof(char *) * n, MCXT_ALLOC_NO_OOM);
    // The writes that set a key only if it is absent (if_absent).
    auto **created = (const char **)palloc_extended(sizeof(char *) * n, MCXT_ALLOC_NO_OOM);
    auto **created_values = (const char **)palloc_extended(sizeof(char *) * n, MCXT_ALLOC_NO_OOM);
    if (keys == nullptr || values == nullptr || kinds == nullptr || deleted == nullptr ||
        created == nullptr || created_values == nullptr)
        return;
    int nkeys = 0, ndeleted = 0, ncreated = 0;
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
        if (write->value == nullptr) {
            deleted[ndeleted++] = write->redis_key;
            continue;
        }
        if (write->if_absent) {
            created[ncreated] = write->redis_key;
            created_values[ncreated++] = write->value;
            continue;
        }
        keys[nkeys] = write->redis_key;
        kinds[nkeys] = write->kind;
        values[nkeys++] = write->value;
    }
    if (nkeys == 0 && ndeleted == 0 && ncreated == 0)
        return;
    redis::Error error;
    volatile bool ok = false;
    PG_TRY();
    {
        // The keys move in Redis only once this backend's commits are
        // durable: the worker commits with synchronous_commit = off, and a
        // commit lost in a crash after its key moved would skip its batch
        // for good; so would an earlier commit that the move takes for
        // granted (a cascade's partial steps move no key, and the step that
        // moves it may write no WAL, so that its commit flushes nothing).
        // The end of this backend's last commit record covers both.
        if (!XLogRecPtrIsInvalid(XactLastCommitEnd))
            XLogFlush(XactLastCommitEnd);
        ok = nkeys == 0 || redis::mset(nkeys, keys, values, &error);
        // A deletion that fails (or is not tried: Redis is down) leaves the
        // key of an ended job behind; nothing reads it again, so a WARNING
        // says so and that is all.
        redis::Error del_error;
        if (ok && ndeleted > 0 && !redis::del(ndeleted, deleted, &del_error))
            ereport(WARNING, (errmsg("%d ended cursor(s) were not deleted (%s among them): %s",
                                     ndeleted, deleted[0], del_error.message)));
        // A default not set is set by the next read: nothing to report.
        for (int i = 0; ok && i < ncreated; i++)
            redis::set_if_absent(created[i], created_values[i], &del_error);
    }
    PG_CATCH();
    {
        pg::forget_abandoned_frames();
        FlushErrorState();
        strlcpy(error.message, "unexpected error while writing to Redis", sizeof error.message);
    }
    PG_END_TRY();
    if (ok)
        return;
    bool cursors = true, watermarks = true;
    for (int i = 0; i < nkeys; i++) {
        cursors = cursors && kinds[i] == KeyKind::Cursor;
        watermarks = watermarks && kinds[i] == KeyKind::Watermark;
    }
    const char *what = cursors ? "backfill cursor" : watermarks ? "cascade watermark" : "key";
    const char *again = cursors      ? "backfilled again from the old cursor"
                        : watermarks ? "cascaded again from the old watermark"
                                     : "done again from the old value";
    if (nkeys == 1)
        ereport(WARNING,
                (errmsg("%s %s was not moved to %s: %s", what, keys[0], values[0], error.message),
                 errdetail("The batch committed; it will be %s (no row is skipped).", again)));
    else
        ereport(WARNING,
                (errmsg("%d %ss were not moved (%s to %s among them): %s", nkeys, what, keys[0],
                        values[0], error.message),
                 errdetail("The batches committed; they will be %s (no row is skipped).", again)));
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

void add_pending(const char *redis_key, KeyKind kind, const char *value, bool if_absent = false) {
    ensure_callbacks();
    MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
    auto *write = (PendingWrite *)palloc(sizeof(PendingWrite));
    write->redis_key = pstrdup(redis_key);
    write->value = value != nullptr ? pstrdup(value) : nullptr;
    write->kind = kind;
    write->if_absent = if_absent;
    write->subxact = GetCurrentSubTransactionId();
    pending = lappend(pending, write);
    MemoryContextSwitchTo(old);
}

// value formatted into a palloc'd copy; the std::string is gone before
// anything that can raise an ERROR.
template <typename Format> char *formatted(Format format) {
    char buffer[128];
    strlcpy(buffer, format().c_str(), sizeof buffer);
    return pstrdup(buffer);
}

// At most this much of a value that is not a cursor goes into a message: a
// hostile Redis value would otherwise be logged whole.
constexpr int shown_bytes = 100;

[[noreturn]] void corrupt(KeyKind kind, const char *where, const char *value) {
    int length = (int)strlen(value);
    int shown = pg_mbcliplen(value, length, shown_bytes);
    const char *excerpt =
        shown < length
            ? psprintf("%s... (%d bytes)", quote_literal_cstr(pnstrdup(value, shown)), length)
            : quote_literal_cstr(value);
    if (kind == KeyKind::Watermark)
        ereport(
            ERROR,
            (errcode(ERRCODE_DATA_CORRUPTED),
             errmsg("cascade watermark %s is not [low, \"<transaction id>\"]: %s", where, excerpt),
             errhint("Delete the key to start the walk again from the smallest id; pg_outbox "
                     "does not reset a watermark it cannot read.")));
    ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                    errmsg("backfill cursor %s is not [lower_bound, version]: %s", where, excerpt),
                    errhint("Fix the value with outbox.set_processing_state(); pg_outbox does "
                            "not reset a cursor it cannot read.")));
    pg_unreachable();
}

Cursor parse_or_error(const char *where, const char *value) {
    auto cursor = parse_cursor(value);
    if (!cursor)
        corrupt(KeyKind::Cursor, where, value);
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
    const PendingWrite *write = latest_pending(key);
    char *value = write != nullptr ? write->value : redis::get_or_error(key);
    if (value == nullptr) {
        add_pending(key, KeyKind::Cursor, formatted([] { return format_cursor(initial_cursor); }),
                    true);
        return initial_cursor;
    }
    return parse_or_error(psprintf("at Redis key \"%s\"", key), value);
}

bool cursor_peek(const char *table_key, Cursor *cursor) {
    if (cursor_store == CURSOR_STORE_TABLE)
        return table_read(table_key, cursor);
    char *key = redis_key_for(table_key);
    const PendingWrite *write = latest_pending(key);
    char *value = write != nullptr ? write->value : redis::get_or_error(key);
    if (value == nullptr)
        return false;
    *cursor = parse_or_error(psprintf("at Redis key \"%s\"", key), value);
    return true;
}

void cursor_write(const char *table_key, const Cursor &cursor) {
    if (cursor_store == CURSOR_STORE_TABLE)
        table_write(table_key, cursor);
    else
        add_pending(redis_key_for(table_key), KeyKind::Cursor,
                    formatted([&cursor] { return format_cursor(cursor); }));
}

void cursor_forget(const char *table_key) {
    if (cursor_store == CURSOR_STORE_TABLE) {
        Oid argtypes[1] = {TEXTOID};
        Datum args[1] = {CStringGetTextDatum(table_key)};
        pg::spi_run_as(pg::extension_owner_role, "deleting a cursor",
                       "DELETE FROM outbox.cursors WHERE table_key = $1", 1, argtypes, args,
                       nullptr, false, 0, SPI_OK_DELETE);
    } else {
        add_pending(redis_key_for(table_key), KeyKind::Cursor, nullptr);
    }
}

namespace {

char *watermark_redis_key(const char *key) {
    return psprintf("%s%s", redis_key_prefix ? redis_key_prefix : "", key);
}

// value (a stored watermark) into *watermark; ERROR naming where unless it
// is one.
void parse_watermark_or_error(const char *where, const char *value, StoredWatermark *watermark) {
    bool ok = false;
    {
        std::optional<Watermark> parsed = parse_watermark(value);
        if (parsed && parsed->transaction_id.size() < sizeof watermark->transaction_id) {
            watermark->low = parsed->low;
            strlcpy(watermark->transaction_id, parsed->transaction_id.c_str(),
                    sizeof watermark->transaction_id);
            ok = true;
        }
    }
    if (!ok)
        corrupt(KeyKind::Watermark, where, value);
}

bool watermark_table_read(const char *key, StoredWatermark *watermark) {
    Oid types[1] = {TEXTOID};
    Datum args[1] = {CStringGetTextDatum(key)};
    auto read = [watermark](uint64 rows) {
        if (rows == 0)
            return;
        bool isnull;
        HeapTuple row = SPI_tuptable->vals[0];
        watermark->low = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
        strlcpy(watermark->transaction_id, SPI_getvalue(row, SPI_tuptable->tupdesc, 2),
                sizeof watermark->transaction_id);
    };
    return pg::spi_run_as(pg::extension_owner_role, "reading a watermark",
                          "SELECT low, transaction_id FROM outbox.watermarks WHERE key = $1", 1,
                          types, args, nullptr, false, 1, SPI_OK_SELECT, read) == 1;
}

void watermark_table_write(const char *key, const StoredWatermark &watermark) {
    Oid types[3] = {TEXTOID, INT8OID, TEXTOID};
    Datum args[3] = {CStringGetTextDatum(key), Int64GetDatum(watermark.low),
                     CStringGetTextDatum(watermark.transaction_id)};
    pg::spi_run_as(pg::extension_owner_role, "writing a watermark",
                   "INSERT INTO outbox.watermarks AS w (key, low, transaction_id)"
                   " VALUES ($1, $2, $3) ON CONFLICT (key) DO UPDATE SET"
                   " low = excluded.low, transaction_id = excluded.transaction_id",
                   3, types, args, nullptr, false, 0, SPI_OK_INSERT);
}

} // namespace

bool watermark_peek(const char *key, StoredWatermark *watermark) {
    if (cursor_store == CURSOR_STORE_TABLE)
        return watermark_table_read(key, watermark);
    char *redis_key = watermark_redis_key(key);
    const PendingWrite *write = latest_pending(redis_key);
    char *value = write != nullptr ? write->value : redis::get_or_error(redis_key);
    if (value == nullptr)
        return false;
    parse_watermark_or_error(psprintf("at Redis key \"%s\"", redis_key), value, watermark);
    return true;
}

StoredWatermark watermark_read(const char *key) {
    StoredWatermark watermark;
    if (watermark_peek(key, &watermark))
        return watermark;
    // Sentry: (0, uuid4().hex), stored at once.
    uint8 random[16];
    if (!pg_strong_random(random, sizeof random))
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("could not generate a random transaction id")));
    watermark.low = 0;
    hex_encode((const char *)random, sizeof random, watermark.transaction_id);
    watermark.transaction_id[2 * sizeof random] = '\0';
    watermark_write(key, watermark);
    return watermark;
}

void watermark_write(const char *key, const StoredWatermark &watermark) {
    if (cursor_store == CURSOR_STORE_TABLE) {
        watermark_table_write(key, watermark);
        return;
    }
    add_pending(watermark_redis_key(key), KeyKind::Watermark, formatted([&watermark] {
                    return format_watermark({watermark.low, watermark.transaction_id});
                }));
}

} // namespace pgoutbox
