// Per-backend cache of what capture needs to know: the registered table a
// relation belongs to (a partition resolves to its registered root), its
// columns resolved to attribute numbers on that very relation, the registered
// cells, and pg_outbox's storage (outbox tables, their sequences and indexes).
//
// Entries are built on first use and dropped by relcache invalidation: of the
// relation itself (ALTER TABLE), of the registry tables (every registry
// change calls outbox._invalidate_cache()), or of the outbox tables.
// Invalidation only marks entries stale; memory is released at the next
// lookup, never under a caller that is still using an entry.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

enum class Silo { Cell, Control };

struct PayloadColumn {
    AttrNumber attnum;
    const char *name;
    FmgrInfo to_jsonb; // to_jsonb() with an fn_expr that names the column's type
};

struct TableMeta {
    Oid relid; // hash key: the relation the trigger fires on
    bool valid;
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
// pg_outbox--0.1.0.sql); capture routes each row to its partition itself.
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

struct Registry {
    bool valid;
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
    FmgrInfo *handlers;
    Oid message_type; // outbox.message, or InvalidOid before 0.3.0
};

// Both return entries valid until the next call of either.
bool is_outbox_relation(const Registry *registry, Oid relid);

const Registry *registry_get();
const TableMeta *table_meta_get(Relation rel);

// Reads an integer column (int2, int4 or int8) as int64.
int64 integer_datum(Datum value, Oid type);

} // namespace pgoutbox
