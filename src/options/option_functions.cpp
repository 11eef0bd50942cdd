// SQL-callable checks behind the options and registry functions (the
// functions themselves are SQL in extension/functions/).
#include "pg/guard.hpp"

#include "options/option_key.hpp"

using namespace pgoutbox;

static std::string text_argument(FunctionCallInfo fcinfo, int n, const char *name) {
    if (PG_ARGISNULL(n))
        throw pg::SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, std::string(name) + " must not be NULL");
    text *value = PG_GETARG_TEXT_PP(n);
    return std::string(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
}

// outbox._option_kind(key text) RETURNS text: 'replication_version' or
// 'target_cells'; ERROR for anything that is not an option key.
OUTBOX_FUNCTION(outbox__option_kind) {
    std::string key = text_argument(fcinfo, 0, "key");
    std::optional<OptionKey> parsed = parse_option_key(key);
    if (!parsed)
        throw pg::SqlError(
            ERRCODE_INVALID_PARAMETER_VALUE, "key \"" + key + "\" is not a pg_outbox option",
            "Options are outbox_replication.<table_key>.replication_version and "
            "outbox_replication.<table_key>.backfill.target_cells, where <table_key> matches "
            "[a-z_][a-z0-9_]* (at most 63 bytes).");
    const char *kind = option_kind_name(parsed->kind);
    return pg::pg_call([kind] { return CStringGetTextDatum(kind); });
}

// outbox._valid_table_key(table_key text) RETURNS boolean
OUTBOX_FUNCTION(outbox__valid_table_key) {
    std::string key = text_argument(fcinfo, 0, "table_key");
    PG_RETURN_BOOL(valid_table_key(key));
}
