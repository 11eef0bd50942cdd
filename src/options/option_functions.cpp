// The options and the version gate (SPEC section 2): outbox.set_option,
// get_option, unset_option, find_replication_version and target_cells, and
// the key checks behind them.  An option's value is the GUC of the same name
// when set (postgresql.conf, ALTER SYSTEM/DATABASE/ROLE or SET), else the
// row of outbox.options, else the default (0 for a gate, none for target
// cells).  outbox.options is read and written as the extension's owner.
//
// Keys are parsed in C++ (option_key.hpp) in frames that end before any
// PostgreSQL call that can raise an ERROR; the rest holds no C++ object with
// a destructor, so an ERROR unwinds through it freely.
#include "pg/compat.hpp"
#include "pg/guard.hpp"

#include "options/option_key.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "utils/numeric.h"
}

using namespace pgoutbox;

namespace {

void require(FunctionCallInfo fcinfo, int arg, const char *name) {
    if (PG_ARGISNULL(arg))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be NULL", name)));
}

// The kind of the option named key; false when key is none.
bool parse_kind(const char *key, OptionKind *kind) {
    std::optional<OptionKey> parsed = parse_option_key(key);
    if (parsed)
        *kind = parsed->kind;
    return parsed.has_value();
}

// Argument arg, which must be an option key; its kind in *kind.
char *option_key_argument(FunctionCallInfo fcinfo, int arg, OptionKind *kind) {
    require(fcinfo, arg, "key");
    char *key = text_to_cstring(PG_GETARG_TEXT_PP(arg));
    if (!parse_kind(key, kind))
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("key \"%s\" is not a pg_outbox option", key),
                 errhint("Options are outbox_replication.<table_key>.replication_version and "
                         "outbox_replication.<table_key>.backfill.target_cells, where "
                         "<table_key> matches [a-z_][a-z0-9_]* (at most 63 bytes).")));
    return key;
}

bool integral_version(Jsonb *value) {
    JsonbValue scalar;
    if (!JB_ROOT_IS_SCALAR(value) || !JsonbExtractScalar(&value->root, &scalar) ||
        scalar.type != jbvNumeric)
        return false;
    Datum number = NumericGetDatum(scalar.val.numeric);
    Datum truncated = DirectFunctionCall2(numeric_trunc, number, Int32GetDatum(0));
    if (!DatumGetBool(DirectFunctionCall2(numeric_eq, number, truncated)))
        return false;
    bool out_of_range = false;
    int32 version = numeric_int4_opt_error(scalar.val.numeric, &out_of_range);
    return !out_of_range && version >= 0;
}

bool cell_list(Jsonb *value) {
    JsonbValue scalar;
    if (JB_ROOT_IS_SCALAR(value))
        return JsonbExtractScalar(&value->root, &scalar) && scalar.type == jbvNull;
    if (!JB_ROOT_IS_ARRAY(value))
        return false;
    JsonbIterator *it = JsonbIteratorInit(&value->root);
    JsonbValue item;
    JsonbIteratorToken token;
    while ((token = JsonbIteratorNext(&it, &item, true)) != WJB_DONE)
        if (token == WJB_ELEM && item.type != jbvString)
            return false;
    return true;
}

// source names where value came from ("value": an argument, "setting": a GUC).
void check_value(OptionKind kind, const char *key, Jsonb *value, const char *source) {
    if (kind == OptionKind::ReplicationVersion ? integral_version(value) : cell_list(value))
        return;
    char *shown = JsonbToCString(nullptr, &value->root, VARSIZE(value));
    if (kind == OptionKind::ReplicationVersion)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("%s for %s must be an integer from 0 to 2147483647, not %s", source,
                               key, shown)));
    ereport(ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
             errmsg("%s for %s must be a JSON array of cell names, not %s", source, key, shown)));
}

// The option's value, or nullptr for none (target cells unset).
Jsonb *option_value(const char *key, OptionKind kind) {
    char *setting = GetConfigOptionByName(key, nullptr, true);
    // A placeholder GUC that was SET and then RESET reads as ''.
    if (setting != nullptr && setting[0] != '\0') {
        JsonLexContext *lex = pg::json_lexer(setting, (int)strlen(setting));
        if (pg_parse_json(lex, &nullSemAction) != JSON_SUCCESS)
            ereport(ERROR,
                    (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                     errmsg("setting %s = %s is not JSON", key, quote_literal_cstr(setting))));
        Jsonb *value = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(setting)));
        check_value(kind, key, value, "setting");
        return value;
    }
    Jsonb *stored = nullptr;
    MemoryContext caller = CurrentMemoryContext;
    Oid types[1] = {TEXTOID};
    Datum args[1] = {CStringGetTextDatum(key)};
    pg::spi_run_as(pg::extension_owner_role, "reading an option",
                   "SELECT o.value FROM outbox.options o WHERE o.key = $1", 1, types, args, nullptr,
                   true, 1, SPI_OK_SELECT, [&](uint64 rows) {
                       if (rows == 0)
                           return;
                       bool isnull;
                       Datum value =
                           SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
                       MemoryContext old = MemoryContextSwitchTo(caller);
                       stored = isnull ? nullptr : DatumGetJsonbPCopy(value);
                       MemoryContextSwitchTo(old);
                   });
    if (stored != nullptr)
        return stored;
    if (kind == OptionKind::ReplicationVersion)
        return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("0")));
    return nullptr;
}

// The registration of tbl (argument 0): its table_key and coded
// replication_version.  outbox._registered raises the errors: NULL, unknown.
char *registered(FunctionCallInfo fcinfo, int32 *coded_version) {
    char *table_key = nullptr;
    MemoryContext caller = CurrentMemoryContext;
    Oid types[1] = {REGCLASSOID};
    Datum args[1] = {PG_GETARG_DATUM(0)};
    char nulls[2] = {PG_ARGISNULL(0) ? 'n' : ' ', '\0'};
    pg::spi_run_as(pg::extension_owner_role, "reading the registration",
                   "SELECT r.table_key, r.replication_version FROM outbox._registered($1) r", 1,
                   types, args, nulls, true, 1, SPI_OK_SELECT, [&](uint64) {
                       bool isnull;
                       HeapTuple row = SPI_tuptable->vals[0];
                       *coded_version =
                           DatumGetInt32(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
                       table_key =
                           MemoryContextStrdup(caller, SPI_getvalue(row, SPI_tuptable->tupdesc, 1));
                   });
    return table_key;
}

} // namespace

// outbox._option_kind(key text) RETURNS text: 'replication_version' or
// 'target_cells'; ERROR for anything that is not an option key.
OUTBOX_FUNCTION(outbox__option_kind) {
    OptionKind kind;
    (void)option_key_argument(fcinfo, 0, &kind);
    PG_RETURN_TEXT_P(cstring_to_text(option_kind_name(kind)));
}

// outbox._valid_table_key(table_key text) RETURNS boolean
OUTBOX_FUNCTION(outbox__valid_table_key) {
    require(fcinfo, 0, "table_key");
    char *key = text_to_cstring(PG_GETARG_TEXT_PP(0));
    PG_RETURN_BOOL(valid_table_key(key));
}

OUTBOX_FUNCTION(outbox_get_option) {
    OptionKind kind;
    char *key = option_key_argument(fcinfo, 0, &kind);
    Jsonb *value = option_value(key, kind);
    if (value == nullptr)
        PG_RETURN_NULL();
    PG_RETURN_JSONB_P(value);
}

OUTBOX_FUNCTION(outbox_set_option) {
    require(fcinfo, 1, "value");
    OptionKind kind;
    char *key = option_key_argument(fcinfo, 0, &kind);
    Jsonb *value = PG_GETARG_JSONB_P(1);
    check_value(kind, key, value, "value");
    Oid types[2] = {TEXTOID, JSONBOID};
    Datum args[2] = {CStringGetTextDatum(key), JsonbPGetDatum(value)};
    pg::spi_run_as(pg::extension_owner_role, "writing an option",
                   "INSERT INTO outbox.options AS o (key, value) VALUES ($1, $2)"
                   " ON CONFLICT ON CONSTRAINT options_pkey DO UPDATE SET value = excluded.value",
                   2, types, args, nullptr, false, 0, SPI_OK_INSERT);
    PG_RETURN_VOID();
}

OUTBOX_FUNCTION(outbox_unset_option) {
    OptionKind kind;
    char *key = option_key_argument(fcinfo, 0, &kind);
    Oid types[1] = {TEXTOID};
    Datum args[1] = {CStringGetTextDatum(key)};
    pg::spi_run_as(pg::extension_owner_role, "removing an option",
                   "DELETE FROM outbox.options o WHERE o.key = $1", 1, types, args, nullptr, false,
                   0, SPI_OK_DELETE);
    PG_RETURN_VOID();
}

// outbox.find_replication_version(tbl, force_synchronous): min(gate option,
// coded version); the coded version when force_synchronous.
OUTBOX_FUNCTION(outbox_find_replication_version) {
    int32 coded;
    char *table_key = registered(fcinfo, &coded);
    require(fcinfo, 1, "force_synchronous");
    if (PG_GETARG_BOOL(1))
        PG_RETURN_INT32(coded);
    char *key = psprintf("outbox_replication.%s.replication_version", table_key);
    Jsonb *gate = option_value(key, OptionKind::ReplicationVersion);
    JsonbValue scalar;
    (void)JsonbExtractScalar(&gate->root, &scalar);
    bool unused = false;
    PG_RETURN_INT32(Min(numeric_int4_opt_error(scalar.val.numeric, &unused), coded));
}

// outbox.target_cells(tbl): the cells a backfill of tbl writes to: the
// registered cells, or those of them that
// outbox_replication.<table_key>.backfill.target_cells lists (a listed cell
// that is not registered gets nothing).  The one resolver:
// process_backfill_batch reads it too.
OUTBOX_FUNCTION(outbox_target_cells) {
    int32 coded;
    char *table_key = registered(fcinfo, &coded);
    char *key = psprintf("outbox_replication.%s.backfill.target_cells", table_key);
    Jsonb *cells = option_value(key, OptionKind::TargetCells);
    Datum result = (Datum)0;
    MemoryContext caller = CurrentMemoryContext;
    Oid types[1] = {JSONBOID};
    Datum args[1] = {cells != nullptr ? JsonbPGetDatum(cells) : (Datum)0};
    char nulls[2] = {cells != nullptr ? ' ' : 'n', '\0'};
    pg::spi_run_as(pg::extension_owner_role, "reading the target cells",
                   "SELECT ARRAY(SELECT c.name FROM outbox.cells c"
                   " WHERE $1 IS NULL OR pg_catalog.jsonb_typeof($1) OPERATOR(pg_catalog.=) 'null'"
                   " OR c.name OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT"
                   " pg_catalog.jsonb_array_elements_text($1)))"
                   " ORDER BY c.name)",
                   1, types, args, nulls, true, 1, SPI_OK_SELECT, [&](uint64) {
                       bool isnull;
                       Datum value =
                           SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
                       MemoryContext old = MemoryContextSwitchTo(caller);
                       result = PointerGetDatum(DatumGetArrayTypePCopy(value));
                       MemoryContextSwitchTo(old);
                   });
    PG_RETURN_DATUM(result);
}
