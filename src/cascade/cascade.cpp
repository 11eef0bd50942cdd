// outbox.process_foreign_key_cascade(tbl, column_name, batch_size): one step
// of the cross-silo cascade of a registered reference (SPEC section 7,
// Sentry's process_hybrid_cloud_foreign_key_cascade_batch).  Two walks, each
// with a watermark in the cursor store: the row walk over the child table
// (row.<table_key>.<column>: catches child rows written after their
// parent's tombstone was processed), then, once it has caught up, the
// tombstone walk over new tombstones (tombstone.<table_key>.<column>).  A
// batch finds the child rows whose column holds a tombstoned parent id and
// applies on_delete: CASCADE deletes them, SET_NULL clears the column,
// DO_NOTHING only advances.  At most cascade_chunk_size rows change per
// call; a batch that could not finish leaves its watermark where it was, and
// the next call does it again.  Every advance stores [up, sha1(previous
// transaction id)].
//
// The tombstones and watermarks are read as the extension's owner; the child
// table is read and changed as its owner, restricted (pg/run_as.hpp), so its
// triggers, capture included, run as that owner: a deleted child that is
// itself replicated writes its own outbox rows.
//
// Written without C++ objects that own resources around PostgreSQL calls:
// errors unwind through it freely.
#include "cascade/cascade.hpp"
#include "cascade/cascade_plan.hpp"
#include "delivery/tombstones.hpp"
#include "cursor/cursor_store.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_inherits.h"
#include "common/cryptohash.h"
#include "common/sha1.h"
#include "lib/stringinfo.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/hsearch.h"
}

namespace pgoutbox {

// A tombstone may stand for many children: a step changes at most this many.
int cascade_chunk_size = 10000;

namespace {

struct ForeignKey {
    Relation rel;
    char *table; // the child, schema-qualified and quoted
    char *column_name;
    char *column; // quoted
    char *table_key;
    char *parent_table;
    char *on_delete;
    const char *tombstones; // outbox.cell_tombstone or outbox.control_tombstone
};

// The largest id of a walked table that no row can still appear at or
// below: the bound a walk's watermark never passes.  Ids come from a
// sequence, but transactions commit in any order: a tombstone with id 10
// may commit after one with id 11, and a watermark moved to 11 would leave
// it behind for ever (Sentry's walk does; issue 35).
//
// Every transaction that took an id holds ROW EXCLUSIVE on the table from
// before it took the id to its end.  So when max(id) is read (candidate),
// then the transactions holding a conflicting lock are listed, every id at
// or below the candidate that can still appear belongs to one of them;
// once they have all ended, a snapshot taken then sees each such row or it
// never will.  Nobody is waited for: a walk keeps the previous bound until
// the listed transactions have ended (VirtualXactLock without waiting),
// then takes the next candidate.  A long transaction on the table (or a
// long VACUUM, whose lock conflicts too) holds the walk back, visibly, as
// pending work in outbox.foreign_keys; it never skips.  Kept per backend:
// a backend that starts knows no bound until its first listing is over.
struct SettledBound {
    char key[3 * NAMEDATALEN + 16]; // the walk's watermark key
    Oid relid;                      // the walked table: another one starts afresh
    bool known;
    int64 settled;
    bool listed; // candidate waits for the end of waiting[]
    int64 candidate;
    int nwaiting;
    VirtualTransactionId *waiting; // in TopMemoryContext
};
HTAB *settled_bounds = nullptr;

// The transactions other than this one holding a lock on relid (or, for a
// partitioned table, on one of its partitions, into which rows can be
// written directly) that conflicts with SHARE: every writer of its rows.
VirtualTransactionId *writers_of(Oid relid, int *count) {
    List *rels = get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE
                     ? find_all_inheritors(relid, NoLock, nullptr)
                     : list_make1_oid(relid);
    int n = 0, allocated = 8;
    auto *all = (VirtualTransactionId *)MemoryContextAlloc(
        TopMemoryContext, sizeof(VirtualTransactionId) * allocated);
    ListCell *cell;
    foreach (cell, rels) {
        LOCKTAG tag;
        SET_LOCKTAG_RELATION(tag, MyDatabaseId, lfirst_oid(cell));
        int found;
        VirtualTransactionId *holders = GetLockConflicts(&tag, ShareLock, &found);
        for (int i = 0; i < found; i++) {
            if (n == allocated) {
                allocated *= 2;
                all =
                    (VirtualTransactionId *)repalloc(all, sizeof(VirtualTransactionId) * allocated);
            }
            all[n++] = holders[i];
        }
    }
    *count = n;
    return all;
}

bool all_ended(const VirtualTransactionId *vxids, int n) {
    for (int i = 0; i < n; i++)
        if (!VirtualXactLock(vxids[i], false))
            return false;
    return true;
}

// The bound of the walk key over relid, given max(id) as read just now
// (0 for an empty table); nullopt while none is known yet.
std::optional<int64_t> settled_bound(const char *key, Oid relid, int64 visible_max) {
    if (settled_bounds == nullptr) {
        HASHCTL ctl;
        ctl.keysize = sizeof(SettledBound::key);
        ctl.entrysize = sizeof(SettledBound);
        ctl.hcxt = TopMemoryContext;
        settled_bounds = hash_create("pg_outbox settled bounds", 16, &ctl,
                                     HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
    }
    char name[sizeof(SettledBound::key)];
    strlcpy(name, key, sizeof name);
    bool found;
    auto *bound = (SettledBound *)hash_search(settled_bounds, name, HASH_ENTER, &found);
    if (!found || bound->relid != relid) {
        if (found && bound->waiting != nullptr)
            pfree(bound->waiting);
        bound->relid = relid;
        bound->known = false;
        bound->listed = false;
        bound->waiting = nullptr;
        bound->nwaiting = 0;
    }
    if (bound->listed && all_ended(bound->waiting, bound->nwaiting)) {
        bound->settled = bound->known ? Max(bound->settled, bound->candidate) : bound->candidate;
        bound->known = true;
        bound->listed = false;
        pfree(bound->waiting);
        bound->waiting = nullptr;
    }
    if (!bound->listed) {
        int n;
        VirtualTransactionId *writers = writers_of(relid, &n);
        if (n == 0) {
            pfree(writers);
            bound->settled = bound->known ? Max(bound->settled, visible_max) : visible_max;
            bound->known = true;
        } else {
            bound->listed = true;
            bound->candidate = visible_max;
            bound->waiting = writers;
            bound->nwaiting = n;
        }
    }
    return bound->known ? std::optional<int64_t>(bound->settled) : std::nullopt;
}

char *sha1_hex(const char *text) {
    uint8 digest[SHA1_DIGEST_LENGTH];
    pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA1);
    if (pg_cryptohash_init(ctx) < 0 ||
        pg_cryptohash_update(ctx, (const uint8 *)text, strlen(text)) < 0 ||
        pg_cryptohash_final(ctx, digest, sizeof digest) < 0)
        elog(ERROR, "pg_outbox: could not compute sha1: %s", pg_cryptohash_error(ctx));
    pg_cryptohash_free(ctx);
    char *hex = (char *)palloc(2 * sizeof digest + 1);
    hex_encode((const char *)digest, sizeof digest, hex);
    hex[2 * sizeof digest] = '\0';
    return hex;
}

void load(ForeignKey *fk, Oid relid, const char *column_name) {
    MemoryContext caller = CurrentMemoryContext;
    Oid types[2] = {REGCLASSOID, NAMEOID};
    Datum args[2] = {ObjectIdGetDatum(relid), CStringGetDatum(column_name)};
    bool found = false;
    pg::spi_run_as(pg::extension_owner_role, "reading the foreign key",
                   "SELECT f.table_key, f.parent_table, f.on_delete, f.parent_silo"
                   " FROM outbox.registered_foreign_keys f"
                   " WHERE f.relid = $1 AND f.column_name = $2",
                   2, types, args, nullptr, true, 1, SPI_OK_SELECT, [&](uint64 rows) {
                       if (rows == 0)
                           return;
                       found = true;
                       HeapTuple row = SPI_tuptable->vals[0];
                       TupleDesc desc = SPI_tuptable->tupdesc;
                       MemoryContext old = MemoryContextSwitchTo(caller);
                       fk->table_key = SPI_getvalue(row, desc, 1);
                       fk->parent_table = SPI_getvalue(row, desc, 2);
                       fk->on_delete = SPI_getvalue(row, desc, 3);
                       // The parent's silo chooses the table: a deleted
                       // control row is a cell tombstone.
                       fk->tombstones = strcmp(SPI_getvalue(row, desc, 4), "control") == 0
                                            ? "outbox.cell_tombstone"
                                            : "outbox.control_tombstone";
                       MemoryContextSwitchTo(old);
                   });
    if (!found)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("column %s of %s is not a registered foreign key", column_name,
                               get_rel_name(relid)),
                        errhint("Register it with outbox.register_foreign_key().")));
    fk->column = pstrdup(quote_identifier(column_name));
}

// max(id) of table, as role, and min(id) when with_min (only a walk
// without a watermark needs it: a cascade leaves dead index entries at the
// low end, which min(id) would wade through at every step); false for an
// empty table.
bool id_range(pg::RunAsRole role, const char *table, bool with_min, int64 *min_id, int64 *max_id) {
    bool has_rows = false;
    pg::spi_run_as(role, "reading the id range",
                   psprintf("SELECT pg_catalog.max(t.id)::pg_catalog.int8%s FROM %s t",
                            with_min ? ", pg_catalog.min(t.id)::pg_catalog.int8" : "", table),
                   0, nullptr, nullptr, nullptr, true, 1, SPI_OK_SELECT, [&](uint64) {
                       bool isnull;
                       HeapTuple row = SPI_tuptable->vals[0];
                       Datum high = SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull);
                       if (isnull)
                           return;
                       has_rows = true;
                       *max_id = DatumGetInt64(high);
                       *min_id = with_min ? DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc,
                                                                        2, &isnull))
                                          : *max_id;
                   });
    return has_rows;
}

// The smallest id of table above low, as role, or nullopt: where a walk's
// next batch starts, so that a sparse table (ids 1 and 10^15) is walked in
// a few batches, not one per batch_size ids of empty range.
std::optional<int64_t> next_id(pg::RunAsRole role, const char *table, int64 low) {
    std::optional<int64_t> next;
    Oid types[1] = {INT8OID};
    Datum args[1] = {Int64GetDatum(low)};
    pg::spi_run_as(
        role, "reading the next id",
        psprintf("SELECT t.id::pg_catalog.int8 FROM %s t WHERE t.id OPERATOR(pg_catalog.>) $1"
                 " ORDER BY t.id LIMIT 1",
                 table),
        1, types, args, nullptr, true, 1, SPI_OK_SELECT, [&](uint64 rows) {
            bool isnull;
            if (rows == 1)
                next = DatumGetInt64(
                    SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
        });
    return next;
}

// The distinct parent ids (a bigint[]) that sql returns in its first column,
// as role, with its parameters.
Datum parent_ids(pg::RunAsRole role, const char *what, const char *sql, int nargs, Oid *types,
                 Datum *args) {
    MemoryContext caller = CurrentMemoryContext;
    Datum ids = (Datum)0;
    pg::spi_run_as(role, what,
                   psprintf("SELECT pg_catalog.array_agg(DISTINCT s.p) FROM (%s) s(p)"
                            " WHERE s.p IS NOT NULL",
                            sql),
                   nargs, types, args, nullptr, true, 1, SPI_OK_SELECT, [&](uint64) {
                       bool isnull;
                       Datum value =
                           SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
                       if (isnull)
                           return;
                       MemoryContext old = MemoryContextSwitchTo(caller);
                       ids = PointerGetDatum(DatumGetArrayTypePCopy(value));
                       MemoryContextSwitchTo(old);
                   });
    return ids;
}

// Where the last step of a batch stopped, so that a batch with many
// children reads the table once rather than once per step.  Only a hint, of
// this backend: a batch is done only when a pass from the first page picks
// fewer rows than a chunk and changes all of them, so a row that a step
// passed over (an index scan returns rows out of ctid order; an update may
// move a row back) is still found.
//
// A step picks at most a chunk of rows, then changes them by ctid.  When a
// chunk picked in page order is dense (a tenth or more of the rows on its
// pages refer to the parents), the batch is a big one, and picking costs
// more than it saves: the following steps change a range of pages in one
// statement (a TID range scan, as a plain DELETE reads), sized from the rows
// per page seen so far so that a step changes about a chunk.  At the end of
// the table, a pass from the first page decides.
struct ResumeHint {
    Oid relid;
    NameData column;
    bool row_walk;
    int64 low;
    int64 up;
    ItemPointerData after; // pick rows above it; (0,0): a pass from the start
    BlockNumber next_page; // by page ranges from here, when pages > 0
    BlockNumber pages;
};
ResumeHint resume = {InvalidOid, {{0}}, false, 0, 0, {{0, 0}, 0}, 0, 0};

// ids (an int8[]) as an SQL constant: '{1,2,3}'::pg_catalog.int8[].
char *int8_array_literal(Datum ids) {
    Datum *items;
    bool *nulls;
    int n;
    deconstruct_array(DatumGetArrayTypeP(ids), INT8OID, 8, true, TYPALIGN_DOUBLE, &items, &nulls,
                      &n);
    StringInfoData literal;
    initStringInfo(&literal);
    appendStringInfoString(&literal, "'{");
    for (int i = 0; i < n; i++)
        appendStringInfo(&literal, "%s" INT64_FORMAT, i > 0 ? "," : "", DatumGetInt64(items[i]));
    appendStringInfoString(&literal, "}'::pg_catalog.int8[]");
    return literal.data;
}

// "DELETE FROM <table> t" or "UPDATE <table> t SET <column> = NULL".
const char *change_statement(const ForeignKey *fk) {
    return strcmp(fk->on_delete, "CASCADE") == 0
               ? psprintf("DELETE FROM %s t", fk->table)
               : psprintf("UPDATE %s t SET %s = NULL", fk->table, fk->column);
}

// Changes the rows of pages [first, first + pages) that refer to the
// parents; returns how many.
int64 change_pages(const ForeignKey *fk, const char *parents, BlockNumber first,
                   BlockNumber pages) {
    const char *sql = psprintf("%s WHERE t.ctid OPERATOR(pg_catalog.>=) $1"
                               " AND t.ctid OPERATOR(pg_catalog.<) $2"
                               " AND t.%s OPERATOR(pg_catalog.=) ANY (%s)",
                               change_statement(fk), fk->column, parents);
    ItemPointerData from, to;
    ItemPointerSet(&from, first, 0);
    ItemPointerSet(&to, first + pages, 0);
    Oid types[2] = {TIDOID, TIDOID};
    Datum args[2] = {PointerGetDatum(&from), PointerGetDatum(&to)};
    return (int64)pg::spi_run_as(
        pg::table_owner_role(fk->rel), "applying on_delete", sql, 2, types, args, nullptr, false, 0,
        strcmp(fk->on_delete, "CASCADE") == 0 ? SPI_OK_DELETE : SPI_OK_UPDATE);
}

// Picks at most a chunk of the rows above after that refer to the parents,
// and changes those that still do, by ctid.  Sets *last to the largest ctid
// picked, *first_page to the smallest page.
void pick_and_change(const ForeignKey *fk, const char *parents, ItemPointerData after,
                     int64 *picked, int64 *changed, ItemPointerData *last,
                     BlockNumber *first_page) {
    const char *sql = psprintf(
        "WITH picked AS MATERIALIZED (SELECT c.ctid AS tid FROM %s c"
        " WHERE c.ctid OPERATOR(pg_catalog.>) $2 AND c.%s OPERATOR(pg_catalog.=) ANY (%s)"
        " LIMIT $1),"
        " changed AS (%s WHERE t.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT p.tid FROM "
        "picked p))"
        " AND t.%s OPERATOR(pg_catalog.=) ANY (%s) RETURNING t.ctid)"
        " SELECT (SELECT pg_catalog.count(*) FROM picked), (SELECT pg_catalog.count(*) "
        "FROM changed),"
        " (SELECT pg_catalog.max(p.tid) FROM picked p), (SELECT pg_catalog.min(p.tid) FROM "
        "picked p)",
        fk->table, fk->column, parents, change_statement(fk), fk->column, parents);
    Oid types[2] = {INT8OID, TIDOID};
    Datum args[2] = {Int64GetDatum((int64)cascade_chunk_size), PointerGetDatum(&after)};
    ItemPointerSetInvalid(last);
    *first_page = InvalidBlockNumber;
    pg::spi_run_as(pg::table_owner_role(fk->rel), "applying on_delete", sql, 2, types, args,
                   nullptr, false, 1, SPI_OK_SELECT, [&](uint64) {
                       bool isnull;
                       HeapTuple row = SPI_tuptable->vals[0];
                       TupleDesc desc = SPI_tuptable->tupdesc;
                       *picked = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));
                       *changed = DatumGetInt64(SPI_getbinval(row, desc, 2, &isnull));
                       Datum max_tid = SPI_getbinval(row, desc, 3, &isnull);
                       if (!isnull)
                           *last = *(ItemPointer)DatumGetPointer(max_tid);
                       Datum min_tid = SPI_getbinval(row, desc, 4, &isnull);
                       if (!isnull)
                           *first_page =
                               ItemPointerGetBlockNumber((ItemPointer)DatumGetPointer(min_tid));
                   });
}

// Pages that hold about a chunk of the rows to change, from a chunk found
// on pages [first, last]: 0 when those rows are too sparse for reading
// page ranges to pay (fewer than a tenth of the rows on the pages, by the
// table's statistics), or for a partitioned table, whose partitions'
// ctids overlap.
BlockNumber pages_for_a_chunk(Relation rel, BlockNumber first, BlockNumber last) {
    if (rel->rd_rel->relkind != RELKIND_RELATION)
        return 0;
    BlockNumber span = last - first + 1;
    double tuples = rel->rd_rel->reltuples;
    BlockNumber relpages = rel->rd_rel->relpages;
    if (tuples <= 0 || relpages == 0)
        return 0;
    double rows_on_span = tuples / relpages * span;
    return (double)cascade_chunk_size * 10 >= rows_on_span ? span : 0;
}

// Applies on_delete to the child rows that refer to the parents in ids,
// about cascade_chunk_size of them per call (see ResumeHint).  The ids go
// into the statement as a constant, which PostgreSQL hashes: the planner
// then chooses between the column's index (few children) and a scan of the
// table's pages in order (many).  True when all of them are done.
bool apply(const ForeignKey *fk, bool row_walk, const WatermarkBatch &batch, Datum ids) {
    if (ids == (Datum)0 || strcmp(fk->on_delete, "DO_NOTHING") == 0)
        return true;
    bool same_batch = resume.relid == RelationGetRelid(fk->rel) &&
                      strcmp(NameStr(resume.column), fk->column_name) == 0 &&
                      resume.row_walk == row_walk && resume.low == batch.low &&
                      resume.up == batch.up;
    if (!same_batch) {
        resume.relid = RelationGetRelid(fk->rel);
        namestrcpy(&resume.column, fk->column_name);
        resume.row_walk = row_walk;
        resume.low = batch.low;
        resume.up = batch.up;
        ItemPointerSet(&resume.after, 0, 0);
        resume.pages = 0;
    }
    const char *parents = int8_array_literal(ids);
    if (resume.pages > 0) {
        BlockNumber first = resume.next_page;
        int64 changed = change_pages(fk, parents, first, resume.pages);
        resume.next_page = first + resume.pages;
        if (resume.next_page >= RelationGetNumberOfBlocks(fk->rel)) {
            resume.pages = 0; // the end: a pass from the first page decides
            ItemPointerSet(&resume.after, 0, 0);
        } else {
            // About a chunk next time, growing at most twofold.
            double scale = changed > 0 ? (double)cascade_chunk_size / changed : 2.0;
            resume.pages = (BlockNumber)Max(1.0, Min(2.0, scale) * resume.pages);
        }
        return false;
    }
    ItemPointerData after = resume.after;
    bool from_start = ItemPointerGetBlockNumberNoCheck(&after) == 0 &&
                      ItemPointerGetOffsetNumberNoCheck(&after) == 0;
    int64 picked = 0, changed = 0;
    ItemPointerData last;
    BlockNumber first_page;
    pick_and_change(fk, parents, after, &picked, &changed, &last, &first_page);
    bool chunk_full = picked >= cascade_chunk_size;
    // A full chunk goes on after its last row; anything else (a pass that
    // reached the end, a row changed meanwhile) starts again from the first
    // page, and that pass decides.
    ItemPointerSet(&resume.after, 0, 0);
    if (chunk_full && changed == picked && ItemPointerIsValid(&last)) {
        resume.after = last;
        BlockNumber last_page = ItemPointerGetBlockNumber(&last);
        resume.pages =
            first_page <= last_page ? pages_for_a_chunk(fk->rel, first_page, last_page) : 0;
        resume.next_page = last_page; // the rest of its page too
    }
    return from_start && !chunk_full && changed == picked;
}

// The batch of a walk over ids in (watermark, max_id] of walked (min_id
// and max_id read as in id_range, has_rows false for none), with the
// snapshot the caller pushed.
bool walk_batch(const ForeignKey *fk, const char *key, const StoredWatermark &watermark,
                bool row_walk, pg::RunAsRole role, const char *walked, bool has_rows, int64 min_id,
                int64 max_id, int32 batch_size, int64 *ids_covered) {
    // Over an empty range to the next id (nothing is there to change); the
    // ids jumped over are not counted against the budget.
    int64 low = watermark.low;
    if (has_rows && low != 0 && low < max_id) {
        std::optional<int64_t> next = next_id(role, walked, low);
        if (next && *next - 1 > low)
            low = *next - 1;
    }
    WatermarkBatch batch =
        plan_watermark_batch(low, has_rows ? std::optional<int64_t>(min_id) : std::nullopt,
                             has_rows ? std::optional<int64_t>(max_id) : std::nullopt, batch_size);
    if (batch.low >= batch.up)
        return batch.has_more; // no work: the watermark stays as it is
    Datum ids;
    if (row_walk) {
        // The parents that the child rows in (low, up] refer to, as the
        // child's owner; of those, the tombstoned ones.
        Oid types[2] = {INT8OID, INT8OID};
        Datum args[2] = {Int64GetDatum(batch.low), Int64GetDatum(batch.up)};
        Datum referred = parent_ids(
            pg::table_owner_role(fk->rel), "reading the child rows",
            psprintf("SELECT c.%s::pg_catalog.int8 FROM %s c WHERE c.id OPERATOR(pg_catalog.>) $1"
                     " AND c.id OPERATOR(pg_catalog.<=) $2",
                     fk->column, fk->table),
            2, types, args);
        Oid tomb_types[2] = {TEXTOID, INT8ARRAYOID};
        Datum tomb_args[2] = {CStringGetTextDatum(fk->parent_table), referred};
        ids =
            referred == (Datum)0
                ? (Datum)0
                : parent_ids(pg::extension_owner_role, "reading the tombstones",
                             psprintf("SELECT t.object_identifier FROM %s t"
                                      " WHERE t.table_name = $1 AND t.object_identifier = ANY ($2)",
                                      fk->tombstones),
                             2, tomb_types, tomb_args);
    } else {
        Oid types[3] = {TEXTOID, INT8OID, INT8OID};
        Datum args[3] = {CStringGetTextDatum(fk->parent_table), Int64GetDatum(batch.low),
                         Int64GetDatum(batch.up)};
        ids = parent_ids(pg::extension_owner_role, "reading the tombstones",
                         psprintf("SELECT t.object_identifier FROM %s t WHERE t.table_name = $1"
                                  " AND t.id > $2 AND t.id <= $3",
                                  fk->tombstones),
                         3, types, args);
    }
    // Not those whose row is back in the parent, when it is here: a
    // re-created id is not a deleted one.
    if (ids != (Datum)0)
        ids = tombstones_still_gone(fk->parent_table,
                                    strcmp(fk->tombstones, "outbox.cell_tombstone") == 0, ids);
    *ids_covered += batch.up - batch.low;
    if (!apply(fk, row_walk, batch, ids))
        return true; // not finished: the same batch again, watermark unmoved
    StoredWatermark next;
    next.low = batch.up;
    strlcpy(next.transaction_id, sha1_hex(watermark.transaction_id), sizeof next.transaction_id);
    watermark_write(key, next);
    return batch.has_more;
}

// One batch of the walk prefix ("row" or "tombstone"), up to the settled
// bound; whether it has more.  Adds the ids the batch covered to *ids (0
// when it had no work).
bool walk(const ForeignKey *fk, const char *prefix, int32 batch_size, int64 *ids_covered) {
    char *key = psprintf("%s.%s.%s", prefix, fk->table_key, fk->column_name);
    StoredWatermark watermark = watermark_read(key);
    bool row_walk = strcmp(prefix, "row") == 0;
    int64 min_id = 0, max_id = 0;
    bool with_min = watermark.low == 0; // as plan_watermark_batch
    pg::RunAsRole role = row_walk ? pg::table_owner_role(fk->rel) : pg::extension_owner_role;
    const char *walked = row_walk ? fk->table : fk->tombstones;
    Oid walked_relid = row_walk ? RelationGetRelid(fk->rel)
                                : get_relname_relid(strchr(fk->tombstones, '.') + 1,
                                                    get_namespace_oid("outbox", false));
    // The latest snapshots, before and after the writers are listed (see
    // SettledBound): a caller's older one would miss rows committed since.
    PushActiveSnapshot(GetLatestSnapshot());
    bool has_rows = id_range(role, walked, with_min, &min_id, &max_id);
    PopActiveSnapshot();
    std::optional<int64_t> settled = settled_bound(key, walked_relid, has_rows ? max_id : 0);
    if (!settled)
        return false; // the next step knows more
    if (has_rows && max_id > *settled) {
        max_id = *settled;
        has_rows = !with_min || min_id <= max_id;
    }
    PushActiveSnapshot(GetLatestSnapshot());
    bool more = walk_batch(fk, key, watermark, row_walk, role, walked, has_rows, min_id, max_id,
                           batch_size, ids_covered);
    PopActiveSnapshot();
    return more;
}

} // namespace

bool cascade_step(Oid relid, const char *column_name, int32 batch_size, int64 *ids_covered) {
    // Locked before anything is read of it, and to the end of the
    // transaction: a concurrent DROP waits, or has already happened.
    Relation rel = pg::open_user_table(relid, RowExclusiveLock);
    if (rel == nullptr)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("tbl: relation with OID %u does not exist", relid)));
    ForeignKey fk;
    fk.rel = rel;
    fk.table = pg::qualified_name(rel);
    fk.column_name = pstrdup(column_name);
    load(&fk, relid, column_name);
    pg::refuse_forced_row_security(rel);
    *ids_covered = 0;
    // As Sentry: row(...) or tombstone(...).
    bool more = walk(&fk, "row", batch_size, ids_covered) ||
                walk(&fk, "tombstone", batch_size, ids_covered);
    relation_close(rel, NoLock);
    return more;
}

int registered_foreign_keys(MemoryContext context, Oid **tables, char ***columns, char ***names) {
    int n = (int)pg::spi_run("listing the foreign keys",
                             "SELECT f.relid::pg_catalog.oid, f.column_name::pg_catalog.text,"
                             " f.relid::pg_catalog.text FROM outbox.registered_foreign_keys f"
                             " ORDER BY f.table_key, f.column_name",
                             0, nullptr, nullptr, nullptr, true, 0, SPI_OK_SELECT);
    // After the statement: SPI switches to its own context on every call.
    MemoryContext old = MemoryContextSwitchTo(context);
    *tables = (Oid *)palloc(sizeof(Oid) * Max(n, 1));
    *columns = (char **)palloc(sizeof(char *) * Max(n, 1));
    *names = (char **)palloc(sizeof(char *) * Max(n, 1));
    for (int i = 0; i < n; i++) {
        bool isnull;
        HeapTuple row = SPI_tuptable->vals[i];
        (*tables)[i] = DatumGetObjectId(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
        (*columns)[i] = SPI_getvalue(row, SPI_tuptable->tupdesc, 2);
        (*names)[i] = SPI_getvalue(row, SPI_tuptable->tupdesc, 3);
    }
    MemoryContextSwitchTo(old);
    return n;
}

} // namespace pgoutbox

using namespace pgoutbox;

namespace {

void require(FunctionCallInfo fcinfo, int arg, const char *name) {
    if (PG_ARGISNULL(arg))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be NULL", name)));
}

} // namespace

// outbox.process_foreign_key_cascade(tbl, column_name, batch_size): one
// cascade_step; true when there is more to do.
OUTBOX_FUNCTION(outbox_process_foreign_key_cascade) {
    require(fcinfo, 0, "tbl");
    require(fcinfo, 1, "column_name");
    require(fcinfo, 2, "batch_size");
    int32 batch_size = PG_GETARG_INT32(2);
    if (batch_size <= 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("batch_size must be positive, not %d", batch_size)));
    // Its DELETE and UPDATE would read the children with the transaction's
    // snapshot, older than the tombstones the step reads: a child
    // committed in between would be passed over for ever.
    if (IsolationUsesXactSnapshot())
        ereport(ERROR, (errcode(ERRCODE_INVALID_TRANSACTION_STATE),
                        errmsg("outbox.process_foreign_key_cascade() needs READ COMMITTED"),
                        errdetail("A step in a %s transaction could pass over a child row "
                                  "committed after the transaction's snapshot.",
                                  IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ")));
    int64 ids_covered;
    PG_RETURN_BOOL(
        cascade_step(PG_GETARG_OID(0), NameStr(*PG_GETARG_NAME(1)), batch_size, &ids_covered));
}
