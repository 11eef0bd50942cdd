// Random tokens and sorted int64 ids, for the sinks that name what they
// hand out (a consumer's claims, a link's batches and sessions) and look
// ids up in sorted arrays.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::pg {

// A random positive int64 from pg_strong_random: a claim's, a batch's or a
// connection's name; an ERROR when no random bytes can be had.
int64 random_token();

// qsort and bsearch order of int64 values.
int compare_int64(const void *a, const void *b);

// Sorts ids ascending.  std::sort compares inline: a third of qsort's time
// on 100,000 ids (an organization's re-sync sorts every row it finds), and
// ids read in index order, already sorted, cost one pass.
void sort_ids(int64 *ids, long count);

// The rows whose column (SQL: "t.id", "t.project_id") is one of ids[0..n)
// (sorted, distinct, n > 0): a condition on $1 (int8[], the ids), $2 and $3
// (the first and the last), and its arguments.  The first and last bound an
// index range scan, which reads only the rows between them, where the
// planner scans the whole table for a long ANY ($1) alone.  Ids without a
// gap are read as the range alone: the same rows, without the planner's
// estimate of each of the ids (about 5 ms for 10,000), as an organization's
// rows are after a relocation import.
struct IdsCondition {
    const char *sql;
    Oid types[3];
    Datum args[3];
};
void ids_condition(const char *column, const int64 *ids, int n, IdsCondition *out);

} // namespace pgoutbox::pg
