#include "relocation/model/models.hpp"

#include "pg/guard.hpp"
#include "pg/spi.hpp"

#include <algorithm>

// Written without C++ objects that own resources: errors from SPI unwind
// through it freely.
namespace pgoutbox::relocation {

namespace {

// What pg_outbox's own tables say of an application table: the key it is
// registered under and its relocation scopes.  Sorted by relid.
struct Declared {
    Oid relid;
    char *table_key; // NULL: not registered
    bool has_scopes;
    Datum scopes; // text[]
    Oid scope_function;
};

struct DeclaredTables {
    Declared *rows;
    int count;
};

DeclaredTables read_declared() {
    MemoryContext caller = CurrentMemoryContext;
    DeclaredTables declared = {nullptr, 0};
    pg::spi_run_as(
        pg::extension_owner_role, "reading the registered and scoped tables",
        "SELECT coalesce(r.relid, s.relid)::oid, r.table_key, s.scopes, s.scope_function::oid"
        " FROM outbox.registered_tables r FULL JOIN outbox.relocation_scopes s"
        " ON s.relid = r.relid ORDER BY 1",
        0, nullptr, nullptr, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 rows) {
            MemoryContext spi = MemoryContextSwitchTo(caller);
            TupleDesc desc = SPI_tuptable->tupdesc;
            declared.count = int(rows);
            declared.rows = (Declared *)palloc0(sizeof(Declared) * (rows + 1));
            for (uint64 r = 0; r < rows; r++) {
                HeapTuple row = SPI_tuptable->vals[r];
                Declared *d = &declared.rows[r];
                bool isnull;
                d->relid = DatumGetObjectId(SPI_getbinval(row, desc, 1, &isnull));
                Datum key = SPI_getbinval(row, desc, 2, &isnull);
                d->table_key = isnull ? nullptr : TextDatumGetCString(key);
                Datum scopes = SPI_getbinval(row, desc, 3, &isnull);
                d->has_scopes = !isnull;
                d->scopes = isnull ? (Datum)0 : PointerGetDatum(DatumGetArrayTypePCopy(scopes));
                Datum function = SPI_getbinval(row, desc, 4, &isnull);
                d->scope_function = isnull ? InvalidOid : DatumGetObjectId(function);
            }
            MemoryContextSwitchTo(spi);
        });
    return declared;
}

const Declared *declared_of(const DeclaredTables &declared, Oid relid) {
    const Declared *begin = declared.rows, *end = declared.rows + declared.count;
    const Declared *found =
        std::lower_bound(begin, end, relid, [](const Declared &d, Oid id) { return d.relid < id; });
    return found != end && found->relid == relid ? found : nullptr;
}

// The one rule for which tables a relocation covers and the key that names
// each (issue 45: SQL had a copy, which left other extensions' tables in):
// every table of the application's schemas: not the catalogs, not
// pg_outbox's, not another extension's, not a partition (it takes its
// root's scope), not a temporary table.  Read from the catalogs directly,
// not by a query that a new backend plans anew for each re-sync's find
// (a few milliseconds, issue 49).  Returns the table's schema, or NULL
// when it is not covered.
char *covered_schema(Form_pg_class c) {
    if ((c->relkind != RELKIND_RELATION && c->relkind != RELKIND_PARTITIONED_TABLE) ||
        c->relispartition || c->relpersistence == RELPERSISTENCE_TEMP ||
        c->oid < FirstNormalObjectId)
        return nullptr;
    char *schema = get_namespace_name(c->relnamespace);
    if (schema == nullptr || strcmp(schema, "pg_catalog") == 0 ||
        strcmp(schema, "information_schema") == 0 || strcmp(schema, "outbox") == 0 ||
        strncmp(schema, "pg_toast", 8) == 0 || strncmp(schema, "pg_temp", 7) == 0 ||
        OidIsValid(getExtensionOfObject(RelationRelationId, c->oid)))
        return nullptr;
    return schema;
}

// Its key: the registered table_key, else its name, schema-qualified
// outside public.
char *table_key(const char *registered, const char *schema, const char *name) {
    if (registered != nullptr)
        return pstrdup(registered);
    return strcmp(schema, "public") == 0 ? pstrdup(name) : psprintf("%s.%s", schema, name);
}

// each(class, schema) for every covered table, in pg_class's order.
template <typename Each> void for_each_covered(Each &&each) {
    Relation pg_class = table_open(RelationRelationId, AccessShareLock);
    TableScanDesc scan = table_beginscan_catalog(pg_class, 0, nullptr);
    HeapTuple tuple;
    while ((tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
        auto *c = (Form_pg_class)GETSTRUCT(tuple);
        char *schema = covered_schema(c);
        if (schema != nullptr)
            each(c, schema);
    }
    table_endscan(scan);
    table_close(pg_class, AccessShareLock);
}

// The column of relid's primary key when the key has one column, else 0.
AttrNumber primary_key_column(Oid relid) {
    Relation pg_index = table_open(IndexRelationId, AccessShareLock);
    ScanKeyData key;
    ScanKeyInit(&key, Anum_pg_index_indrelid, BTEqualStrategyNumber, F_OIDEQ,
                ObjectIdGetDatum(relid));
    SysScanDesc scan = systable_beginscan(pg_index, IndexIndrelidIndexId, true, nullptr, 1, &key);
    AttrNumber column = 0;
    HeapTuple tuple;
    while ((tuple = systable_getnext(scan)) != nullptr) {
        auto *index = (Form_pg_index)GETSTRUCT(tuple);
        if (index->indisprimary) {
            if (index->indnkeyatts == 1)
                column = index->indkey.values[0];
            break;
        }
    }
    systable_endscan(scan);
    table_close(pg_index, AccessShareLock);
    return column;
}

// The partitioned table at the top of relid's tree (relid when none).
Oid partition_root(Oid relid) {
    if (!get_rel_relispartition(relid))
        return relid;
    List *ancestors = get_partition_ancestors(relid);
    Oid root = llast_oid(ancestors);
    list_free(ancestors);
    return root;
}

// The column of a constraint's key (conkey, confkey) of one column, else 0.
AttrNumber single_column(HeapTuple tuple, TupleDesc desc, int attribute) {
    bool isnull;
    Datum value = heap_getattr(tuple, attribute, desc, &isnull);
    if (isnull)
        return 0;
    ArrayType *array = DatumGetArrayTypeP(value);
    if (ARR_NDIM(array) != 1 || ARR_DIMS(array)[0] != 1)
        return 0;
    return ((const int16 *)ARR_DATA_PTR(array))[0];
}

// Integer *_id columns that are neither a key, a reference nor named in
// plain_columns: outbox.check_models()'s unregistered_cross_silo.  Only
// the check reads them.
const char *suspects_sql = R"sql(
SELECT a.attrelid::oid, string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
  FROM pg_attribute a LEFT JOIN outbox.relocation_scopes s ON s.relid = a.attrelid
 WHERE a.attrelid = ANY ($1) AND a.attnum > 0 AND NOT a.attisdropped
   AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)
   AND a.attname ~ '_id$'
   AND NOT EXISTS (SELECT FROM pg_index i
                    WHERE i.indrelid = a.attrelid AND i.indisprimary
                      AND a.attnum = ANY (i.indkey::int2[]))
   AND NOT EXISTS (SELECT FROM pg_constraint k
                    WHERE k.conrelid = a.attrelid AND k.contype = 'f'
                      AND a.attnum = ANY (k.conkey))
   AND NOT EXISTS (SELECT FROM outbox.registered_foreign_keys f
                    WHERE f.relid = a.attrelid AND f.column_name = a.attname)
   AND NOT a.attname = ANY (coalesce(s.plain_columns, '{}'))
 GROUP BY a.attrelid
)sql";

// The registered cross-silo references whose column exists.
const char *registered_references_sql = R"sql(
SELECT f.relid::oid, f.column_name::text, NOT a.attnotnull, f.parent_table
  FROM outbox.registered_foreign_keys f
  JOIN pg_attribute a ON a.attrelid = f.relid AND a.attname = f.column_name
)sql";

const char *scope_names[] = {"Excluded", "User", "Organization", "Config", "Global"};

char *text_or_null(HeapTuple row, TupleDesc desc, int column) {
    bool isnull;
    Datum value = SPI_getbinval(row, desc, column, &isnull);
    return isnull ? nullptr : TextDatumGetCString(value);
}

bool bool_of(HeapTuple row, TupleDesc desc, int column) {
    bool isnull;
    Datum value = SPI_getbinval(row, desc, column, &isnull);
    return !isnull && DatumGetBool(value);
}

int scopes_of(Datum array, int *count) {
    Datum *elements;
    bool *nulls;
    int n;
    deconstruct_array(DatumGetArrayTypeP(array), TEXTOID, -1, false, TYPALIGN_INT, &elements,
                      &nulls, &n);
    int bits = 0;
    for (int i = 0; i < n; i++) {
        char *name = nulls[i] ? nullptr : TextDatumGetCString(elements[i]);
        for (int b = 0; b < 5; b++)
            if (name != nullptr && strcmp(name, scope_names[b]) == 0)
                bits |= 1 << b;
    }
    *count = n;
    return bits;
}

int index_of(const Models *models, Oid relid) {
    for (int i = 0; i < models->count; i++)
        if (models->tables[i].relid == relid)
            return i;
    return -1;
}

int index_of_key(const Models *models, const char *key) {
    for (int i = 0; i < models->count; i++)
        if (strcmp(models->tables[i].key, key) == 0)
            return i;
    return -1;
}

// The quoted, schema-qualified name of function fn; NULL when it is gone
// (dropped since outbox.relocation_scopes named it).  Read from one
// catalog row: two lookups could see it dropped in between.
char *function_name(Oid fn) {
    HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
    if (!HeapTupleIsValid(tuple))
        return nullptr;
    auto *proc = (Form_pg_proc)GETSTRUCT(tuple);
    Oid schema_oid = proc->pronamespace;
    char *name = pstrdup(NameStr(proc->proname));
    ReleaseSysCache(tuple);
    char *schema = get_namespace_name(schema_oid);
    return schema == nullptr ? nullptr : quote_qualified_identifier(schema, name);
}

bool integer_type(Oid type) {
    return type == INT2OID || type == INT4OID || type == INT8OID;
}

void read_suspects(Models *models, MemoryContext caller) {
    Datum *relids = (Datum *)palloc(sizeof(Datum) * (models->count + 1));
    for (int i = 0; i < models->count; i++)
        relids[i] = ObjectIdGetDatum(models->tables[i].relid);
    Datum array = PointerGetDatum(
        construct_array(relids, models->count, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
    Oid type = OIDARRAYOID;
    pg::spi_run_as(
        pg::extension_owner_role, "reading the application's integer columns", suspects_sql, 1,
        &type, &array, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 rows) {
            MemoryContext spi = MemoryContextSwitchTo(caller);
            TupleDesc desc = SPI_tuptable->tupdesc;
            for (uint64 r = 0; r < rows; r++) {
                HeapTuple row = SPI_tuptable->vals[r];
                bool isnull;
                int t = index_of(models, DatumGetObjectId(SPI_getbinval(row, desc, 1, &isnull)));
                if (t >= 0)
                    models->tables[t].suspects = text_or_null(row, desc, 2);
            }
            MemoryContextSwitchTo(spi);
        });
}

// One-column foreign keys to the parent's primary key, from the partitioned
// table (a partition's are clones), and the registered cross-silo
// references, by table and column.  Foreign keys of several columns are
// not followed.
void read_references(Models *models, MemoryContext caller) {
    int capacity = 16;
    models->references = (Reference *)palloc0(sizeof(Reference) * capacity);
    auto add = [&](Oid relid, char *column, bool nullable) -> Reference * {
        int child = index_of(models, relid);
        if (child < 0)
            return nullptr; // a table that is not the application's
        if (models->reference_count + 1 == capacity) {
            capacity *= 2;
            models->references =
                (Reference *)repalloc(models->references, sizeof(Reference) * capacity);
        }
        Reference *ref = &models->references[models->reference_count++];
        *ref = {child, -1, column, nullable, false, nullptr};
        return ref;
    };

    Relation pg_constraint = table_open(ConstraintRelationId, AccessShareLock);
    TupleDesc constraint_desc = RelationGetDescr(pg_constraint);
    TableScanDesc scan = table_beginscan_catalog(pg_constraint, 0, nullptr);
    HeapTuple tuple;
    while ((tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
        auto *k = (Form_pg_constraint)GETSTRUCT(tuple);
        if (k->contype != CONSTRAINT_FOREIGN || OidIsValid(k->conparentid))
            continue;
        AttrNumber column = single_column(tuple, constraint_desc, Anum_pg_constraint_conkey);
        if (column == 0 || single_column(tuple, constraint_desc, Anum_pg_constraint_confkey) !=
                               primary_key_column(k->confrelid))
            continue;
        HeapTuple attribute =
            SearchSysCache2(ATTNUM, ObjectIdGetDatum(k->conrelid), Int16GetDatum(column));
        if (!HeapTupleIsValid(attribute))
            continue;
        auto *a = (Form_pg_attribute)GETSTRUCT(attribute);
        Reference *ref =
            add(partition_root(k->conrelid), pstrdup(NameStr(a->attname)), !a->attnotnull);
        ReleaseSysCache(attribute);
        if (ref != nullptr) {
            ref->parent = index_of(models, partition_root(k->confrelid));
            ref->parent_key = ref->parent >= 0 ? models->tables[ref->parent].key : nullptr;
        }
    }
    table_endscan(scan);
    table_close(pg_constraint, AccessShareLock);

    pg::spi_run_as(
        pg::extension_owner_role, "reading the registered references", registered_references_sql, 0,
        nullptr, nullptr, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 rows) {
            MemoryContext spi = MemoryContextSwitchTo(caller);
            TupleDesc desc = SPI_tuptable->tupdesc;
            for (uint64 r = 0; r < rows; r++) {
                HeapTuple row = SPI_tuptable->vals[r];
                bool isnull;
                Reference *ref = add(DatumGetObjectId(SPI_getbinval(row, desc, 1, &isnull)),
                                     text_or_null(row, desc, 2), bool_of(row, desc, 3));
                if (ref != nullptr) {
                    ref->cross_silo = true;
                    ref->parent_key = text_or_null(row, desc, 4);
                    ref->parent = index_of_key(models, ref->parent_key);
                }
            }
            MemoryContextSwitchTo(spi);
        });

    std::sort(models->references, models->references + models->reference_count,
              [&](const Reference &a, const Reference &b) {
                  Oid x = models->tables[a.child].relid, y = models->tables[b.child].relid;
                  return x != y ? x < y : strcmp(a.column, b.column) < 0;
              });
    models->edges = (GraphEdge *)palloc0(sizeof(GraphEdge) * (models->reference_count + 1));
    models->edge_reference = (int *)palloc0(sizeof(int) * (models->reference_count + 1));
    for (int r = 0; r < models->reference_count; r++) {
        const Reference *ref = &models->references[r];
        if (ref->parent >= 0) {
            models->edges[models->edge_count] = {ref->child, ref->parent, ref->nullable};
            models->edge_reference[models->edge_count++] = r;
        }
    }
}

} // namespace

const char *scope_name(int bit) {
    for (int b = 0; b < 5; b++)
        if (bit == 1 << b)
            return scope_names[b];
    return "?";
}

Models *load_models(bool with_suspects) {
    MemoryContext caller = CurrentMemoryContext;
    Models *models = (Models *)palloc0(sizeof(Models));
    models->user_root = models->organization_root = -1;
    DeclaredTables declared = read_declared();

    int capacity = 16;
    models->tables = (Model *)palloc0(sizeof(Model) * capacity);
    for_each_covered([&](Form_pg_class c, char *schema) {
        if (models->count + 1 == capacity) {
            capacity *= 2;
            models->tables = (Model *)repalloc(models->tables, sizeof(Model) * capacity);
        }
        Model *m = &models->tables[models->count++];
        memset(m, 0, sizeof(Model));
        const Declared *d = declared_of(declared, c->oid);
        m->relid = c->oid;
        m->key = table_key(d == nullptr ? nullptr : d->table_key, schema, NameStr(c->relname));
        m->qualified = pstrdup(quote_qualified_identifier(schema, NameStr(c->relname)));
        m->relkind = c->relkind;
        m->forced_row_security = c->relrowsecurity && c->relforcerowsecurity;
        if (d != nullptr && d->has_scopes)
            m->scopes = scopes_of(d->scopes, &m->scope_count);
        m->has_function = d != nullptr && OidIsValid(d->scope_function);
        if (m->has_function)
            m->function = function_name(d->scope_function);
        AttrNumber pk = primary_key_column(c->oid);
        if (pk > 0 && integer_type(get_atttype(c->oid, pk)))
            m->pk = get_attname(c->oid, pk, false);
    });
    std::sort(models->tables, models->tables + models->count,
              [](const Model &a, const Model &b) { return strcmp(a.key, b.key) < 0; });
    if (with_suspects)
        read_suspects(models, caller);
    read_references(models, caller);

    pg::spi_run_as(pg::extension_owner_role, "reading the relocation roots",
                   "SELECT r.scope, r.relid::oid FROM outbox.relocation_roots r", 0, nullptr,
                   nullptr, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 rows) {
                       TupleDesc desc = SPI_tuptable->tupdesc;
                       for (uint64 r = 0; r < rows; r++) {
                           HeapTuple row = SPI_tuptable->vals[r];
                           bool isnull;
                           char *scope = text_or_null(row, desc, 1);
                           int table = index_of(
                               models, DatumGetObjectId(SPI_getbinval(row, desc, 2, &isnull)));
                           if (strcmp(scope, "User") == 0)
                               models->user_root = table;
                           else
                               models->organization_root = table;
                       }
                   });
    return models;
}

} // namespace pgoutbox::relocation

// outbox._relocation_table(model) and outbox._relocation_table_key(rel):
// the rule above for the SQL of the import and the moves.
namespace {

// The first column of the one row sql gives for arg (NULL: no row), copied
// out of SPI.  The SQL declarations pin search_path (the rule names
// pg_catalog's operators unqualified).
Datum one_value(const char *what, const char *sql, Oid type, Datum arg, bool *isnull) {
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "pg_outbox: SPI_connect failed");
    uint64 n = pgoutbox::pg::spi_run(what, sql, 1, &type, &arg, nullptr, true, 0, SPI_OK_SELECT);
    Datum value = (Datum)0;
    *isnull = n == 0;
    if (n > 0) {
        value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, isnull);
        if (!*isnull)
            value = SPI_datumTransfer(value, false, -1);
    }
    SPI_finish();
    return value;
}

} // namespace

// The table model names here; NULL when none does, an ERROR when two do.
OUTBOX_FUNCTION(outbox__relocation_table) {
    using namespace pgoutbox::relocation;
    if (PG_ARGISNULL(0))
        PG_RETURN_NULL();
    char *model = text_to_cstring(PG_GETARG_TEXT_PP(0));
    DeclaredTables declared = read_declared();
    List *found = NIL;
    for_each_covered([&](Form_pg_class c, char *schema) {
        const Declared *d = declared_of(declared, c->oid);
        if (strcmp(table_key(d == nullptr ? nullptr : d->table_key, schema, NameStr(c->relname)),
                   model) == 0)
            found = lappend_oid(found, c->oid);
    });
    int n = list_length(found);
    if (n == 0)
        PG_RETURN_NULL();
    if (n > 1) {
        list_sort(found, list_oid_cmp);
        Datum *tables = (Datum *)palloc(sizeof(Datum) * n);
        for (int i = 0; i < n; i++)
            tables[i] = ObjectIdGetDatum(list_nth_oid(found, i));
        Datum array = PointerGetDatum(
            construct_array(tables, n, REGCLASSOID, sizeof(Oid), true, TYPALIGN_INT));
        ereport(ERROR, (errcode(ERRCODE_AMBIGUOUS_ALIAS),
                        errmsg("table key %s names %d tables here: %s", quote_literal_cstr(model),
                               n, OidOutputFunctionCall(F_ARRAY_OUT, array))));
    }
    PG_RETURN_OID(linitial_oid(found));
}

// The table key of rel as an export names it.
OUTBOX_FUNCTION(outbox__relocation_table_key) {
    if (PG_ARGISNULL(0))
        PG_RETURN_NULL();
    Oid relid = PG_GETARG_OID(0);
    HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
    if (!HeapTupleIsValid(tuple))
        PG_RETURN_NULL();
    auto *c = (Form_pg_class)GETSTRUCT(tuple);
    Oid schema_oid = c->relnamespace;
    char *name = pstrdup(NameStr(c->relname));
    ReleaseSysCache(tuple);
    char *schema = get_namespace_name(schema_oid);
    if (schema == nullptr)
        PG_RETURN_NULL(); // its schema dropped meanwhile
    bool isnull;
    Datum registered = one_value("naming a relocation's table",
                                 "SELECT r.table_key FROM outbox.registered_tables r"
                                 " WHERE r.relid = $1",
                                 REGCLASSOID, ObjectIdGetDatum(relid), &isnull);
    PG_RETURN_TEXT_P(cstring_to_text(pgoutbox::relocation::table_key(
        isnull ? nullptr : TextDatumGetCString(registered), schema, name)));
}
