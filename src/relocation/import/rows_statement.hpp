// The SELECT that gives an import's staged rows of one table as they are
// written here (docs/relocation.md, "Importing"): each row's fields with its
// new primary key and every reference inside the export rewritten through
// outbox.relocation_pk_map.  Built here, from the plan entry's names, as
// literals: the one place that writes this statement (the insert and the
// later step of a chunk, the compare, a move's catch-up read it through
// outbox._relocation_rows_sql).  Pure C++ (test/unit/rows_statement_test.cpp).
#pragma once

#include <string>
#include <vector>

namespace pgoutbox::relocation {

// A reference of the table (the plan entry's refs): a column whose values
// are keys of parent; mapped through the export's map, or through the
// users' map (users: a cross-silo reference to the User scope).
struct RowsReference {
    std::string column;
    std::string parent;
    bool users = false;
    bool deferred = false; // a cycle's column, set in the later step
};

struct RowsStatementRequest {
    std::string relocation;       // uuid, as text
    std::string users_relocation; // empty: the users' ids are kept
    std::string model;            // the table key
    std::string pk;               // its primary key's column
    std::vector<RowsReference> references;
    // The insert step: deferred columns NULL, the new keys from $3 (in
    // ordinal order); else every reference rewritten, keys from the map.
    bool deferred_null = false;
    std::string ordinals = "BETWEEN $1 AND $2"; // SQL after "s.ordinal "
    // Whole tables (the compare): LEFT JOINs instead of a probe a row.
    bool joined = false;
};

// s as an SQL string literal (PostgreSQL's quote_literal: E'...' when it
// holds a backslash).
std::string sql_literal(const std::string &s);

// names as the text of a text[] value (array_out's quoting of elements).
std::string text_array_text(const std::vector<std::string> &names);

std::string rows_statement(const RowsStatementRequest &request);

// What the import does with a table's staged rows, each a statement around
// rows_statement's (the request's deferred_null, ordinals and joined set
// for it):
// - Insert: the rows of ordinals $1 to $2 as one jsonb[] in ordinal order,
//   the deferred columns NULL, the new keys $3 (the insert step);
// - Deferred: for those of them whose deferred columns hold a key, an
//   object of the new key and those columns mapped, as one jsonb[] (the
//   later step; NULL when none has one);
// - Compare: every row as (model, pk, fields), keys mapped and joined.
enum class RowsPurpose { Insert, Deferred, Compare };

bool parse_rows_purpose(const std::string &name, RowsPurpose *purpose);

std::string rows_purpose_statement(RowsStatementRequest request, RowsPurpose purpose);

} // namespace pgoutbox::relocation
