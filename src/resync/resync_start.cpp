// outbox._resync_start(job, ids): run once by outbox._resync_job when a job
// is recorded, in its transaction.  An ids job's ids (sorted, distinct) are
// written to outbox.resync_rows here; an organization job's rows are found
// here (relocation/export/belonging.hpp: the export's rule, the same
// snapshot), in the export's order, parents first, into it; then, for
// every job, how many rows it targets and in how many shards, which the
// view's rows left and ETA, and the dry runs (plan_resync), read.
//
// Each table is read as its owner, restricted (pg/run_as.hpp), outbox
// tables as the extension's owner.  Plain C-style code: PostgreSQL errors
// unwind through it.
#include "pg/guard.hpp"
#include "pg/hash.hpp"
#include "pg/spi.hpp"
#include "relocation/export/belonging.hpp"
#include "resync/id_chunks.hpp"
#include "resync/resync_job.hpp"

#include <algorithm>

namespace pgoutbox {

namespace {

using namespace relocation;

struct ShardKey {
    int64 identifier;
    int64 scope; // int64: no padding in the hashed bytes
};

struct Totals {
    int64 rows;
    HTAB *shards;    // ShardKey
    int64 id_shards; // shards counted besides: an organization's, of tables sharded by id
};

// Adds the rows of rel that condition selects, and their shards, to
// totals.  As the table's owner.
void count_rows(Relation rel, const char *condition, int nargs, Oid *types, Datum *args,
                Totals *totals) {
    const TableMeta *meta = table_meta_get(rel);
    AttrNumber shard =
        meta->shard_attnum != InvalidAttrNumber ? meta->shard_attnum : meta->id_attnum;
    pg::refuse_forced_row_security(rel);
    pg::spi_run_as(
        pg::table_owner_role(rel), "counting the re-sync's rows",
        psprintf(
            "SELECT t.%s::pg_catalog.int8, pg_catalog.count(*) FROM %s t WHERE %s GROUP BY 1",
            quote_identifier(NameStr(TupleDescAttr(RelationGetDescr(rel), shard - 1)->attname)),
            pg::qualified_name(rel), condition),
        nargs, types, args, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 n) {
            for (uint64 r = 0; r < n; r++) {
                ShardKey key = {int8_column(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1),
                                meta->scope};
                (void)hash_search(totals->shards, &key, HASH_ENTER, nullptr);
                totals->rows += int8_column(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2);
            }
        });
}

// Appends ids of relid at positions from *position on, in chunks
// (resync/id_chunks.hpp), in one statement as the extension's owner,
// through a plan kept for the session.
void add_rows(int64 job, Oid relid, const int64 *ids, long count, int64 *position) {
    static SPIPlanPtr plan = nullptr;
    // A chunk holds at least id_chunk_bytes / 10 ids (a varint's most).
    long capacity = count / long(id_chunk_bytes / 10) + 1;
    auto *firsts = (int64 *)palloc_extended(sizeof(int64) * capacity, MCXT_ALLOC_HUGE);
    auto *chunks = (Datum *)palloc_extended(sizeof(Datum) * capacity, MCXT_ALLOC_HUGE);
    int n = 0;
    for (long at = 0; at < count; n++) {
        auto *chunk = (bytea *)palloc(VARHDRSZ + id_chunk_bytes);
        size_t taken;
        size_t length =
            encode_id_chunk(ids + at, size_t(count - at), (uint8 *)VARDATA(chunk), &taken);
        SET_VARSIZE(chunk, VARHDRSZ + length);
        firsts[n] = *position + at;
        chunks[n] = PointerGetDatum(chunk);
        at += long(taken);
    }
    Oid types[4] = {INT8OID, OIDOID, INT8ARRAYOID, BYTEAARRAYOID};
    Datum args[4] = {
        Int64GetDatum(job), ObjectIdGetDatum(relid), pg::int8_array(firsts, n),
        PointerGetDatum(construct_array(chunks, n, BYTEAOID, -1, false, TYPALIGN_INT))};
    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    pg::spi_run_kept(&plan, "recording the re-sync's rows",
                     "INSERT INTO outbox.resync_rows (job, first, relid, ids)"
                     " SELECT $1, u.first, $2::pg_catalog.regclass, u.ids"
                     " FROM ROWS FROM (pg_catalog.unnest($3), pg_catalog.unnest($4)) u(first, ids)",
                     4, types, args, nullptr, false, SPI_OK_INSERT);
    pg::run_as_end(&scope);
    SPI_finish();
    *position += count;
}

// The shards of an organization's tables sharded by id: per scope, the
// union of their ids, sorted and distinct.  Merged, not hashed: hashing
// 100,000 ids was a tenth of the find (its entries' memory faulted in).
struct IdShards {
    int64 scope;
    int64 *ids;
    long count;
};

// Merges ids (sorted) into the union of scope in shards (n of
// them, room for one more).
void merge_id_shards(IdShards *shards, int *n, int64 scope, const int64 *ids, long count) {
    IdShards *s = shards;
    while (s < shards + *n && s->scope != scope)
        s++;
    if (s == shards + *n) {
        *s = IdShards{scope, nullptr, 0};
        ++*n;
    }
    auto *merged =
        (int64 *)palloc_extended(sizeof(int64) * (s->count + count + 1), MCXT_ALLOC_HUGE);
    int64 *end = std::set_union(s->ids, s->ids + s->count, ids, ids + count, merged);
    s->count = std::unique(merged, end) - merged; // a table's ids by id may repeat
    if (s->ids != nullptr)
        pfree(s->ids);
    s->ids = merged;
}

// The tables the walk reads for themselves (belonging.hpp's wanted): the
// registered ones.
bool is_registered(void *registered, Oid relid) {
    bool found;
    (void)hash_search((HTAB *)registered, &relid, HASH_FIND, &found);
    return found;
}

// Adds the shards that tables sharded by a column hold (the walk's values
// of it) and those sharded by id do not to totals, and the latter's count.
void add_shards(const Belonging &b, HTAB *registered, const IdShards *by_id, int n_by_id,
                Totals *totals) {
    for (int k = 0; k < n_by_id; k++)
        totals->id_shards += by_id[k].count;
    for (int i = 0; i < b.models->count; i++) {
        if (!b.member[i] || !is_registered(registered, b.models->tables[i].relid))
            continue;
        const TableMeta *meta = table_meta_get(b.rels[i]);
        if (meta->shard_attnum == InvalidAttrNumber)
            continue;
        if (b.ids[i].also == nullptr) // shard_column asked the walk for it
            elog(ERROR, "pg_outbox: the re-sync's walk did not read the shard column of %s",
                 RelationGetRelationName(b.rels[i]));
        const IdShards *same = by_id;
        while (same < by_id + n_by_id && same->scope != meta->scope)
            same++;
        HASH_SEQ_STATUS scan;
        hash_seq_init(&scan, b.ids[i].also);
        for (int64 *value; (value = (int64 *)hash_seq_search(&scan)) != nullptr;) {
            if (same < by_id + n_by_id &&
                std::binary_search(same->ids, same->ids + same->count, *value))
                continue;
            ShardKey key = {*value, meta->scope};
            (void)hash_search(totals->shards, &key, HASH_ENTER, nullptr);
        }
    }
}

// The walk's also column (belonging.hpp): the shard column of a registered
// table sharded by a column.
const char *shard_column(void *registered, Relation rel) {
    if (!is_registered(registered, RelationGetRelid(rel)))
        return nullptr;
    const TableMeta *meta = table_meta_get(rel);
    if (meta->shard_attnum == InvalidAttrNumber)
        return nullptr;
    return quote_identifier(
        NameStr(TupleDescAttr(RelationGetDescr(rel), meta->shard_attnum - 1)->attname));
}

// The registered tables, by OID.  As the extension's owner.
HTAB *registered_tables() {
    HTAB *set = pg::blob_hash("pg_outbox registered tables", 64, sizeof(Oid), sizeof(Oid),
                              CurrentMemoryContext);
    pg::spi_run_as(pg::extension_owner_role, "listing the registered tables",
                   "SELECT r.relid::pg_catalog.oid FROM outbox.registered_tables r", 0, nullptr,
                   nullptr, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 n) {
                       for (uint64 r = 0; r < n; r++) {
                           bool isnull;
                           Oid relid = DatumGetObjectId(SPI_getbinval(
                               SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
                           (void)hash_search(set, &relid, HASH_ENTER, nullptr);
                       }
                   });
    return set;
}

// The organization's rows of every registered table of its scope, in the
// export's order.  Every registered table must have a relocation scope:
// without one, whether its rows are the organization's is unknown.
void resolve_organization(const ResyncJob &job, Totals *totals) {
    HTAB *registered = registered_tables();
    Belonging b;
    find_belonging(Organization, "organization", &job.organization, 1, &b, shard_column,
                   is_registered, registered);
    for (int i = 0; i < b.models->count; i++) {
        const Model *t = &b.models->tables[i];
        if (t->scopes == 0 && is_registered(registered, t->relid))
            ereport(ERROR,
                    (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                     errmsg("cannot re-sync organization " INT64_FORMAT
                            ": registered table %s has no relocation scope",
                            job.organization, t->key),
                     errhint("Declare it with outbox.set_relocation_scope(tbl, scopes); "
                             "a table that is no organization's is Excluded, Config or Global.")));
    }
    int64 position = 0;
    auto *unions = (IdShards *)palloc(sizeof(IdShards) * (b.order_count + 1));
    int n_unions = 0;
    for (int o = 0; o < b.order_count; o++) {
        int i = b.order[o];
        const Model *t = &b.models->tables[i];
        if (!is_registered(registered, t->relid))
            continue;
        long count;
        int64 *ids = sorted_ids(&b.ids[i], &count);
        if (count == 0)
            continue;
        Relation rel = b.rels[i];
        if (strcmp(t->pk, "id") != 0) {
            // Found by primary key; sent by the id capture knows them by.
            long n = 0;
            int64 *by_id = (int64 *)palloc(sizeof(int64) * (count + 1));
            read_chunks(
                rel, "reading the re-sync's ids",
                psprintf("SELECT t.id::pg_catalog.int8 FROM %s t WHERE ", t->qualified),
                psprintf("t.%s", quote_identifier(t->pk)), "", ids, count, [&](uint64 rows) {
                    for (uint64 r = 0; r < rows && n < count; r++)
                        by_id[n++] = int8_column(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1);
                });
            pg::sort_ids(by_id, n);
            ids = by_id;
            count = n;
        }
        add_rows(job.id, t->relid, ids, count, &position);
        totals->rows += count;
        const TableMeta *meta = table_meta_get(rel);
        if (meta->shard_attnum == InvalidAttrNumber)
            merge_id_shards(unions, &n_unions, meta->scope, ids, count);
    }
    add_shards(b, registered, unions, n_unions, totals);
    for (int i = 0; i < b.models->count; i++)
        if (b.member[i])
            relation_close(b.rels[i], NoLock);
}

} // namespace

} // namespace pgoutbox

using namespace pgoutbox;

OUTBOX_FUNCTION(outbox__resync_start) {
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("job must not be NULL")));
    int64 id = PG_GETARG_INT64(0);
    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    ResyncJob job;
    load_resync_job(id, &job);
    pg::run_as_end(&scope);
    Totals totals = {0,
                     pg::blob_hash("pg_outbox re-sync shards", 64, sizeof(ShardKey),
                                   sizeof(ShardKey), CurrentMemoryContext),
                     0};
    if (job.target == ResyncTarget::Organization) {
        resolve_organization(job, &totals);
    } else {
        Relation rel = pg::open_user_table(job.relid, AccessShareLock);
        if (rel == nullptr)
            ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                            errmsg("tbl: relation with OID %u does not exist", job.relid)));
        if (job.target == ResyncTarget::Ids) {
            // Every id named, a row or not, is walked: rows_total counts
            // them; the shards are those of the rows.  Sorted and distinct
            // (outbox.resync).
            if (PG_ARGISNULL(1))
                ereport(ERROR,
                        (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("ids must not be NULL")));
            ArrayType *array = PG_GETARG_ARRAYTYPE_P(1);
            if (ARR_NDIM(array) > 1 || ARR_HASNULL(array) || ARR_ELEMTYPE(array) != INT8OID)
                ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                                errmsg("ids must be a one-dimensional array of bigint without "
                                       "NULL")));
            long count = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
            const int64 *ids = (const int64 *)ARR_DATA_PTR(array);
            int64 position = 0;
            add_rows(id, job.relid, ids, count, &position);
            for (long at = 0; at < count; at += ids_per_read) {
                pg::IdsCondition read;
                pg::ids_condition("t.id", ids + at, int(Min((long)ids_per_read, count - at)),
                                  &read);
                count_rows(rel, read.sql, 3, read.types, read.args, &totals);
            }
            totals.rows = count;
        } else {
            int64 low, up;
            const char *condition = resync_span_condition(rel, table_meta_get(rel), job, &low, &up);
            Oid types[3] = {INT8OID, INT8OID, INT8OID};
            Datum args[3] = {Int64GetDatum(low), Int64GetDatum(up),
                             Int64GetDatum(job.shard_identifier)};
            count_rows(rel, condition, 3, types, args, &totals);
        }
        relation_close(rel, NoLock);
    }
    Oid types[3] = {INT8OID, INT8OID, INT8OID};
    Datum args[3] = {Int64GetDatum(id), Int64GetDatum(totals.rows),
                     Int64GetDatum(hash_get_num_entries(totals.shards) + totals.id_shards)};
    pg::spi_run_as(pg::extension_owner_role, "recording the re-sync's size",
                   "UPDATE outbox.resync_jobs j SET rows_total = $2, shards = $3 WHERE j.id = $1",
                   3, types, args, nullptr, false, 0, SPI_OK_UPDATE, [](uint64) {});
    SPI_finish();
    PG_RETURN_VOID();
}
