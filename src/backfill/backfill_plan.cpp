// outbox.plan_backfill(tbl, sample_percent): what a backfill of a registered
// table would write, before its gate opens (issue 16): the outbox rows
// (control tables: for each target cell), the shards they go to, the
// hottest of them, the id span, and the batches and time it takes at the
// configured budget.  Exact by default (one aggregate over the table); with
// sample_percent, an estimate from TABLESAMPLE SYSTEM of that share of the
// table's pages, scaled up (the shard count is then the sample's: a lower
// bound).
//
// The table is read as its owner, restricted, like every read of a user's
// table (pg/run_as.hpp); the registration as the extension's owner.
//
// Written without C++ objects that own resources around PostgreSQL calls:
// errors unwind through it freely.
#include "backfill/backfill_batch.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "settings.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "lib/stringinfo.h"
}

using namespace pgoutbox;

namespace {

// Shards listed one by one in hottest_shards.
constexpr int hottest_listed = 10;

const char *column_of(Relation rel, AttrNumber attnum) {
    return quote_identifier(NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname));
}

} // namespace

OUTBOX_FUNCTION(outbox_plan_backfill) {
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("tbl must not be NULL")));
    bool sampled = !PG_ARGISNULL(1);
    double percent = sampled ? PG_GETARG_FLOAT8(1) : 100.0;
    if (sampled && !(percent > 0.0 && percent <= 100.0))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("sample_percent must be above 0 and at most 100, not %g", percent)));
    TupleDesc result_desc;
    if (get_call_result_type(fcinfo, nullptr, &result_desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "pg_outbox: plan_backfill must return a composite");
    MemoryContext caller = CurrentMemoryContext;
    Oid relid = PG_GETARG_OID(0);
    Relation rel = pg::open_user_table(relid, AccessShareLock);
    if (rel == nullptr)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("tbl: relation with OID %u does not exist", relid)));
    const TableMeta *meta = table_meta_get(rel);
    if (!meta->registered)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("tbl %s is not a registered table", RelationGetRelationName(rel)),
                        errhint("Register it with outbox.register_table().")));

    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    Registration reg = load_registration(relid, false);
    pg::run_as_end(&scope);
    bool control = meta->silo == Silo::Control;
    CellTargets targets = control ? backfill_targets(meta, reg) : CellTargets{0, nullptr, true};
    // A table without a cell column writes each row once per target cell;
    // one with a cell column once, for its cell (only the listed cells when
    // the target_cells option lists them).
    bool by_cell = control && meta->cell_attnum != InvalidAttrNumber;
    bool only_listed = by_cell && targets.only_listed;
    int64 fan_out = control && !by_cell ? targets.ncells : 1;

    char *table = pg::qualified_name(rel);
    const char *shard = meta->shard_attnum != InvalidAttrNumber ? column_of(rel, meta->shard_attnum)
                                                                : column_of(rel, meta->id_attnum);
    const char *cell = by_cell ? column_of(rel, meta->cell_attnum) : nullptr;
    StringInfoData sql;
    initStringInfo(&sql);
    appendStringInfo(
        &sql,
        "WITH g AS (SELECT t.%s::pg_catalog.int8 AS s, %s AS c,"
        " pg_catalog.round(pg_catalog.count(*) * $1)::pg_catalog.int8 AS n"
        " FROM %s t%s%s GROUP BY 1, 2)"
        " SELECT pg_catalog.sum(g.n)::pg_catalog.int8, pg_catalog.count(*),"
        " (SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_strip_nulls("
        "pg_catalog.jsonb_build_object('shard_identifier', h.s, 'cell_name', h.c,"
        " 'rows', h.n)) ORDER BY h.n DESC, h.s, h.c)"
        " FROM (SELECT * FROM g ORDER BY g.n DESC, g.s, g.c LIMIT %d) h),"
        " (SELECT pg_catalog.max(t.id)::pg_catalog.int8"
        " - pg_catalog.min(t.id)::pg_catalog.int8 + 1 FROM %s t),"
        " pg_catalog.max(g.n)"
        " FROM g",
        shard, cell ? psprintf("t.%s::pg_catalog.text", cell) : "NULL::pg_catalog.text", table,
        sampled ? psprintf(" TABLESAMPLE SYSTEM (%.6f) REPEATABLE (0)", percent) : "",
        only_listed ? psprintf(" WHERE t.%s::pg_catalog.text = ANY ($2)", cell) : "",
        hottest_listed, table);
    Datum *cells = (Datum *)palloc(sizeof(Datum) * Max(targets.ncells, 1));
    for (int i = 0; i < targets.ncells; i++)
        cells[i] = CStringGetTextDatum(targets.cells[i]);
    Oid types[2] = {FLOAT8OID, TEXTARRAYOID};
    Datum args[2] = {
        Float8GetDatum(100.0 / percent),
        PointerGetDatum(construct_array(cells, targets.ncells, TEXTOID, -1, false, TYPALIGN_INT))};
    int64 rows = 0, shards = 0, id_span = 0, hottest_rows = 0;
    Datum hottest = (Datum)0;
    pg::refuse_forced_row_security(rel);
    pg::spi_run_as(pg::table_owner_role(rel), "planning the backfill", sql.data, 2, types, args,
                   nullptr, true, 1, SPI_OK_SELECT, [&](uint64) {
                       bool isnull;
                       HeapTuple row = SPI_tuptable->vals[0];
                       TupleDesc desc = SPI_tuptable->tupdesc;
                       Datum value = SPI_getbinval(row, desc, 1, &isnull);
                       rows = isnull ? 0 : DatumGetInt64(value);
                       shards = DatumGetInt64(SPI_getbinval(row, desc, 2, &isnull));
                       value = SPI_getbinval(row, desc, 3, &isnull);
                       if (!isnull) {
                           MemoryContext old = MemoryContextSwitchTo(caller);
                           hottest = PointerGetDatum(DatumGetJsonbPCopy(value));
                           MemoryContextSwitchTo(old);
                       }
                       value = SPI_getbinval(row, desc, 4, &isnull);
                       id_span = isnull ? 0 : DatumGetInt64(value);
                       value = SPI_getbinval(row, desc, 5, &isnull);
                       hottest_rows = isnull ? 0 : DatumGetInt64(value);
                   });
    SPI_finish();
    relation_close(rel, NoLock);
    MemoryContextSwitchTo(caller);

    // At the budget, the worker's walk gives a table one batch a minute as
    // large as the budget, which covers budget + 1 ids (Sentry's span).
    int64 per_minute = (int64)backfill_rate_per_minute + 1;
    int64 batches = (id_span + per_minute - 1) / per_minute;
    Interval *eta = (Interval *)palloc0(sizeof(Interval));
    eta->time = batches * 60 * USECS_PER_SEC;
    // The deepest a shard gets from the backfill alone: without the guard,
    // all its rows; with it, the bound plus one batch of at most the bound.
    int64 guarded = Min(hottest_rows, 2 * (int64)backfill_max_shard_depth);
    // At the rate the worker's batches have run at so far, if they have.
    double rate;
    bool measured = worker_backfill_rate(&rate);
    Interval *eta_measured = (Interval *)palloc0(sizeof(Interval));
    if (measured)
        eta_measured->time = (int64)((double)id_span / rate * USECS_PER_SEC);
    Datum values[10] = {
        CStringGetTextDatum(sampled ? psprintf("sampled %g%% of the pages", percent) : "exact"),
        Int64GetDatum(rows * fan_out),
        Int64GetDatum(shards * fan_out),
        hottest,
        Int64GetDatum(id_span),
        Int64GetDatum(batches),
        IntervalPGetDatum(eta),
        Int64GetDatum(hottest_rows),
        Int64GetDatum(guarded),
        IntervalPGetDatum(eta_measured)};
    bool nulls[10] = {false, false, false, hottest == (Datum)0,           false,
                      false, false, false, backfill_max_shard_depth == 0, !measured};
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(result_desc), values, nulls));
}
