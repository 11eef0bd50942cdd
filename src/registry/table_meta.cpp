#include "registry/table_meta.hpp"

#include "registry/outbox_layout.hpp"
#include "pg/guard.hpp"
#include "pg/hash.hpp"

#include "pg/spi.hpp"

extern "C" {
#include "catalog/pg_sequence.h"
}

namespace pgoutbox {

namespace {

Registry *registry = nullptr; // the latest built, possibly stale
bool registry_valid = false;
// While a registry is read, every invalidation counts: the relations it
// names are not known before the first read (registry is null then), and a
// registration that commits after the read's snapshot is met only on the
// lock of a table read next.
bool registry_loading = false;
uint64 registry_invalidations = 0;

struct CacheEntry {
    Oid relid; // hash key
    TableMeta *meta;
    bool valid;
    uint64 invalidations;
};
HTAB *table_cache = nullptr;

// Entries replaced while the transaction may still use them; freed when it
// ends.
MemoryContext retired = nullptr;
bool callbacks_registered = false;

void retire(MemoryContext context) {
    if (retired == nullptr)
        retired = AllocSetContextCreate(CacheMemoryContext, "pg_outbox retired cache entries",
                                        ALLOCSET_SMALL_SIZES);
    MemoryContextSetParent(context, retired);
}

void free_retired(XactEvent event, void *) {
    pg::forget_abandoned_frames();
    if (retired != nullptr &&
        (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE ||
         event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT))
        MemoryContextReset(retired);
}

bool in_outbox_table(const OutboxTable *table, Oid relid) {
    if (relid == table->relid)
        return true;
    for (int i = 0; i < table->nremainders; i++)
        if (table->by_remainder[i].relid == relid)
            return true;
    return false;
}

} // namespace

int outbox_remainder(const OutboxTable *table, int64 shard_identifier) {
    Datum key = Int64GetDatum(shard_identifier);
    bool key_null = false;
    uint64 hash =
        compute_partition_hash_value(1, const_cast<FmgrInfo *>(&table->hash_function),
                                     const_cast<Oid *>(&table->hash_collation), &key, &key_null);
    return (int)(hash % (uint64)table->nremainders);
}

bool is_outbox_relation(const Registry *registry, Oid relid) {
    return in_outbox_table(&registry->cell_outbox, relid) ||
           in_outbox_table(&registry->control_outbox, relid);
}

static void invalidate_callback(Datum, Oid relid) {
    pg::forget_abandoned_frames();
    bool everything = relid == InvalidOid || registry_loading ||
                      (registry != nullptr &&
                       (relid == registry->registry_relid || relid == registry->cells_relid ||
                        relid == registry->handlers_relid || is_outbox_relation(registry, relid)));
    if (everything) {
        registry_valid = false;
        registry_invalidations++;
    }
    if (table_cache == nullptr)
        return;
    auto stale = [](CacheEntry *entry) {
        entry->valid = false;
        entry->invalidations++;
    };
    if (everything) {
        HASH_SEQ_STATUS status;
        hash_seq_init(&status, table_cache);
        for (auto *entry = (CacheEntry *)hash_seq_search(&status); entry != nullptr;
             entry = (CacheEntry *)hash_seq_search(&status))
            stale(entry);
    } else if (auto *entry = (CacheEntry *)hash_search(table_cache, &relid, HASH_FIND, nullptr)) {
        stale(entry);
    }
}

static void ensure_callbacks() {
    if (callbacks_registered)
        return;
    CacheRegisterRelcacheCallback(invalidate_callback, (Datum)0);
    RegisterXactCallback(free_retired, nullptr);
    callbacks_registered = true;
}

// outbox._invalidate_cache(): every backend drops its cached registry at the
// end of this transaction (this backend: at the next command).
OUTBOX_FUNCTION(outbox__invalidate_cache) {
    Oid registry = get_relname_relid("registered_tables", get_namespace_oid("outbox", false));
    CacheInvalidateRelcacheByRelid(registry);
    PG_RETURN_VOID();
}

int64 integer_datum(Datum value, Oid type) {
    switch (type) {
    case INT2OID:
        return DatumGetInt16(value);
    case INT4OID:
        return DatumGetInt32(value);
    default:
        return DatumGetInt64(value);
    }
}

static Oid outbox_namespace() {
    return get_namespace_oid("outbox", false);
}

static void storage_altered(const char *name, const char *detail) {
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("pg_outbox storage outbox.%s has been altered", name), errdetail("%s", detail),
             errhint("Reinstall the extension: DROP EXTENSION pg_outbox; "
                     "CREATE EXTENSION pg_outbox.")));
}

static void load_partition(OutboxPartition *partition, Oid relid, const char *name,
                           int expected_natts) {
    Relation rel = table_open(relid, AccessShareLock);
    if (rel->rd_rel->relkind != RELKIND_RELATION || RelationGetDescr(rel)->natts != expected_natts)
        storage_altered(name, "Each partition must be a plain table of the outbox's columns.");
    partition->relid = relid;
    List *index_oids = RelationGetIndexList(rel);
    partition->nindexes = list_length(index_oids);
    partition->indexes = (OutboxIndex *)palloc0(sizeof(OutboxIndex) * Max(partition->nindexes, 1));
    int i = 0;
    ListCell *lc;
    foreach (lc, index_oids) {
        Relation index = index_open(lfirst_oid(lc), AccessShareLock);
        IndexInfo *info = BuildIndexInfo(index);
        if (info->ii_Expressions != NIL || info->ii_Predicate != NIL)
            ereport(ERROR,
                    (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                     errmsg("outbox.%s has an expression or partial index, %s", name,
                            RelationGetRelationName(index)),
                     errhint("Capture maintains plain column indexes only; drop that index.")));
        partition->indexes[i].oid = RelationGetRelid(index);
        partition->indexes[i].info = info;
        index_close(index, AccessShareLock);
        i++;
    }
    table_close(rel, AccessShareLock);
}

static void load_outbox_table(OutboxTable *table, const char *name, const char *sequence,
                              int expected_natts) {
    Oid nsp = outbox_namespace();
    table->relid = get_relname_relid(name, nsp);
    table->sequence = get_relname_relid(sequence, nsp);
    if (!OidIsValid(table->relid) || !OidIsValid(table->sequence))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("pg_outbox storage outbox.%s is missing", name),
                        errhint("Reinstall the extension: DROP EXTENSION pg_outbox; "
                                "CREATE EXTENSION pg_outbox.")));
    table->natts = expected_natts;
    HeapTuple sequence_tuple = SearchSysCache1(SEQRELID, ObjectIdGetDatum(table->sequence));
    if (!HeapTupleIsValid(sequence_tuple))
        storage_altered(name, "Its id sequence is missing.");
    table->id_block = Max(((Form_pg_sequence)GETSTRUCT(sequence_tuple))->seqincrement, 1);
    ReleaseSysCache(sequence_tuple);

    Relation rel = table_open(table->relid, AccessShareLock);
    if (rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
        storage_altered(name, "The outbox must be partitioned by hash of shard_identifier.");
    PartitionKey key = RelationGetPartitionKey(rel);
    if (key->strategy != PARTITION_STRATEGY_HASH || key->partnatts != 1 ||
        key->partattrs[0] != outbox_attnum(OUTBOX_SHARD_IDENTIFIER) ||
        RelationGetDescr(rel)->natts != expected_natts)
        storage_altered(name, "The outbox must be partitioned by hash of shard_identifier.");
    fmgr_info_copy(&table->hash_function, &key->partsupfunc[0], CurrentMemoryContext);
    table->hash_collation = key->partcollation[0];

    PartitionDesc desc = RelationGetPartitionDesc(rel, false);
    PartitionBoundInfo bounds = desc->boundinfo;
    if (bounds == nullptr)
        storage_altered(name, "The outbox has no partitions.");
    table->nremainders = bounds->nindexes;
    table->by_remainder = (OutboxPartition *)palloc0(sizeof(OutboxPartition) * bounds->nindexes);
    for (int r = 0; r < bounds->nindexes; r++) {
        int index = bounds->indexes[r];
        if (index < 0)
            storage_altered(name, "A hash remainder of the outbox has no partition.");
        load_partition(&table->by_remainder[r], desc->oids[index], name, expected_natts);
    }
    table_close(rel, AccessShareLock);
}

// Cells, sole tables and handlers, read as the extension's owner.
static void load_registrations(Registry *fresh) {
    pg::spi_run_as(pg::extension_owner_role, "reading outbox.cells",
                   "SELECT name FROM outbox.cells ORDER BY name", 0, nullptr, nullptr, nullptr,
                   true, 0, SPI_OK_SELECT, [fresh](uint64 rows) {
                       fresh->ncells = (int)rows;
                       fresh->cells = (const char **)MemoryContextAllocZero(
                           fresh->context, sizeof(char *) * Max(fresh->ncells, 1));
                       for (int i = 0; i < fresh->ncells; i++)
                           fresh->cells[i] = MemoryContextStrdup(
                               fresh->context,
                               SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
                   });
    fresh->message_type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid, CStringGetDatum("message"),
                                          ObjectIdGetDatum(outbox_namespace()));
    pg::spi_run_as(
        pg::extension_owner_role, "reading outbox.registered_tables",
        "SELECT r.category, r.silo = 'control', r.relid::pg_catalog.oid, r.table_key"
        " FROM outbox.registered_tables r WHERE NOT EXISTS (SELECT FROM outbox.registered_tables o"
        " WHERE o.category = r.category AND o.silo = r.silo AND o.relid <> r.relid)",
        0, nullptr, nullptr, nullptr, true, 0, SPI_OK_SELECT, [fresh](uint64 rows) {
            fresh->nsole_tables = (int)rows;
            fresh->sole_tables = (SoleTable *)MemoryContextAllocZero(
                fresh->context, sizeof(SoleTable) * Max(fresh->nsole_tables, 1));
            for (int i = 0; i < fresh->nsole_tables; i++) {
                bool isnull;
                HeapTuple row = SPI_tuptable->vals[i];
                TupleDesc desc = SPI_tuptable->tupdesc;
                SoleTable *table = &fresh->sole_tables[i];
                table->category = DatumGetInt32(SPI_getbinval(row, desc, 1, &isnull));
                table->control = DatumGetBool(SPI_getbinval(row, desc, 2, &isnull));
                table->relid = DatumGetObjectId(SPI_getbinval(row, desc, 3, &isnull));
                table->table_key = MemoryContextStrdup(fresh->context, SPI_getvalue(row, desc, 4));
            }
        });
    if (!OidIsValid(fresh->handlers_relid))
        return;
    pg::spi_run_as(
        pg::extension_owner_role, "reading outbox.handlers",
        "SELECT category, handler::pg_catalog.oid FROM outbox.handlers ORDER BY category", 0,
        nullptr, nullptr, nullptr, true, 0, SPI_OK_SELECT, [fresh](uint64 rows) {
            fresh->nhandlers = (int)rows;
            fresh->handler_categories = (int32 *)MemoryContextAllocZero(
                fresh->context, sizeof(int32) * Max(fresh->nhandlers, 1));
            fresh->handler_functions = (Oid *)MemoryContextAllocZero(
                fresh->context, sizeof(Oid) * Max(fresh->nhandlers, 1));
            for (int i = 0; i < fresh->nhandlers; i++) {
                bool isnull;
                HeapTuple row = SPI_tuptable->vals[i];
                fresh->handler_categories[i] =
                    DatumGetInt32(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
                fresh->handler_functions[i] =
                    DatumGetObjectId(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
            }
        });
}

void registry_forget() {
    registry_valid = false;
}

const Registry *registry_get() {
    ensure_callbacks();
    if (registry_valid)
        return registry;

    uint64 seen = registry_invalidations;
    registry_loading = true; // left so by an ERROR below: only a reload more
    MemoryContext context =
        AllocSetContextCreate(CacheMemoryContext, "pg_outbox registry", ALLOCSET_SMALL_SIZES);
    // Among the retired until complete: an ERROR below frees it with them.
    retire(context);
    auto *fresh = (Registry *)MemoryContextAllocZero(context, sizeof(Registry));
    fresh->context = context;
    MemoryContext old = MemoryContextSwitchTo(context);
    Oid nsp = outbox_namespace();
    fresh->registry_relid = get_relname_relid("registered_tables", nsp);
    fresh->cells_relid = get_relname_relid("cells", nsp);
    fresh->handlers_relid = get_relname_relid("handlers", nsp);
    load_outbox_table(&fresh->cell_outbox, "cell_outbox", "cell_outbox_id_seq",
                      outbox_natts(false));
    load_outbox_table(&fresh->control_outbox, "control_outbox", "control_outbox_id_seq",
                      outbox_natts(true));
    MemoryContextSwitchTo(old);
    // With the latest snapshot: the invalidation that brought us here may
    // have arrived after this transaction's snapshot was taken (the worker
    // holds one across a unit of work), and a registry read with it would
    // be stale and yet kept as valid.
    PushActiveSnapshot(GetLatestSnapshot());
    load_registrations(fresh);
    PopActiveSnapshot();
    registry_loading = false;

    MemoryContextSetParent(context, CacheMemoryContext);
    if (registry != nullptr)
        retire(registry->context);
    registry = fresh;
    registry_valid = registry_invalidations == seen;
    return registry;
}

static AttrNumber resolve_column(Relation rel, const char *column, const char *role) {
    AttrNumber attnum = get_attnum(RelationGetRelid(rel), column);
    if (attnum <= 0)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                        errmsg("%s column \"%s\" of registered table %s does not exist", role,
                               column, RelationGetRelationName(rel)),
                        errhint("Unregister and register the table again.")));
    return attnum;
}

static Oid column_type(Relation rel, AttrNumber attnum) {
    return TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid;
}

static void require_integer(Relation rel, AttrNumber attnum, const char *role) {
    Oid type = column_type(rel, attnum);
    if (type != INT2OID && type != INT4OID && type != INT8OID)
        ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
                        errmsg("%s column of registered table %s is of type %s, not an integer",
                               role, RelationGetRelationName(rel), format_type_be(type))));
}

static void require_textual(Relation rel, AttrNumber attnum) {
    Oid type = column_type(rel, attnum);
    if (type != TEXTOID && type != VARCHAROID && type != NAMEOID)
        ereport(ERROR,
                (errcode(ERRCODE_DATATYPE_MISMATCH),
                 errmsg("cell column of registered table %s is of type %s, not text, varchar or "
                        "name",
                        RelationGetRelationName(rel), format_type_be(type))));
}

// The column called name (nullptr: none, InvalidAttrNumber) that registered
// table rel keys its outbox rows by; role says which: id and shard are
// integers, cell is text.  Its type in *type.
static AttrNumber key_column(Relation rel, const char *name, const char *role, Oid *type) {
    if (name == nullptr)
        return InvalidAttrNumber;
    AttrNumber attnum = resolve_column(rel, name, role);
    if (strcmp(role, "cell") == 0)
        require_textual(rel, attnum);
    else
        require_integer(rel, attnum, role);
    *type = column_type(rel, attnum);
    return attnum;
}

// The registry row that covers rel: rel itself or its nearest registered
// partition ancestor, or the given root.
static uint64 read_registration(Relation rel, Oid root) {
    static const char *columns = "SELECT r.table_key, r.silo, r.category, c.scope,"
                                 " r.shard_column::text, r.cell_column::text,"
                                 " r.payload_columns::text[]"
                                 " FROM outbox.registered_tables r"
                                 " JOIN outbox.categories c ON c.id = r.category";
    // Capture asks on every first write to a relation: keep that plan.
    static SPIPlanPtr covering = nullptr;
    if (OidIsValid(root)) {
        Oid types[1] = {OIDOID};
        Datum args[1] = {ObjectIdGetDatum(root)};
        return pg::spi_run("reading the registry", psprintf("%s WHERE r.relid = $1", columns), 1,
                           types, args, nullptr, true, 1, SPI_OK_SELECT);
    }
    // Nearest first: a partition takes the registration of the nearest
    // registered table above it.  Its ancestors come from the catalog, not
    // from outbox._self_and_ancestors(), an SQL function planned again on
    // each call; and the plan is generic, not one planned for each of a new
    // backend's first five tables.
    Oid types[1] = {OIDARRAYOID};
    pg::spi_prepare_kept(&covering, "reading the registry",
                         psprintf("%s WHERE r.relid::oid = ANY ($1)"
                                  " ORDER BY array_position($1, r.relid::oid) LIMIT 1",
                                  columns),
                         1, types, CURSOR_OPT_GENERIC_PLAN);
    Oid relid = RelationGetRelid(rel);
    List *ancestors = get_rel_relispartition(relid) ? get_partition_ancestors(relid) : NIL;
    Datum *self_and_ancestors = (Datum *)palloc(sizeof(Datum) * (list_length(ancestors) + 1));
    int n = 0;
    self_and_ancestors[n++] = ObjectIdGetDatum(relid);
    ListCell *cell;
    foreach (cell, ancestors)
        self_and_ancestors[n++] = ObjectIdGetDatum(lfirst_oid(cell));
    Datum args[1] = {PointerGetDatum(
        construct_array(self_and_ancestors, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT))};
    int rc = SPI_execute_plan(covering, args, nullptr, true, 1);
    if (rc != SPI_OK_SELECT)
        elog(ERROR, "pg_outbox: registry lookup failed: %s", SPI_result_code_string(rc));
    return SPI_processed;
}

// A new entry for rel in a context of its own, among the retired until
// complete (an ERROR frees it at the end of the transaction).
static TableMeta *build_entry(Relation rel, Oid root) {
    MemoryContext context =
        AllocSetContextCreate(CacheMemoryContext, "pg_outbox table meta", ALLOCSET_SMALL_SIZES);
    retire(context);
    auto *entry = (TableMeta *)MemoryContextAllocZero(context, sizeof(TableMeta));
    entry->relid = RelationGetRelid(rel);
    entry->context = context;

    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    uint64 found = read_registration(rel, root);
    pg::run_as_end(&scope);

    MemoryContext old = MemoryContextSwitchTo(context);
    entry->relname = pstrdup(RelationGetRelationName(rel));
    entry->registered = found == 1;
    if (entry->registered) {
        HeapTuple row = SPI_tuptable->vals[0];
        TupleDesc desc = SPI_tuptable->tupdesc;
        bool isnull;
        entry->table_key = pstrdup(SPI_getvalue(row, desc, 1));
        entry->silo =
            strcmp(SPI_getvalue(row, desc, 2), "control") == 0 ? Silo::Control : Silo::Cell;
        entry->category = DatumGetInt32(SPI_getbinval(row, desc, 3, &isnull));
        entry->scope = DatumGetInt32(SPI_getbinval(row, desc, 4, &isnull));

        entry->id_attnum = key_column(rel, "id", "id", &entry->id_type);
        entry->shard_attnum =
            key_column(rel, SPI_getvalue(row, desc, 5), "shard", &entry->shard_type);
        entry->cell_attnum = key_column(rel, SPI_getvalue(row, desc, 6), "cell", &entry->cell_type);

        Datum payload = SPI_getbinval(row, desc, 7, &isnull);
        entry->npayload = 0;
        if (!isnull) {
            Datum *names;
            bool *nulls;
            int count;
            deconstruct_array(DatumGetArrayTypeP(payload), TEXTOID, -1, false, TYPALIGN_INT, &names,
                              &nulls, &count);
            entry->payload = (PayloadColumn *)palloc0(sizeof(PayloadColumn) * Max(count, 1));
            for (int i = 0; i < count; i++) {
                PayloadColumn *column = &entry->payload[i];
                column->name = TextDatumGetCString(names[i]);
                column->attnum = resolve_column(rel, column->name, "payload");
                Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), column->attnum - 1);
                fmgr_info_cxt(F_TO_JSONB, &column->to_jsonb, context);
                column->to_jsonb.fn_expr = (Node *)makeFuncExpr(
                    F_TO_JSONB, JSONBOID,
                    list_make1(makeNullConst(att->atttypid, att->atttypmod, att->attcollation)),
                    InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL);
            }
            entry->npayload = count;
        }
    }
    MemoryContextSwitchTo(old);
    SPI_finish();
    return entry;
}

const TableMeta *table_meta_get(Relation rel) {
    ensure_callbacks();
    if (table_cache == nullptr) {
        table_cache = pg::blob_hash("pg_outbox table cache", 64, sizeof(Oid), sizeof(CacheEntry),
                                    CacheMemoryContext);
    }
    Oid relid = RelationGetRelid(rel);
    bool found;
    auto *entry = (CacheEntry *)hash_search(table_cache, &relid, HASH_ENTER, &found);
    if (!found) {
        entry->meta = nullptr;
        entry->valid = false;
        entry->invalidations = 0;
    }
    if (entry->valid)
        return entry->meta;
    uint64 seen = entry->invalidations;
    TableMeta *fresh = build_entry(rel, InvalidOid);
    MemoryContextSetParent(fresh->context, CacheMemoryContext);
    if (entry->meta != nullptr)
        retire(entry->meta->context);
    entry->meta = fresh;
    entry->valid = entry->invalidations == seen;
    return fresh;
}

const TableMeta *table_meta_build(Relation rel, Oid root) {
    ensure_callbacks();
    return build_entry(rel, root);
}

Silo silo_argument(FunctionCallInfo fcinfo, int n) {
    if (PG_ARGISNULL(n))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("silo must not be NULL")));
    char *silo = text_to_cstring(PG_GETARG_TEXT_PP(n));
    if (strcmp(silo, "cell") == 0)
        return Silo::Cell;
    if (strcmp(silo, "control") == 0)
        return Silo::Control;
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("silo must be 'cell' or 'control', not %s", quote_literal_cstr(silo))));
    pg_unreachable();
}

} // namespace pgoutbox
