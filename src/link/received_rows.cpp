// outbox._insert_received(): the messages of a batch that outbox.receive()
// took, checked and written into this side's outbox as capture writes its
// rows (capture/outbox_writer.hpp: straight into the partitions, ids a
// block at a time), in the order they came.  One pass over the arrays:
// receive() in PL/pgSQL scanned them in eight statements and inserted
// through the executor (a name lookup, partition routing and a nextval a
// row), four fifths of the receiver's time in bench/cells.  receive()
// checks the sender and its session first, and on control the objects'
// cells after (an error there rolls these rows back).
// The extension owner's only: it writes the outbox without privilege
// checks (90_privileges.sql revokes it from PUBLIC).
#include "capture/outbox_writer.hpp"
#include "link/link.hpp"
#include "pg/guard.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
}

using namespace pgoutbox;

namespace {

struct Elements {
    Datum *values;
    bool *nulls;
};

// Arg's elements, which must be n (receive() checked the lengths; this is
// callable by the owner alone, but checks anyway); all NULL for a NULL arg.
Elements elements(FunctionCallInfo fcinfo, int arg, Oid type, int n) {
    Elements result;
    if (PG_ARGISNULL(arg)) {
        result.values = (Datum *)palloc0(sizeof(Datum) * Max(n, 1));
        result.nulls = (bool *)palloc(sizeof(bool) * Max(n, 1));
        memset(result.nulls, true, sizeof(bool) * Max(n, 1));
        return result;
    }
    int count;
    int16 length;
    bool by_value;
    char align;
    get_typlenbyvalalign(type, &length, &by_value, &align);
    deconstruct_array(PG_GETARG_ARRAYTYPE_P(arg), type, length, by_value, align, &result.values,
                      &result.nulls, &count);
    if (count != n)
        ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                        errmsg("the message arrays must all have one element per message")));
    return result;
}

bool equals(Datum value, const char *name) {
    const text *t = DatumGetTextPP(value);
    size_t length = VARSIZE_ANY_EXHDR(t);
    return strlen(name) == length && memcmp(VARDATA_ANY(t), name, length) == 0;
}

const char *literal(Datum value, bool isnull) {
    return isnull ? "NULL" : quote_literal_cstr(TextDatumGetCString(value));
}

// The id of a message's scope or category, by its name here (a batch names
// a few: the last one found is tried first).
int32 id_of(int n, const int32 *ids, const char **names, int *last, Datum name, bool isnull,
            const char *what) {
    for (int k = 0; !isnull && k < n; k++) {
        int i = (*last + k) % n;
        if (equals(name, names[i])) {
            *last = i;
            return ids[i];
        }
    }
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("%s %s is not registered here", what, literal(name, isnull))));
}

void not_null(bool isnull, const char *column, bool control) {
    if (isnull)
        ereport(ERROR, (errcode(ERRCODE_NOT_NULL_VIOLATION),
                        errmsg("null value in column \"%s\" of relation \"%s\" violates not-null "
                               "constraint",
                               column, control ? "control_outbox" : "cell_outbox")));
}

} // namespace

// (own_cell, control, shard_scopes, shard_identifiers, categories,
// object_identifiers, payloads, tombstones, present): the rows written, and
// how many messages have a tombstone and a present.  receive() has checked
// the messages' cells: control rows are own_cell's.
OUTBOX_FUNCTION(outbox__insert_received) {
    for (int a = 1; a < 7; a++)
        if (PG_ARGISNULL(a))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("outbox._insert_received: argument %d is NULL", a + 1)));
    bool control = PG_GETARG_BOOL(1);
    if (control && PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("outbox._insert_received: control rows need own_cell")));
    const char *own_cell = PG_ARGISNULL(0) ? nullptr : text_to_cstring(PG_GETARG_TEXT_PP(0));
    ArrayType *first = PG_GETARG_ARRAYTYPE_P(2);
    int n = ArrayGetNItems(ARR_NDIM(first), ARR_DIMS(first));
    Elements scopes = elements(fcinfo, 2, TEXTOID, n);
    Elements identifiers = elements(fcinfo, 3, INT8OID, n);
    Elements categories = elements(fcinfo, 4, TEXTOID, n);
    Elements objects = elements(fcinfo, 5, INT8OID, n);
    Elements payloads = elements(fcinfo, 6, JSONBOID, n);
    Elements gone = elements(fcinfo, 7, TEXTOID, n);
    Elements there = elements(fcinfo, 8, TEXTOID, n);

    // The checks first, so that a bad batch writes nothing before its error.
    int ngone = 0, nthere = 0;
    for (int m = 0; m < n; m++) {
        if (!gone.nulls[m] && !there.nulls[m])
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("a message's object cannot be both gone (tombstones) and there "
                                   "(present)")));
        ngone += gone.nulls[m] ? 0 : 1;
        nthere += there.nulls[m] ? 0 : 1;
    }
    static SPIPlanPtr categories_plan = nullptr, scopes_plan = nullptr;
    int32 *category_ids, *scope_ids;
    const char **category_names, **scope_names;
    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "pg_outbox: SPI_connect failed");
    int ncategories = link_read_names(CurrentMemoryContext, &categories_plan, "categories",
                                      &category_ids, &category_names);
    int nscopes =
        link_read_names(CurrentMemoryContext, &scopes_plan, "scopes", &scope_ids, &scope_names);
    auto *row_categories = (int32 *)palloc(sizeof(int32) * Max(n, 1));
    auto *row_scopes = (int32 *)palloc(sizeof(int32) * Max(n, 1));
    int last = 0;
    for (int m = 0; m < n; m++)
        row_categories[m] = id_of(ncategories, category_ids, category_names, &last,
                                  categories.values[m], categories.nulls[m], "category");
    last = 0;
    for (int m = 0; m < n; m++)
        row_scopes[m] = id_of(nscopes, scope_ids, scope_names, &last, scopes.values[m],
                              scopes.nulls[m], "scope");

    OutboxWriter *writer = outbox_writer_begin(registry_get(), false);
    for (int m = 0; m < n; m++) {
        OutboxRow row;
        row.shard_scope = row_scopes[m];
        not_null(identifiers.nulls[m], "shard_identifier", control);
        row.shard_identifier = DatumGetInt64(identifiers.values[m]);
        row.category = row_categories[m];
        not_null(objects.nulls[m], "object_identifier", control);
        row.object_identifier = DatumGetInt64(objects.values[m]);
        row.payload = payloads.nulls[m] ? (Datum)0 : payloads.values[m];
        row.cell_name = control ? own_cell : nullptr;
        outbox_writer_add(writer, control ? Silo::Control : Silo::Cell, &row);
    }
    int64 written = outbox_writer_finish(writer);
    SPI_finish();
    // Consumers of this side claim what came in as they do captured rows.
    if (written > 0)
        notify_consumers_at_commit();

    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "pg_outbox: _insert_received must return a composite");
    Datum values[3] = {Int64GetDatum(written), Int32GetDatum(ngone), Int32GetDatum(nthere)};
    bool nulls[3] = {false, false, false};
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
