// outbox._relocation_rows_statement(relocation, users_relocation, model, pk,
// columns, parents, users, deferred, purpose): the statement of
// rows_statement.hpp for purpose (insert, deferred or compare), for
// outbox._relocation_rows_sql, which passes a plan entry's references as four
// arrays of one element each.
//
// The arguments are read into the request before it is built, and the
// text is copied out with an allocation that cannot raise an ERROR: no
// PostgreSQL error unwinds through the frames that own the strings.
#include "pg/guard.hpp"
#include "relocation/import/rows_statement.hpp"

extern "C" {
#include "catalog/pg_type_d.h"
#include "utils/array.h"
#include "utils/builtins.h"
}

using namespace pgoutbox;
using namespace pgoutbox::relocation;

namespace {

const char *const argument_names[] = {"relocation", "users_relocation", "model",
                                      "pk",         "columns",          "parents",
                                      "users",      "deferred",         "purpose"};

struct Elements {
    Datum *values;
    bool *nulls;
    int count;
};

Elements elements(FunctionCallInfo fcinfo, int arg, Oid type) {
    Elements result;
    ArrayType *array = PG_GETARG_ARRAYTYPE_P(arg);
    if (ARR_NDIM(array) > 1)
        ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                        errmsg("%s must be a one-dimensional array", argument_names[arg])));
    deconstruct_array(array, type, type == TEXTOID ? -1 : 1, type != TEXTOID,
                      type == TEXTOID ? TYPALIGN_INT : TYPALIGN_CHAR, &result.values, &result.nulls,
                      &result.count);
    for (int i = 0; i < result.count; i++)
        if (result.nulls[i])
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s must not hold NULL", argument_names[arg])));
    return result;
}

// Plain C strings and flags: nothing here owns memory outside palloc.
struct Arguments {
    const char *text[4]; // relocation, users_relocation ("" for none), model, pk
    int references;
    const char **columns, **parents;
    Elements users, deferred;
    RowsPurpose purpose;
};

Arguments read_arguments(FunctionCallInfo fcinfo) {
    for (int a = 0; a < 9; a++)
        if (a != 1 && PG_ARGISNULL(a))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s must not be NULL", argument_names[a])));
    Arguments args;
    for (int a = 0; a < 4; a++)
        args.text[a] = PG_ARGISNULL(a) ? "" : text_to_cstring(PG_GETARG_TEXT_PP(a));
    Elements columns = elements(fcinfo, 4, TEXTOID);
    Elements parents = elements(fcinfo, 5, TEXTOID);
    args.users = elements(fcinfo, 6, BOOLOID);
    args.deferred = elements(fcinfo, 7, BOOLOID);
    int n = columns.count;
    if (parents.count != n || args.users.count != n || args.deferred.count != n)
        ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                        errmsg("columns, parents, users and deferred must have one element per "
                               "reference")));
    args.references = n;
    args.columns = (const char **)palloc(sizeof(char *) * Max(n, 1));
    args.parents = (const char **)palloc(sizeof(char *) * Max(n, 1));
    for (int i = 0; i < n; i++) {
        args.columns[i] = TextDatumGetCString(columns.values[i]);
        args.parents[i] = TextDatumGetCString(parents.values[i]);
    }
    const char *purpose = text_to_cstring(PG_GETARG_TEXT_PP(8));
    if (!parse_rows_purpose(purpose, &args.purpose))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("purpose: no statement for %s (insert, deferred or compare)",
                               quote_literal_cstr(purpose))));
    return args;
}

// The statement as text (std::bad_alloc when memory runs out).
text *statement_text(const Arguments &args) {
    RowsStatementRequest request;
    request.relocation = args.text[0];
    request.users_relocation = args.text[1];
    request.model = args.text[2];
    request.pk = args.text[3];
    for (int i = 0; i < args.references; i++) {
        RowsReference ref;
        ref.column = args.columns[i];
        ref.parent = args.parents[i];
        ref.users = DatumGetBool(args.users.values[i]);
        ref.deferred = DatumGetBool(args.deferred.values[i]);
        request.references.push_back(ref);
    }
    return pg::text_of(rows_purpose_statement(request, args.purpose));
}

} // namespace

OUTBOX_FUNCTION(outbox__relocation_rows_statement) {
    Arguments args = read_arguments(fcinfo);
    PG_RETURN_TEXT_P(statement_text(args));
}
