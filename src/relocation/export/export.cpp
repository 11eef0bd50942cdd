// outbox.export_organizations(root_ids) and outbox.export_users(user_ids):
// the rows of every table of the scope that belong to those roots, as
// Sentry's export has them ({"model", "pk", "fields"}), parents before the
// rows that refer to them, then a manifest row.
//
// * One snapshot: every read is a read-only SPI statement, which runs in
//   the snapshot of the caller's statement (no statement here takes a new
//   one), so the export is as of one moment, as pg_dump's is, and holds
//   that snapshot only while it runs.
// * Belonging: a row belongs when a path of references (one-column foreign
//   keys to a primary key, registered cross-silo references to a table
//   here) through tables of the scope leads to one of the roots.  Found
//   breadth first from the roots, one query per reference and chunk of
//   ids; a table with a scope_function only lets through its rows whose
//   function says the scope.
// * Each read runs as the table's owner, restricted (pg/run_as.hpp), for
//   the caller's statement: its statement_timeout bounds it.
// * The manifest: counts per table, the order, each table's columns and
//   their types, the columns an import sets in a later step (cycles), the
//   cross-silo values (the users to export from control), and a SHA-256 over the rows, each as the
//   line
//   "<ordinal>\t<model>\t<pk>\t<fields>\n" (docs/relocation.md gives the SQL
//   that recomputes it), so that a dropped or edited row is found.
//
// Written without C++ objects that own resources: errors unwind through it
// freely.
#include "pg/guard.hpp"
#include "pg/hash.hpp"
#include "relocation/export/belonging.hpp"

extern "C" {
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "utils/json.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

using namespace pgoutbox;
using namespace pgoutbox::relocation;

namespace {

// Bigger exports go in several calls (and a relocation in several steps).
constexpr int max_roots = 10000;
// No table key can be this: schema names starting with pg_ are reserved.
constexpr const char *manifest_model = "pg_outbox.manifest";

void append_ids(StringInfo out, const int64 *ids, long count) {
    appendStringInfoChar(out, '[');
    for (long i = 0; i < count; i++)
        appendStringInfo(out, "%s" INT64_FORMAT, i > 0 ? ", " : "", ids[i]);
    appendStringInfoChar(out, ']');
}

void check_hash(int result, pg_cryptohash_ctx *hash) {
    if (result < 0)
        ereport(ERROR,
                (errcode(ERRCODE_INTERNAL_ERROR),
                 errmsg("could not compute the export's checksum: %s", pg_cryptohash_error(hash))));
}

// One row's line of the checksum; pk nullptr for NULL (an empty field).
void hash_line(pg_cryptohash_ctx *hash, StringInfo line, int64 ordinal, const char *model,
               const int64 *pk, const char *fields, int fields_length) {
    resetStringInfo(line);
    appendStringInfo(line, INT64_FORMAT "\t%s\t", ordinal, model);
    if (pk != nullptr)
        appendStringInfo(line, INT64_FORMAT, *pk);
    appendStringInfoChar(line, '\t');
    appendBinaryStringInfo(line, fields, fields_length);
    appendStringInfoChar(line, '\n');
    check_hash(pg_cryptohash_update(hash, (const uint8 *)line->data, line->len), hash);
}

void append_digest(StringInfo out, pg_cryptohash_ctx *hash) {
    uint8 digest[PG_SHA256_DIGEST_LENGTH];
    check_hash(pg_cryptohash_final(hash, digest, sizeof digest), hash);
    pg_cryptohash_free(hash);
    for (uint8 byte : digest)
        appendStringInfo(out, "%02x", byte);
}

Datum export_scope(FunctionCallInfo fcinfo, int scope, const char *argument) {
    if (PG_ARGISNULL(0))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be NULL", argument)));
    ArrayType *array = PG_GETARG_ARRAYTYPE_P(0);
    if (ARR_NDIM(array) > 1)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("%s must be a one-dimensional array", argument)));
    Datum *elements;
    bool *element_nulls;
    int root_count;
    deconstruct_array(array, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elements,
                      &element_nulls, &root_count);
    if (root_count == 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("%s is empty: name at least one id", argument)));
    if (root_count > max_roots)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("%s has %d ids; one export takes at most %d", argument, root_count,
                               max_roots),
                        errhint("Export them in several calls.")));
    int64 *roots = (int64 *)palloc(sizeof(int64) * root_count);
    for (int i = 0; i < root_count; i++) {
        if (element_nulls[i])
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s[%d] is NULL", argument, i + 1)));
        roots[i] = DatumGetInt64(elements[i]);
    }
    pg::sort_ids(roots, root_count);
    for (int i = 1; i < root_count; i++)
        if (roots[i] == roots[i - 1])
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("%s names " INT64_FORMAT " twice", argument, roots[i])));

    Belonging b;
    find_belonging(scope, argument, roots, root_count, &b);
    Models *models = b.models;
    int n = models->count;
    bool *member = b.member;
    int *order = b.order;
    int order_count = b.order_count;
    bool *deferred = b.deferred;
    Relation *rels = b.rels;
    Ids *ids = b.ids;
    const Model *root_table = &models->tables[b.root];

    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
    MemoryContext context = CurrentMemoryContext;

    // The cross-silo values kept as values: one set per parent table key.
    HTAB **cross_silo = (HTAB **)palloc0(sizeof(HTAB *) * (models->reference_count + 1));
    for (int r = 0; r < models->reference_count; r++) {
        const Reference *ref = &models->references[r];
        if (!ref->cross_silo || !member[ref->child] || (ref->parent >= 0 && member[ref->parent]))
            continue;
        int first = r;
        for (int s = 0; s < r; s++)
            if (cross_silo[s] != nullptr &&
                strcmp(models->references[s].parent_key, ref->parent_key) == 0)
                first = s;
        cross_silo[r] = first == r ? pg::blob_hash("pg_outbox export cross-silo values", 256,
                                                   sizeof(int64), sizeof(int64), context)
                                   : cross_silo[first];
    }

    pg_cryptohash_ctx *hash = pg_cryptohash_create(PG_SHA256);
    check_hash(pg_cryptohash_init(hash), hash);
    int64 ordinal = 0;
    long *counts = (long *)palloc0(sizeof(long) * (n + 1));
    StringInfoData line;
    initStringInfo(&line);
    for (int o = 0; o < order_count; o++) {
        int i = order[o];
        const Model *t = &models->tables[i];
        long count;
        int64 *all = sorted_ids(&ids[i], &count);
        counts[i] = count;
        const char *pk = quote_identifier(t->pk);
        read_chunks(
            rels[i], "reading the rows of the export",
            psprintf("SELECT s.pk, s.fields, s.fields::text FROM (SELECT t.%s::bigint AS pk, "
                     "to_jsonb(t) - %s AS fields FROM %s%s t WHERE ",
                     pk, quote_literal_cstr(t->pk), t->relkind == 'r' ? "ONLY " : "", t->qualified),
            psprintf("t.%s", pk), ") s ORDER BY s.pk", all, count, [&](uint64 rows) {
                TupleDesc desc = SPI_tuptable->tupdesc;
                for (uint64 r = 0; r < rows; r++) {
                    HeapTuple row = SPI_tuptable->vals[r];
                    bool isnull;
                    int64 id = int8_column(row, desc, 1);
                    ordinal++;
                    Datum values[4] = {Int64GetDatum(ordinal), CStringGetTextDatum(t->key),
                                       Int64GetDatum(id), SPI_getbinval(row, desc, 2, &isnull)};
                    bool nulls[4] = {false, false, false, false};
                    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
                    const char *fields = SPI_getvalue(row, desc, 3);
                    hash_line(hash, &line, ordinal, t->key, &id, fields, (int)strlen(fields));
                }
            });
        for (int r = 0; r < models->reference_count; r++) {
            const Reference *ref = &models->references[r];
            if (cross_silo[r] == nullptr || ref->child != i)
                continue;
            HTAB *values = cross_silo[r];
            read_chunks(rels[i], "reading the export's cross-silo values",
                        psprintf("SELECT DISTINCT t.%s::bigint FROM %s%s t WHERE ",
                                 quote_identifier(ref->column), t->relkind == 'r' ? "ONLY " : "",
                                 t->qualified),
                        psprintf("t.%s", pk),
                        psprintf(" AND t.%s IS NOT NULL", quote_identifier(ref->column)), all,
                        count, [&](uint64 rows) {
                            for (uint64 v = 0; v < rows; v++) {
                                int64 value =
                                    int8_column(SPI_tuptable->vals[v], SPI_tuptable->tupdesc, 1);
                                (void)hash_search(values, &value, HASH_ENTER, nullptr);
                            }
                        });
        }
    }
    StringInfoData m;
    initStringInfo(&m);
    appendStringInfoString(&m, "{\"format\": \"pg_outbox export 1\", \"scope\": ");
    escape_json(&m, scope_name(scope));
    appendStringInfoString(&m, ", \"root\": ");
    escape_json(&m, root_table->key);
    appendStringInfoString(&m, ", \"roots\": ");
    append_ids(&m, roots, root_count);
    appendStringInfo(&m, ", \"system_identifier\": \"" UINT64_FORMAT "\", \"database\": ",
                     GetSystemIdentifier());
    escape_json(&m, get_database_name(MyDatabaseId));
    appendStringInfoString(&m, ", \"exported_at\": ");
    escape_json(&m, timestamptz_to_str(GetCurrentStatementStartTimestamp()));
    appendStringInfoString(&m, ", \"order\": [");
    for (int o = 0; o < order_count; o++) {
        appendStringInfoString(&m, o > 0 ? ", " : "");
        escape_json(&m, models->tables[order[o]].key);
    }
    appendStringInfoString(&m, "], \"tables\": {");
    for (int o = 0; o < order_count; o++) {
        appendStringInfoString(&m, o > 0 ? ", " : "");
        escape_json(&m, models->tables[order[o]].key);
        appendStringInfo(&m, ": %ld", counts[order[o]]);
    }
    // Each table's columns and their types, which an import checks its own
    // against before writing anything.
    Datum *keys = (Datum *)palloc(sizeof(Datum) * (order_count + 1));
    Datum *relids = (Datum *)palloc(sizeof(Datum) * (order_count + 1));
    for (int o = 0; o < order_count; o++) {
        keys[o] = CStringGetTextDatum(models->tables[order[o]].key);
        relids[o] = ObjectIdGetDatum(models->tables[order[o]].relid);
    }
    Oid column_types[2] = {TEXTARRAYOID, OIDARRAYOID};
    Datum column_args[2] = {
        PointerGetDatum(construct_array(keys, order_count, TEXTOID, -1, false, TYPALIGN_INT)),
        PointerGetDatum(
            construct_array(relids, order_count, OIDOID, sizeof(Oid), true, TYPALIGN_INT))};
    char *columns = nullptr;
    pg::spi_run_as(
        pg::extension_owner_role, "reading the export's columns",
        "SELECT coalesce(jsonb_object_agg(k.key, (SELECT jsonb_object_agg(a.attname, "
        "format_type(a.atttypid, a.atttypmod)) FROM pg_attribute a WHERE a.attrelid = k.relid "
        "AND a.attnum > 0 AND NOT a.attisdropped)), '{}')::text "
        "FROM unnest($1::text[], $2::oid[]) k(key, relid)",
        2, column_types, column_args, nullptr, true, 0, SPI_OK_SELECT, [&](uint64) {
            MemoryContext spi = MemoryContextSwitchTo(context);
            columns = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
            MemoryContextSwitchTo(spi);
        });
    appendStringInfo(&m, "}, \"columns\": %s", columns);
    // The columns of a cycle, NULL at first in an import, set afterwards.
    appendStringInfoString(&m, ", \"deferred\": {");
    bool first_table = true;
    for (int o = 0; o < order_count; o++) {
        bool first_column = true;
        for (int e = 0; e < models->edge_count; e++) {
            if (!deferred[e] || models->edges[e].child != order[o])
                continue;
            if (first_column) {
                appendStringInfoString(&m, first_table ? "" : "], ");
                escape_json(&m, models->tables[order[o]].key);
                appendStringInfoString(&m, ": [");
                first_table = false;
            } else {
                appendStringInfoString(&m, ", ");
            }
            escape_json(&m, models->references[models->edge_reference[e]].column);
            first_column = false;
        }
    }
    appendStringInfoString(&m, first_table ? "}" : "]}");
    appendStringInfoString(&m, ", \"cross_silo\": {");
    bool first_key = true;
    for (int r = 0; r < models->reference_count; r++) {
        bool first_of_key = cross_silo[r] != nullptr;
        for (int s = 0; s < r && first_of_key; s++)
            first_of_key = cross_silo[s] != cross_silo[r];
        if (!first_of_key)
            continue;
        appendStringInfoString(&m, first_key ? "" : ", ");
        escape_json(&m, models->references[r].parent_key);
        appendStringInfoString(&m, ": ");
        long count = hash_get_num_entries(cross_silo[r]);
        int64 *all = (int64 *)palloc(sizeof(int64) * (count + 1));
        HASH_SEQ_STATUS scan;
        hash_seq_init(&scan, cross_silo[r]);
        long got = 0;
        for (int64 *value; (value = (int64 *)hash_seq_search(&scan)) != nullptr;)
            all[got++] = *value;
        pg::sort_ids(all, got);
        append_ids(&m, all, got);
        first_key = false;
    }
    appendStringInfo(&m, "}, \"rows\": " INT64_FORMAT ", \"checksum\": \"", ordinal);
    append_digest(&m, hash);
    appendStringInfoString(&m, "\"}");

    Datum values[4] = {Int64GetDatum(ordinal + 1), CStringGetTextDatum(manifest_model), (Datum)0,
                       DirectFunctionCall1(jsonb_in, CStringGetDatum(m.data))};
    bool nulls[4] = {false, false, true, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    for (int i = 0; i < n; i++)
        if (rels[i] != nullptr)
            table_close(rels[i], NoLock);
    return (Datum)0;
}

} // namespace

// outbox._relocation_checksum(relocation): the checksum of the export staged
// in outbox.relocation_rows, as its manifest's was computed, for the
// import's check.  Streamed: SQL's string_agg of the lines took 176 ms of an
// import of 98,101 rows and cannot hold an export of more than 1 GB.
OUTBOX_FUNCTION(outbox__relocation_checksum) {
    Oid types[1] = {UUIDOID};
    Datum args[1] = {PG_GETARG_DATUM(0)};
    pg_cryptohash_ctx *hash = pg_cryptohash_create(PG_SHA256);
    check_hash(pg_cryptohash_init(hash), hash);
    StringInfoData line;
    initStringInfo(&line);
    // What a row allocates (its model as a C string) is freed with it: an
    // export may hold millions of rows.
    struct Hashing {
        pg_cryptohash_ctx *hash;
        StringInfo line;
        MemoryContext row;
    } hashing = {hash, &line,
                 AllocSetContextCreate(CurrentMemoryContext, "pg_outbox checksum row",
                                       ALLOCSET_SMALL_SIZES)};
    SPI_connect();
    pg::spi_each(
        "computing the staged export's checksum",
        "SELECT s.ordinal, s.model, s.pk, s.fields::pg_catalog.text FROM outbox.relocation_rows s"
        " WHERE s.relocation OPERATOR(pg_catalog.=) $1"
        " AND s.model OPERATOR(pg_catalog.<>) 'pg_outbox.manifest' ORDER BY s.ordinal",
        1, types, args,
        [](TupleTableSlot *slot, void *arg) {
            auto *h = static_cast<Hashing *>(arg);
            MemoryContext executor = MemoryContextSwitchTo(h->row);
            slot_getallattrs(slot);
            text *fields = DatumGetTextPP(slot->tts_values[3]);
            int64 pk = DatumGetInt64(slot->tts_values[2]);
            hash_line(h->hash, h->line, DatumGetInt64(slot->tts_values[0]),
                      TextDatumGetCString(slot->tts_values[1]), slot->tts_isnull[2] ? nullptr : &pk,
                      VARDATA_ANY(fields), (int)VARSIZE_ANY_EXHDR(fields));
            MemoryContextSwitchTo(executor);
            MemoryContextReset(h->row);
        },
        &hashing);
    SPI_finish();
    StringInfoData hex;
    initStringInfo(&hex);
    append_digest(&hex, hash);
    PG_RETURN_TEXT_P(cstring_to_text(hex.data));
}

OUTBOX_FUNCTION(outbox_export_organizations) {
    return export_scope(fcinfo, Organization, "root_ids");
}

OUTBOX_FUNCTION(outbox_export_users) {
    return export_scope(fcinfo, User, "user_ids");
}
