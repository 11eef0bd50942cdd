// The statements relocation runs on an application's table, as its owner
// (outbox._run_as_table_owner: $1 is a jsonb[] of keys or of rows, and the
// statement returns one jsonb column): the import's inserts and its later
// step, its cancel, a move's catch-up, its deletes and its reads.  Built
// here from names the entry (table_statements_entry.cpp) has quoted with
// PostgreSQL's quote_identifier: the one place that writes them.  Pure C++
// (test/unit/table_statements_test.cpp).
#pragma once

#include <string>
#include <vector>

namespace pgoutbox::relocation {

enum class TableStatement {
    InsertRows,    // the rows, all or an error (a unique key refused one)
    InsertNewRows, // the rows a unique key does not refuse, the others left out
    UpsertRows,    // the rows, those already here (by key) updated
    UpdateRows,    // columns of the rows already here set from the rows
    ClearKeys,     // columns of the keys' rows set to NULL (those not NULL)
    DeleteKeys,    // the keys' rows deleted
    CountKeys,     // [how many of the keys are here, the least of them]
    KeysWhere,     // the keys of the rows whose key_column is one of $1
    RowsOfKeys,    // the keys' rows, whole
    ValuesOfKeys,  // the values of key_column in the keys' rows, but NULL
    CallHook,      // the collision hook's row for each {relocation, row} of $1
};

// Names as SQL writes them (quoted where they need it).
struct TableStatementRequest {
    TableStatement kind = TableStatement::RowsOfKeys;
    std::string table; // schema-qualified
    std::string pk;
    std::vector<std::string>
        columns;            // InsertRows, InsertNewRows, UpsertRows, UpdateRows, ClearKeys
    std::string key_column; // KeysWhere
    std::string hook;       // CallHook: the function, schema-qualified
};

// false: no kind of that name.
bool parse_table_statement(const char *name, TableStatement *kind);

// Returns the statement, or an empty string when the request lacks what its
// kind needs (columns for an update or a clear, the hook for its call).
std::string table_statement(const TableStatementRequest &request);

} // namespace pgoutbox::relocation
