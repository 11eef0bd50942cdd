// Per-backend cache of what capture needs to know: the registered table a
// relation belongs to (a partition resolves to its registered root), its
// columns resolved to attribute numbers on that very relation, the registered
// cells, and pg_outbox's storage (outbox tables, their sequences and indexes).
//
// Entries are built on first use and dropped by relcache invalidation: of the
// relation itself (ALTER TABLE), of the registry tables (every registry
// change calls outbox._invalidate_cache()), or of the outbox tables.
// An entry, once returned, never changes: a rebuild makes a new one and the
// old one is freed at the end of the transaction, since a caller may still
// hold it (user code run from capture, a payload cast say, can reach another
// capture that rebuilds the same entry).  An invalidation that arrives while
// an entry is being built leaves it stale, to be built again (PgQ's trigger
// cache guards against the same race).
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

enum class Silo { Cell, Control };

// 'cell' or 'control', as SQL names a silo.
inline const char *silo_text(Silo silo) {
    return silo == Silo::Cell ? "cell" : "control";
}

// Argument n of an SQL function: 'cell' or 'control', else an ERROR.
Silo silo_argument(FunctionCallInfo fcinfo, int n);

// The name of id (a category's, a scope's) in parallel arrays of n ids and
// names, or "" when it is not there.
inline const char *name_of(int32 id, int n, const int32 *ids, const char *const *names) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return names[i];
    return "";
}

struct PayloadColumn {
    AttrNumber attnum;
    const char *name;
    FmgrInfo to_jsonb; // to_jsonb() with an fn_expr that names the column's type
};

struct TableMeta {
    Oid relid;       // the relation the trigger fires on
    bool registered; // false: no registration covers this relation
    MemoryContext context;
    const char *relname;
    const char *table_key;
    Silo silo;
    int32 category;
    int32 scope;
    AttrNumber id_attnum;
    Oid id_type;
    AttrNumber shard_attnum; // InvalidAttrNumber: the id is the shard identifier
    Oid shard_type;
    AttrNumber cell_attnum; // control tables only; InvalidAttrNumber: every cell
    Oid cell_type;          // text, varchar or name
    int npayload;           // 0: payload is NULL
    PayloadColumn *payload;
};

struct OutboxIndex {
    Oid oid;
    IndexInfo *info;
};

struct OutboxPartition {
    Oid relid;
    int nindexes;
    OutboxIndex *indexes;
};

// An outbox table is hash-partitioned on shard_identifier (the reasoning is in
// extension/tables/20_outbox.sql); capture routes each row to its partition itself.
struct OutboxTable {
    Oid relid; // the partitioned parent
    Oid sequence;
    int64 id_block; // the sequence's increment: ids a nextval reserves
    int natts;
    FmgrInfo hash_function; // the partition key's extended hash support function
    Oid hash_collation;
    int nremainders;               // the greatest modulus
    OutboxPartition *by_remainder; // partition of each remainder
};

// Everything registered, as one snapshot with one invalidation: the outbox
// tables, the cells and the handlers.  The handler list is a registration
// like a table's (outbox.register_handler), so it is read here, with the
// rest; handlers/ owns what is done with it (resolve_handlers in handlers.cpp
// checks each function and calls it).  A cache of its own in handlers/ would
// be a second copy of this cache's invalidation and retirement.
// A category's only registered table in a silo: a message of the category
// whose row is gone from it was a deletion, and leaves a tombstone (SPEC
// section 7; Sentry has one model per category).
struct SoleTable {
    int32 category;
    bool control;
    Oid relid;
    const char *table_key;
};

struct Registry {
    MemoryContext context;
    Oid registry_relid; // outbox.registered_tables
    Oid cells_relid;    // outbox.cells
    Oid handlers_relid; // outbox.handlers
    OutboxTable cell_outbox;
    OutboxTable control_outbox;
    int ncells;
    const char **cells; // registered cells, sorted
    int nhandlers;      // outbox.handlers (0.3.0 and later)
    int32 *handler_categories;
    Oid *handler_functions; // may have been dropped since: handlers/ checks
    Oid message_type;       // outbox.message, or InvalidOid before 0.3.0
    int nsole_tables;
    SoleTable *sole_tables;
};

bool is_outbox_relation(const Registry *registry, Oid relid);

// The hash remainder (index into by_remainder) of a shard: the partition
// PostgreSQL would route its rows to, as capture and draining both do.
int outbox_remainder(const OutboxTable *table, int64 shard_identifier);

// Valid to the end of the transaction.
const Registry *registry_get();

// The next registry_get reads the registry again: for a change whose
// invalidation may not have arrived yet (it is sent after the commit
// callbacks that told of it).
void registry_forget();
const TableMeta *table_meta_get(Relation rel);

// rel as a part of the registered table root, which need no longer be its
// ancestor (a partition being detached).  Not cached; valid to the end of the
// transaction.
const TableMeta *table_meta_build(Relation rel, Oid root);

// Reads an integer column (int2, int4 or int8) as int64.
int64 integer_datum(Datum value, Oid type);

} // namespace pgoutbox
