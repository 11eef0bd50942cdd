#include "relocation/model/models.hpp"

#include "pg/guard.hpp"
#include "pg/spi.hpp"

// Written without C++ objects that own resources: errors from SPI unwind
// through it freely.
namespace pgoutbox::relocation {

// The one rule for which tables a relocation covers and the key that names
// each (issue 45: SQL had a copy, which left other extensions' tables in):
// every table of the application's schemas: not the catalogs, not
// pg_outbox's, not another extension's, not a partition (it takes its
// root's scope), not a temporary table.  Its key: the registered
// table_key, else its name, schema-qualified outside public.
#define TABLE_KEY_SQL                                                                              \
    "coalesce(r.table_key, CASE WHEN n.nspname = 'public' THEN c.relname::text"                    \
    " ELSE n.nspname || '.' || c.relname END)"
#define COVERED_TABLES_SQL                                                                         \
    "SELECT c.oid, n.nspname, c.relname, c.relkind,"                                               \
    " c.relrowsecurity AND c.relforcerowsecurity AS forced, " TABLE_KEY_SQL " AS model"            \
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"                               \
    " LEFT JOIN outbox.registered_tables r ON r.relid = c.oid"                                     \
    " WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relpersistence <> 't'"          \
    " AND c.oid >= 16384 AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'outbox')"      \
    " AND n.nspname !~ '^pg_(toast|temp)'"                                                         \
    " AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass"              \
    " AND d.objid = c.oid AND d.deptype = 'e')"

namespace {

const char *tables_sql = "WITH t AS (" COVERED_TABLES_SQL ")"
                         R"sql(
SELECT * FROM (
SELECT t.oid, t.model,
       quote_ident(t.nspname) || '.' || quote_ident(t.relname),
       t.relkind::text, s.scopes, s.scope_function IS NOT NULL,
       (SELECT quote_ident(pn.nspname) || '.' || quote_ident(p.proname)
          FROM pg_proc p JOIN pg_namespace pn ON pn.oid = p.pronamespace
         WHERE p.oid = s.scope_function),
       (SELECT a.attname::text
          FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
         WHERE i.indrelid = t.oid AND i.indisprimary AND i.indnkeyatts = 1
           AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)),
       t.forced,
       (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
          FROM pg_attribute a
         WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
           AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)
           AND a.attname ~ '_id$'
           AND NOT EXISTS (SELECT FROM pg_index i
                            WHERE i.indrelid = t.oid AND i.indisprimary
                              AND a.attnum = ANY (i.indkey::int2[]))
           AND NOT EXISTS (SELECT FROM pg_constraint k
                            WHERE k.conrelid = t.oid AND k.contype = 'f'
                              AND a.attnum = ANY (k.conkey))
           AND NOT EXISTS (SELECT FROM outbox.registered_foreign_keys f
                            WHERE f.relid = t.oid AND f.column_name = a.attname)
           AND NOT a.attname = ANY (coalesce(s.plain_columns, '{}')))
  FROM t LEFT JOIN outbox.relocation_scopes s ON s.relid = t.oid) m
 ORDER BY m.model COLLATE "C"
)sql";

// One-column foreign keys to the parent's primary key, from the partitioned
// table (a partition's are clones), and the registered cross-silo
// references.  Foreign keys of several columns are not followed.
const char *references_sql = R"sql(
SELECT coalesce(pg_partition_root(k.conrelid), k.conrelid)::oid,
       coalesce(pg_partition_root(k.confrelid), k.confrelid)::oid,
       a.attname::text, NOT a.attnotnull, false, NULL::text
  FROM pg_constraint k
  JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
 WHERE k.contype = 'f' AND k.conparentid = 0 AND cardinality(k.conkey) = 1
   AND EXISTS (SELECT FROM pg_index i
                WHERE i.indrelid = k.confrelid AND i.indisprimary AND i.indnkeyatts = 1
                  AND i.indkey[0] = k.confkey[1])
UNION ALL
SELECT f.relid::oid, NULL, f.column_name::text, NOT a.attnotnull, true, f.parent_table
  FROM outbox.registered_foreign_keys f
  JOIN pg_attribute a ON a.attrelid = f.relid AND a.attname = f.column_name
 ORDER BY 1, 3
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

} // namespace

const char *scope_name(int bit) {
    for (int b = 0; b < 5; b++)
        if (bit == 1 << b)
            return scope_names[b];
    return "?";
}

Models *load_models() {
    MemoryContext caller = CurrentMemoryContext;
    Models *models = (Models *)palloc0(sizeof(Models));
    models->user_root = models->organization_root = -1;

    pg::spi_run_as(pg::extension_owner_role, "reading the application's tables", tables_sql, 0,
                   nullptr, nullptr, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 rows) {
                       MemoryContext spi = MemoryContextSwitchTo(caller);
                       TupleDesc desc = SPI_tuptable->tupdesc;
                       models->count = int(rows);
                       models->tables = (Model *)palloc0(sizeof(Model) * (rows + 1));
                       for (uint64 r = 0; r < rows; r++) {
                           HeapTuple row = SPI_tuptable->vals[r];
                           Model *m = &models->tables[r];
                           bool isnull;
                           m->relid = DatumGetObjectId(SPI_getbinval(row, desc, 1, &isnull));
                           m->key = text_or_null(row, desc, 2);
                           m->qualified = text_or_null(row, desc, 3);
                           m->relkind = text_or_null(row, desc, 4)[0];
                           Datum scopes = SPI_getbinval(row, desc, 5, &isnull);
                           if (!isnull)
                               m->scopes = scopes_of(scopes, &m->scope_count);
                           m->has_function = bool_of(row, desc, 6);
                           m->function = text_or_null(row, desc, 7);
                           m->pk = text_or_null(row, desc, 8);
                           m->forced_row_security = bool_of(row, desc, 9);
                           m->suspects = text_or_null(row, desc, 10);
                       }
                       MemoryContextSwitchTo(spi);
                   });

    pg::spi_run_as(
        pg::extension_owner_role, "reading the application's references", references_sql, 0,
        nullptr, nullptr, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 rows) {
            MemoryContext spi = MemoryContextSwitchTo(caller);
            TupleDesc desc = SPI_tuptable->tupdesc;
            models->references = (Reference *)palloc0(sizeof(Reference) * (rows + 1));
            models->edges = (GraphEdge *)palloc0(sizeof(GraphEdge) * (rows + 1));
            models->edge_reference = (int *)palloc0(sizeof(int) * (rows + 1));
            for (uint64 r = 0; r < rows; r++) {
                HeapTuple row = SPI_tuptable->vals[r];
                bool isnull;
                int child =
                    index_of(models, DatumGetObjectId(SPI_getbinval(row, desc, 1, &isnull)));
                if (child < 0)
                    continue; // a table that is not the application's
                Reference *ref = &models->references[models->reference_count];
                ref->child = child;
                ref->column = text_or_null(row, desc, 3);
                ref->nullable = bool_of(row, desc, 4);
                ref->cross_silo = bool_of(row, desc, 5);
                if (ref->cross_silo) {
                    ref->parent_key = text_or_null(row, desc, 6);
                    ref->parent = index_of_key(models, ref->parent_key);
                } else {
                    Datum parent = SPI_getbinval(row, desc, 2, &isnull);
                    ref->parent = index_of(models, DatumGetObjectId(parent));
                    ref->parent_key = ref->parent >= 0 ? models->tables[ref->parent].key : nullptr;
                }
                if (ref->parent >= 0) {
                    models->edges[models->edge_count] = {child, ref->parent, ref->nullable};
                    models->edge_reference[models->edge_count++] = models->reference_count;
                }
                models->reference_count++;
            }
            MemoryContextSwitchTo(spi);
        });

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
    if (PG_ARGISNULL(0))
        PG_RETURN_NULL();
    bool isnull;
    Datum found = one_value(
        "finding a relocation's table",
        "SELECT pg_catalog.array_agg(t.oid::pg_catalog.regclass) FROM (" COVERED_TABLES_SQL
        ") t WHERE t.model = $1",
        TEXTOID, PG_GETARG_DATUM(0), &isnull);
    if (isnull)
        PG_RETURN_NULL();
    ArrayType *tables = DatumGetArrayTypeP(found);
    int n = ArrayGetNItems(ARR_NDIM(tables), ARR_DIMS(tables));
    if (n > 1)
        ereport(ERROR, (errcode(ERRCODE_AMBIGUOUS_ALIAS),
                        errmsg("table key %s names %d tables here: %s",
                               quote_literal_cstr(text_to_cstring(PG_GETARG_TEXT_PP(0))), n,
                               OidOutputFunctionCall(F_ARRAY_OUT, found))));
    Datum *items;
    int count;
    deconstruct_array(tables, REGCLASSOID, sizeof(Oid), true, TYPALIGN_INT, &items, nullptr,
                      &count);
    PG_RETURN_DATUM(items[0]);
}

// The table key of rel as an export names it.
OUTBOX_FUNCTION(outbox__relocation_table_key) {
    if (PG_ARGISNULL(0))
        PG_RETURN_NULL();
    bool isnull;
    Datum key = one_value("naming a relocation's table",
                          "SELECT " TABLE_KEY_SQL
                          " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                          " LEFT JOIN outbox.registered_tables r ON r.relid = c.oid"
                          " WHERE c.oid = $1",
                          OIDOID, PG_GETARG_DATUM(0), &isnull);
    if (isnull)
        PG_RETURN_NULL();
    PG_RETURN_DATUM(key);
}
