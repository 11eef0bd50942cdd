// outbox._relocation_statement(kind, tbl, pk, columns, key_column, hook):
// the statement of table_statements.hpp on table tbl, its names quoted here
// with quote_identifier (the table's and the hook's with their schema's),
// and nowhere else.
//
// The arguments are read and quoted before the statement is built, and
// its text is copied out without a PostgreSQL error: none unwinds through
// the frames that own the strings.
#include "pg/guard.hpp"
#include "relocation/import/table_statements.hpp"

extern "C" {
#include "catalog/pg_type_d.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
}

using namespace pgoutbox;
using namespace pgoutbox::relocation;

namespace {

struct Arguments {
    TableStatement kind;
    const char *kind_name;
    const char *table;
    const char *pk;
    const char **columns;
    int column_count;
    const char *key_column; // "" for none
    const char *hook;       // "" for none
};

const char *quoted_name(FunctionCallInfo fcinfo, int arg) {
    return quote_identifier(NameStr(*PG_GETARG_NAME(arg)));
}

// An object's name in its schema, quoted; an ERROR naming the argument when
// the object (oid) does not exist (name NULL).
const char *qualified(const char *argument, const char *object, Oid oid, const char *name,
                      Oid schema, int sqlstate) {
    if (name == nullptr)
        ereport(ERROR, (errcode(sqlstate),
                        errmsg("%s: %s with OID %u does not exist", argument, object, oid)));
    return quote_qualified_identifier(get_namespace_name(schema), name);
}

Arguments read_arguments(FunctionCallInfo fcinfo) {
    const char *names[] = {"kind", "tbl", "pk", "columns"};
    for (int a = 0; a < 4; a++)
        if (PG_ARGISNULL(a))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s must not be NULL", names[a])));
    Arguments args;
    args.kind_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
    if (!parse_table_statement(args.kind_name, &args.kind))
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("kind: no statement of kind %s", quote_literal_cstr(args.kind_name))));
    Oid relid = PG_GETARG_OID(1);
    args.table = qualified("tbl", "relation", relid, get_rel_name(relid), get_rel_namespace(relid),
                           ERRCODE_UNDEFINED_TABLE);
    args.pk = quoted_name(fcinfo, 2);
    ArrayType *columns = PG_GETARG_ARRAYTYPE_P(3);
    if (ARR_NDIM(columns) > 1)
        ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                        errmsg("columns must be a one-dimensional array")));
    Datum *values;
    bool *nulls;
    deconstruct_array(columns, NAMEOID, NAMEDATALEN, false, TYPALIGN_CHAR, &values, &nulls,
                      &args.column_count);
    args.columns = (const char **)palloc(sizeof(char *) * Max(args.column_count, 1));
    for (int i = 0; i < args.column_count; i++) {
        if (nulls[i])
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("columns must not hold NULL")));
        args.columns[i] = quote_identifier(NameStr(*DatumGetName(values[i])));
    }
    args.key_column = PG_ARGISNULL(4) ? "" : quoted_name(fcinfo, 4);
    Oid hook = PG_ARGISNULL(5) ? InvalidOid : PG_GETARG_OID(5);
    args.hook = PG_ARGISNULL(5) ? ""
                                : qualified("hook", "function", hook, get_func_name(hook),
                                            get_func_namespace(hook), ERRCODE_UNDEFINED_FUNCTION);
    return args;
}

// The statement as text, or NULL when the request lacks what its kind
// needs (std::bad_alloc when memory runs out).
text *statement_text(const Arguments &args) {
    TableStatementRequest request;
    request.kind = args.kind;
    request.table = args.table;
    request.pk = args.pk;
    for (int i = 0; i < args.column_count; i++)
        request.columns.emplace_back(args.columns[i]);
    request.key_column = args.key_column;
    request.hook = args.hook;
    std::string statement = table_statement(request);
    return statement.empty() ? nullptr : pg::text_of(statement);
}

} // namespace

OUTBOX_FUNCTION(outbox__relocation_statement) {
    Arguments args = read_arguments(fcinfo);
    text *statement = statement_text(args);
    if (statement == nullptr)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("kind %s needs %s", args.kind_name,
                               args.kind == TableStatement::CallHook ? "hook"
                               : args.kind == TableStatement::KeysWhere ||
                                       args.kind == TableStatement::ValuesOfKeys
                                   ? "key_column"
                                   : "columns")));
    PG_RETURN_TEXT_P(statement);
}
