// SQL through SPI: one statement checked against the return code it must
// give, and the dance around it (connect, become the right role, run, end
// the role change, read the rows, disconnect) in one place.  No C++ object
// with a destructor lives in these frames: an ERROR unwinds through them, and
// (sub)transaction abort closes the connection and restores the role.
#pragma once

#include "pg/run_as.hpp"

namespace pgoutbox::pg {

// SPI_execute_with_args that raises an ERROR naming what unless SPI returns
// expected; returns SPI_processed.  Runs inside SPI_connect, as whoever runs.
uint64 spi_run(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
               const char *nulls, bool read_only, long limit, int expected);

// spi_run, leaving the caller's memory context current (SPI leaves its
// procedure context current, which SPI_finish frees: what a batch
// allocates belongs in the batch's own context); no nulls, any row count.
uint64 spi_run_here(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
                    bool read_only, int expected);

// The same through a plan prepared once per session and kept in *plan (a
// statement run on every call: planning it each time would cost more than
// running it).  Its SQL must not change between calls, and must name what
// it reads with qualified names and its operators by schema (or run only
// where search_path is pinned: the worker, a RunAs scope): since PostgreSQL
// 9.3 a kept plan is analysed again with the current search_path whenever
// what it reads changes, not with the one it was prepared with.  The plan
// is generic: left to choose, the plan cache planned a statement with an
// array argument (claim = ANY ($1)) again on every call, its custom plans
// always looking cheaper than the generic one (bench/consumer).
uint64 spi_run_kept(SPIPlanPtr *plan, const char *what, const char *sql, int nargs, Oid *types,
                    Datum *values, const char *nulls, bool read_only, int expected);

// The plan of spi_run_kept, prepared if it is not yet, for a cursor; with
// cursor_options (CURSOR_OPT_GENERIC_PLAN), or the plan cache's choice.
SPIPlanPtr spi_prepare_kept(SPIPlanPtr *plan, const char *what, const char *sql, int nargs,
                            Oid *types, int cursor_options = 0);

// A read-only SELECT (parameters by types and values, none NULL) planned
// once, without its arguments, and run once: for arguments whose values
// cost the planner more than the plan saves.  A custom plan of
// "t.id = ANY ($1)" on a partitioned table prunes partitions for each of
// the array's elements and estimates each: 80 ms of 117 for 10,000 ids of
// test/harness's events, half of an export's time.
uint64 spi_run_generic(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
                       int expected);

// A SELECT (parameters by types and values, none NULL) whose rows are
// each handed to row(slot, arg) as the executor makes them, not gathered
// into SPI_tuptable: no tuple formed and copied a row (the walk of an
// organization's 100,000 rows spent a fifth of its time there).  row runs
// in the executor's memory: what must outlive the row goes into a context
// of the caller's.  Returns the rows.  Inside SPI_connect, as whoever runs.
uint64 spi_each(const char *what, const char *sql, int nargs, Oid *types, Datum *values,
                void (*row)(TupleTableSlot *slot, void *arg), void *arg);

// Array arguments for SPI (in CurrentMemoryContext).
Datum int4_array(const int32 *values, int n);
Datum int8_array(const int64 *values, int n);
Datum tid_array(const ItemPointerData *tids, int n);

// Who a statement of spi_run_as runs as.
struct RunAsRole {
    Relation owner_of; // nullptr: the extension's owner; else this table's owner
    bool for_caller;   // without the deadline (run_as_table_owner_for_caller)
};
constexpr RunAsRole extension_owner_role = {nullptr, false};
inline RunAsRole table_owner_role(Relation rel) {
    return {rel, false};
}
inline RunAsRole table_owner_role_for_caller(Relation rel) {
    return {rel, true};
}

// Becomes role until run_as_end(scope).
inline void run_as_role(RunAs *scope, RunAsRole role) {
    if (role.owner_of == nullptr)
        run_as_extension_owner(scope);
    else if (role.for_caller)
        run_as_table_owner_for_caller(scope, role.owner_of);
    else
        run_as_table_owner(scope, role.owner_of);
}

// run() in an SPI connection of its own, as role; then read(rows) with the
// result still in SPI_tuptable, back as the caller.  What read allocates in
// CurrentMemoryContext is freed with the connection: copy what must live on
// into a context of your own.
template <typename Run, typename Read>
uint64 spi_connected_as(RunAsRole role, Run &&run, Read &&read) {
    SPI_connect();
    RunAs scope;
    run_as_role(&scope, role);
    uint64 rows = run();
    run_as_end(&scope);
    read(rows);
    SPI_finish();
    return rows;
}

// spi_run through spi_connected_as.
template <typename Read>
uint64 spi_run_as(RunAsRole role, const char *what, const char *sql, int nargs, Oid *types,
                  Datum *values, const char *nulls, bool read_only, long limit, int expected,
                  Read &&read) {
    return spi_connected_as(
        role,
        [&] { return spi_run(what, sql, nargs, types, values, nulls, read_only, limit, expected); },
        read);
}

// spi_each in an SPI connection of its own, as role; row(slot) for each
// row, run as role (it must run no SQL: memory only).
template <typename Row>
uint64 spi_each_as(RunAsRole role, const char *what, const char *sql, int nargs, Oid *types,
                   Datum *values, Row &&row) {
    SPI_connect();
    RunAs scope;
    run_as_role(&scope, role);
    uint64 rows = spi_each(
        what, sql, nargs, types, values,
        [](TupleTableSlot *slot, void *arg) { (*static_cast<decltype(&row)>(arg))(slot); }, &row);
    run_as_end(&scope);
    SPI_finish();
    return rows;
}

// The same without reading the result.
inline uint64 spi_run_as(RunAsRole role, const char *what, const char *sql, int nargs, Oid *types,
                         Datum *values, const char *nulls, bool read_only, long limit,
                         int expected) {
    return spi_run_as(role, what, sql, nargs, types, values, nulls, read_only, limit, expected,
                      [](uint64) {});
}

} // namespace pgoutbox::pg
