// Built as extension/functions/69_relocation/20_import_plan.sql's
// PL/pgSQL built it before (issue 45): the same text, so that the plans
// and errors of the import, the compare and a move's catch-up are as they
// were.
#include "relocation/import/rows_statement.hpp"
#include "relocation/import/sql_text.hpp"

namespace pgoutbox::relocation {

std::string sql_literal(const std::string &s) {
    std::string out;
    out.reserve(s.size() + 3);
    if (s.find('\\') != std::string::npos)
        out += 'E';
    out += '\'';
    for (char c : s) {
        if (c == '\'' || c == '\\')
            out += c;
        out += c;
    }
    out += '\'';
    return out;
}

namespace {

bool array_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool is_null_word(const std::string &s) {
    if (s.size() != 4)
        return false;
    const char *null_word = "null";
    for (size_t i = 0; i < 4; i++)
        if ((s[i] | 0x20) != null_word[i])
            return false;
    return true;
}

bool needs_quotes(const std::string &s) {
    if (s.empty() || is_null_word(s))
        return true;
    for (char c : s)
        if (c == '"' || c == '\\' || c == '{' || c == '}' || c == ',' || array_space(c))
            return true;
    return false;
}

} // namespace

std::string text_array_text(const std::vector<std::string> &names) {
    std::string out = "{";
    for (size_t i = 0; i < names.size(); i++) {
        if (i > 0)
            out += ',';
        const std::string &name = names[i];
        if (!needs_quotes(name)) {
            out += name;
            continue;
        }
        out += '"';
        for (char c : name) {
            if (c == '"' || c == '\\')
                out += '\\';
            out += c;
        }
        out += '"';
    }
    return out + "}";
}

std::string rows_statement(const RowsStatementRequest &r) {
    const std::string relocation = sql_literal(r.relocation);
    const std::string model = sql_literal(r.model);
    // A chunk looks every key up by the map's primary key, one index probe
    // each, whatever the map's statistics say while it grows; the compare
    // (joined) reads whole tables after an ANALYZE of the map, and joins.
    std::string row =
        joined({"y.fields || pg_catalog.jsonb_build_object(", sql_literal(r.pk), ", y.new)"});
    std::string lookups, columns, unresolved;
    int n = 0;
    for (const RowsReference &ref : r.references) {
        if (ref.users && r.users_relocation.empty())
            continue; // this database shares the source's control: values kept
        n++;
        const std::string column = sql_literal(ref.column);
        const std::string m = "m" + std::to_string(n);
        if (ref.deferred && r.deferred_null) {
            add(row, {" || pg_catalog.jsonb_build_object(", column, ", NULL::bigint)"});
            continue;
        }
        add(row, {" || pg_catalog.jsonb_build_object(", column, ", y.", m, ")"});
        const std::string map = sql_literal(ref.users ? r.users_relocation : r.relocation);
        const std::string parent = sql_literal(ref.parent);
        if (r.joined)
            add(lookups, {" LEFT JOIN outbox.relocation_pk_map ", m, " ON ", m,
                          ".relocation = ", map, " AND ", m, ".table_key = ", parent, " AND ", m,
                          ".old = (s.fields->>", column, ")::bigint"});
        else
            add(lookups, {", (SELECT m.new FROM outbox.relocation_pk_map m WHERE m.relocation = ",
                          map, " AND m.table_key = ", parent, " AND m.old = (s.fields->>", column,
                          ")::bigint) AS ", m});
        add(columns, {", ", m, ".new AS ", m});
        add(unresolved, {" WHEN y.fields->>", column, " IS NOT NULL AND y.", m,
                         " IS NULL THEN outbox._relocation_unresolved(", relocation, ", ", model,
                         ", y.old, ", column, ", ", parent, ", y.fields)"});
    }
    // What a collision hook changed, but for the references it was given.
    std::vector<std::string> given;
    for (const RowsReference &ref : r.references)
        given.push_back(ref.column);
    given.push_back(r.pk);
    row = joined({"(", row, ") || coalesce(y.replaced - ", sql_literal(text_array_text(given)),
                  "::text[], '{}')"});
    const std::string value =
        unresolved.empty() ? row : joined({"CASE", unresolved, " ELSE ", row, " END"});
    const std::string where =
        joined({" WHERE s.relocation = ", relocation, " AND s.model = ", model, " AND s.ordinal ",
                r.ordinals, " OFFSET 0) y"});
    if (r.joined) {
        const char *rows_and_keys =
            " FROM outbox.relocation_rows s"
            " LEFT JOIN outbox.relocation_pk_map k ON k.relocation = s.relocation"
            " AND k.table_key = s.model AND k.old = s.pk";
        return joined({"SELECT y.ordinal, y.old, y.new, ", value,
                       " AS row FROM (SELECT s.ordinal, s.pk AS old, s.fields, k.new, k.replaced",
                       columns, rows_and_keys, lookups, where});
    }
    const char *keys = r.deferred_null
                           // The insert step: the keys it just took, $3[1] for ordinal $1.
                           ? "$3[s.ordinal - $1 + 1] AS new, NULL::jsonb AS replaced"
                           : "(SELECT k.new FROM outbox.relocation_pk_map k"
                             " WHERE k.relocation = s.relocation AND k.table_key = s.model"
                             " AND k.old = s.pk) AS new,"
                             " (SELECT k.replaced FROM outbox.relocation_pk_map k"
                             " WHERE k.relocation = s.relocation AND k.table_key = s.model"
                             " AND k.old = s.pk) AS replaced";
    return joined({"SELECT y.ordinal, y.old, y.new, ", value,
                   " AS row FROM (SELECT s.ordinal, s.pk AS old, s.fields, ", keys, lookups,
                   " FROM outbox.relocation_rows s", where});
}

bool parse_rows_purpose(const std::string &name, RowsPurpose *purpose) {
    if (name == "insert")
        *purpose = RowsPurpose::Insert;
    else if (name == "deferred")
        *purpose = RowsPurpose::Deferred;
    else if (name == "compare")
        *purpose = RowsPurpose::Compare;
    else
        return false;
    return true;
}

std::string rows_purpose_statement(RowsStatementRequest r, RowsPurpose purpose) {
    r.deferred_null = purpose == RowsPurpose::Insert;
    r.joined = purpose == RowsPurpose::Compare;
    r.ordinals = purpose == RowsPurpose::Compare ? "IS NOT NULL" : "BETWEEN $1 AND $2";
    const std::string rows = rows_statement(r);
    if (purpose == RowsPurpose::Insert)
        return joined(
            {"SELECT pg_catalog.array_agg(x.row ORDER BY x.ordinal) FROM (", rows, ") x"});
    const std::string pk = sql_literal(r.pk);
    if (purpose == RowsPurpose::Compare)
        return joined({"SELECT ", sql_literal(r.model), " AS model, x.new AS pk, x.row - ", pk,
                       " AS fields FROM (", rows, ") x"});
    std::vector<std::string> names;
    for (const RowsReference &ref : r.references)
        if (ref.deferred)
            names.push_back(ref.column);
    const std::string deferred = joined({sql_literal(text_array_text(names)), "::text[]"});
    const char *their_values = ", x.new) || (SELECT pg_catalog.jsonb_object_agg(e.key, e.value)"
                               " FROM pg_catalog.jsonb_each(x.row) e WHERE e.key = ANY (";
    return joined({"SELECT pg_catalog.array_agg(pg_catalog.jsonb_build_object(", pk, their_values,
                   deferred, ")) ORDER BY x.ordinal) FILTER (WHERE x.row ?| ", deferred,
                   " AND EXISTS (SELECT FROM pg_catalog.jsonb_each(x.row) e WHERE e.key = ANY (",
                   deferred, ") AND e.value <> 'null'::jsonb)) FROM (", rows, ") x"});
}

} // namespace pgoutbox::relocation
