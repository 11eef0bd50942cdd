#include "relocation/import/sql_text.hpp"
#include "relocation/import/table_statements.hpp"

#include <cstring>

namespace pgoutbox::relocation {

namespace {

const char *const kind_names[] = {"insert_rows",  "insert_new_rows", "upsert_rows", "update_rows",
                                  "clear_keys",   "delete_keys",     "count_keys",  "keys_where",
                                  "rows_of_keys", "values_of_keys",  "call_hook"};

// "prefix a<separator>prefix b ..."
std::string listed(const std::vector<std::string> &names, std::string_view prefix,
                   std::string_view separator = ", ", std::string_view suffix = "") {
    std::string out;
    for (size_t i = 0; i < names.size(); i++)
        add(out, {i == 0 ? "" : separator, prefix, names[i], suffix});
    return out;
}

// The rows of $1 whose column is one of the keys of $1.
std::string one_of_keys(const std::string &column) {
    return joined({"t.", column,
                   " = ANY (SELECT (j OPERATOR(pg_catalog.#>>) '{}')::bigint"
                   " FROM pg_catalog.unnest($1) j)"});
}

// The rows of $1 as records of the table, r.
std::string as_records(const std::string &table) {
    return joined({" FROM pg_catalog.unnest($1) j, pg_catalog.jsonb_populate_record(NULL::", table,
                   ", j) r"});
}

// statement's keys, as the jsonb rows of the outer SELECT.
std::string returning_keys(const std::string &statement, const std::string &pk) {
    return joined({"WITH w AS (", statement, " RETURNING t.", pk, ") SELECT pg_catalog.to_jsonb(w.",
                   pk, ") FROM w"});
}

std::string counted(const std::string &statement) {
    return joined({"WITH w AS (", statement,
                   " RETURNING 1) SELECT pg_catalog.to_jsonb(pg_catalog.count(*)) FROM w"});
}

std::string insert(const TableStatementRequest &r) {
    std::vector<std::string> columns = r.columns;
    columns.push_back(r.pk);
    return joined({"INSERT INTO ", r.table, " AS t (", listed(columns, ""),
                   ") OVERRIDING SYSTEM VALUE SELECT ", listed(columns, "r."),
                   as_records(r.table)});
}

} // namespace

bool parse_table_statement(const char *name, TableStatement *kind) {
    if (name == nullptr)
        return false;
    for (size_t i = 0; i < sizeof kind_names / sizeof kind_names[0]; i++)
        if (strcmp(name, kind_names[i]) == 0) {
            *kind = static_cast<TableStatement>(i);
            return true;
        }
    return false;
}

std::string table_statement(const TableStatementRequest &r) {
    const std::string keys = one_of_keys(r.pk);
    switch (r.kind) {
    case TableStatement::InsertRows:
        return returning_keys(insert(r), r.pk);
    case TableStatement::InsertNewRows:
        return returning_keys(insert(r) + " ON CONFLICT DO NOTHING", r.pk);
    case TableStatement::UpsertRows:
        return returning_keys(
            joined({insert(r), " ON CONFLICT (", r.pk, ") DO ",
                    r.columns.empty() ? "NOTHING"
                                      : joined({"UPDATE SET (", listed(r.columns, ""), ") = ROW(",
                                                listed(r.columns, "excluded."), ")"})}),
            r.pk);
    case TableStatement::UpdateRows:
        if (r.columns.empty())
            return "";
        return returning_keys(joined({"UPDATE ", r.table, " AS t SET (", listed(r.columns, ""),
                                      ") = ROW(", listed(r.columns, "r."), ")", as_records(r.table),
                                      " WHERE t.", r.pk, " OPERATOR(pg_catalog.=) r.", r.pk}),
                              r.pk);
    case TableStatement::ClearKeys: {
        if (r.columns.empty())
            return "";
        std::vector<std::string> nulls(r.columns.size(), "NULL");
        // Only the rows that have one set: an UPDATE of the others would be
        // captured for nothing.
        return counted(joined({"UPDATE ", r.table, " AS t SET (", listed(r.columns, ""), ") = ROW(",
                               listed(nulls, ""), ") WHERE ", keys, " AND (",
                               listed(r.columns, "t.", " OR ", " IS NOT NULL"), ")"}));
    }
    case TableStatement::DeleteKeys:
        return counted(joined({"DELETE FROM ", r.table, " AS t WHERE ", keys}));
    case TableStatement::CountKeys:
        return joined({"SELECT pg_catalog.jsonb_build_array(pg_catalog.count(*), pg_catalog.min(t.",
                       r.pk, "::bigint)) FROM ", r.table, " AS t WHERE ", keys});
    case TableStatement::KeysWhere:
        if (r.key_column.empty())
            return "";
        return joined({"SELECT pg_catalog.to_jsonb(t.", r.pk, ") FROM ", r.table, " AS t WHERE ",
                       one_of_keys(r.key_column)});
    case TableStatement::RowsOfKeys:
        return joined({"SELECT pg_catalog.to_jsonb(t) FROM ", r.table, " AS t WHERE ", keys});
    case TableStatement::ValuesOfKeys:
        if (r.key_column.empty())
            return "";
        return joined({"SELECT pg_catalog.to_jsonb(t.", r.key_column, ") FROM ", r.table,
                       " AS t WHERE t.", r.key_column, " IS NOT NULL AND ", keys});
    case TableStatement::CallHook:
        if (r.hook.empty())
            return "";
        return joined({"SELECT ", r.hook,
                       "((j OPERATOR(pg_catalog.->>) 'relocation')::pg_catalog.uuid,"
                       " j OPERATOR(pg_catalog.->) 'row') FROM pg_catalog.unnest($1) j"});
    }
    return "";
}

} // namespace pgoutbox::relocation
