// The application's tables as relocation sees them: each table's scopes,
// primary key and references (foreign keys and registered cross-silo
// references), read from the catalogs and, as the extension's owner,
// outbox.relocation_scopes.  Shared by outbox.check_models() and the exports.
#pragma once

#include "pg/postgres.hpp"
#include "relocation/model/model_graph.hpp"

namespace pgoutbox::relocation {

// Sentry's RelocationScope, as bits of Model::scopes.
enum ScopeBit { Excluded = 1, User = 2, Organization = 4, Config = 8, Global = 16 };
const char *scope_name(int bit);
// The scopes an export starts from a root of.
constexpr int exported_scopes = User | Organization;

struct Model {
    Oid relid;
    char *key;       // the table key an export names it by ("model")
    char *qualified; // schema-qualified and quoted, for SQL
    char relkind;
    int scopes;        // 0: none declared
    int scope_count;   // how many the declaration names
    bool has_function; // a scope_function is declared...
    char *function;    // ...and exists: its quoted name (else NULL)
    char *pk;          // the primary key's column when one integer column, else NULL
    bool forced_row_security;
    char *suspects; // integer *_id columns that are neither references nor plain_columns
};

struct Reference {
    int child;
    int parent; // -1: not a table here (another silo's)
    char *column;
    bool nullable;
    bool cross_silo;  // registered with outbox.register_foreign_key
    char *parent_key; // the parent's table key
};

struct Models {
    Model *tables; // sorted by key
    int count;
    Reference *references;
    int reference_count;
    // The references between tables here, as the graph functions take them;
    // edge_reference[e] is the Reference of edges[e].
    GraphEdge *edges;
    int *edge_reference;
    int edge_count;
    int user_root; // -1: not set
    int organization_root;
};

// Read in CurrentMemoryContext; each Model's suspects only when asked
// (outbox.check_models() reports them).
Models *load_models(bool with_suspects);

inline int root_of(const Models *models, int scope) {
    return scope == User ? models->user_root : models->organization_root;
}

} // namespace pgoutbox::relocation
