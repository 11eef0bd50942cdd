// The rows that belong to some roots of a relocation scope (User or
// Organization): found breadth first from the roots through the references
// between the scope's tables, as Sentry's export finds them.  Shared by the
// export (export.cpp) and the targeted re-sync of an organization
// (resync/resync_start.cpp).  Every read runs as the table's owner,
// restricted, in the caller's snapshot.
#pragma once

#include "pg/ids.hpp"
#include "pg/spi.hpp"
#include "relocation/import/relocation_writing.hpp"
#include "relocation/model/models.hpp"

namespace pgoutbox::relocation {

// ids per ANY($1) of one read.
constexpr int ids_per_read = 10000;

// The ids of one table: all those found (sorted, distinct), those read
// but not yet followed to the rows that refer to them (in any order, maybe
// twice or found already), and the distinct values of the column the
// caller asked to read besides (find_belonging's also), or nullptr.
// Sorted arrays, not a hash set: a walk of 100,000 rows spent a third of
// its time hashing and then sorting them.
struct Ids {
    int64 *found;
    long found_count;
    int64 *pending;
    long pending_count;
    long pending_capacity;
    HTAB *also;
    bool also_any;   // a value of also read yet
    int64 also_last; // the latest: rows in index order repeat it
};

// The ids found, sorted and distinct: the set's own array.
int64 *sorted_ids(Ids *ids, long *count);

// Runs head, then a condition that column (SQL: "t.id") is one of ids
// (sorted, distinct; pg::ids_condition), then tail, as rel's owner once per
// chunk of ids, with a generic plan (pg::spi_run_generic); read(rows) sees
// each chunk's result in SPI_tuptable.
template <typename Read>
void read_chunks(Relation rel, const char *what, const char *head, const char *column,
                 const char *tail, const int64 *ids, long count, Read &&read) {
    for (long at = 0; at < count; at += ids_per_read) {
        pg::IdsCondition chunk;
        pg::ids_condition(column, ids + at, int(Min((long)ids_per_read, count - at)), &chunk);
        const char *sql = psprintf("%s%s%s", head, chunk.sql, tail);
        pg::spi_connected_as(
            relocation_owner_role(rel),
            [&] {
                return pg::spi_run_generic(what, sql, 3, chunk.types, chunk.args, SPI_OK_SELECT);
            },
            read);
    }
}

inline int64 int8_column(HeapTuple row, TupleDesc desc, int column) {
    bool isnull;
    return DatumGetInt64(SPI_getbinval(row, desc, column, &isnull));
}

struct Belonging {
    Models *models;
    int root;     // the scope's root table
    bool *member; // per table: in the scope
    int *order;   // the member tables, parents first
    int order_count;
    bool *deferred; // per edge: set in a later step of an import (cycles)
    Relation *rels; // per member table, locked AccessShare
    Ids *ids;       // per table: the rows that belong
};

// The rows of scope that belong to roots (sorted, distinct, at least one);
// each root must be a row of the root table, or an ERROR names it after
// argument.  A table of the scope that cannot be read right (no integer
// primary key, forced row security, a set of scopes without a function, a
// cycle of NOT NULL references) is an ERROR naming it.  Allocated in
// CurrentMemoryContext; inside SPI.
//
// also (optional): the quoted name of an integer column to read besides the
// primary key of rel (a member, as arg asks), or nullptr; the re-sync reads
// each row's shard with the walk rather than reading the rows again.
//
// wanted (optional): whether the caller wants the rows of a table of the
// scope, wanted(arg, relid) (also and wanted take the same arg).  A table
// it does not want, from which the scope's references lead to none it
// wants, is no member: not opened, read or checked.  The root is always a
// member.  The re-sync wants the registered tables: most of a Sentry
// organization's tables are not replicated, and reading them sent nothing.
using AlsoRead = const char *(*)(void *arg, Relation rel);
using Wanted = bool (*)(void *arg, Oid relid);
void find_belonging(int scope, const char *argument, const int64 *roots, int root_count,
                    Belonging *out, AlsoRead also = nullptr, Wanted wanted = nullptr,
                    void *arg = nullptr);

} // namespace pgoutbox::relocation
