// outbox._run_as_table_owner(tbl, statement, rows): the one way the import,
// the compare and the cancel (extension/functions/69_relocation/)
// touch an application's table.  The statement runs with $1 = rows as the
// table's owner, restricted (pg/run_as.hpp): the owner's code it reaches
// (triggers, defaults, casts, a collision hook) can neither SET ROLE back
// to the caller nor leave a setting behind, which a SET ROLE in PL/pgSQL
// could not promise.  It returns the first column of the statement's rows
// (a SELECT, or a data-modifying WITH whose outer SELECT returns jsonb).
//
// Only the extension's owner may execute it (90_privileges.sql revokes it
// from PUBLIC): it gives the caller no more than SET ROLE to the table's
// owner would.
//
// While its statement runs, relocation_writing is true: the fence of a move
// (relocation/move/move_trigger.cpp) lets the relocation's own writes through,
// and nobody else's.  With uncaptured (the step of a move that
// removes the organization from the cell it left, and a move's import and
// catch-up), the statement's own changes write no outbox row; what its
// triggers write from inside it does (capture/uncaptured.hpp).
//
// Written without C++ objects that own resources: errors unwind through it
// freely.
#include "capture/uncaptured.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "relocation/import/relocation_writing.hpp"

extern "C" {
#include "utils/array.h"
#include "utils/datum.h"
}

using namespace pgoutbox;

bool pgoutbox::relocation_writing = false;

namespace {

Datum run_as_table_owner(FunctionCallInfo fcinfo, bool uncaptured) {
    for (int i = 0; i < 3; i++)
        if (PG_ARGISNULL(i))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s must not be NULL", i == 0   ? "tbl"
                                                          : i == 1 ? "statement"
                                                                   : "rows")));
    Oid relid = PG_GETARG_OID(0);
    char *statement = text_to_cstring(PG_GETARG_TEXT_PP(1));
    Datum rows = PG_GETARG_DATUM(2);
    Relation rel = pg::open_user_table(relid, RowExclusiveLock);
    if (rel == nullptr)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("tbl: relation with OID %u does not exist", relid)));
    // A policy forced on the owner would hide rows from the compare and the
    // cancel without a word.
    pg::refuse_forced_row_security(rel);

    MemoryContext caller = CurrentMemoryContext;
    Datum *results = nullptr;
    bool *result_nulls = nullptr;
    int count = 0;
    Oid types[1] = {JSONBARRAYOID};
    Datum values[1] = {rows};
    // Restored however the statement ends: it runs inside the callers'
    // subtransactions, whose errors may be caught.
    bool was_writing = relocation_writing;
    int was_uncaptured = capture_suppressed_depth;
    relocation_writing = true;
    // The statement's own executor, one inside this one's.
    capture_suppressed_depth = uncaptured ? pg::executor_depth() + 1 : 0;
    PG_TRY();
    {
        pg::spi_run_as(relocation_owner_role(rel), "running a relocation statement", statement, 1,
                       types, values, nullptr, false, 0, SPI_OK_SELECT, [&](uint64 n) {
                           TupleDesc desc = SPI_tuptable->tupdesc;
                           if (desc->natts < 1 || SPI_gettypeid(desc, 1) != JSONBOID)
                               ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
                                               errmsg("statement must return one jsonb column")));
                           MemoryContext spi = MemoryContextSwitchTo(caller);
                           results = (Datum *)palloc(sizeof(Datum) * (n + 1));
                           result_nulls = (bool *)palloc(sizeof(bool) * (n + 1));
                           for (uint64 r = 0; r < n; r++) {
                               Datum value =
                                   SPI_getbinval(SPI_tuptable->vals[r], desc, 1, &result_nulls[r]);
                               results[r] =
                                   result_nulls[r] ? (Datum)0 : datumCopy(value, false, -1);
                           }
                           count = int(n);
                           MemoryContextSwitchTo(spi);
                       });
    }
    PG_FINALLY();
    {
        relocation_writing = was_writing;
        capture_suppressed_depth = was_uncaptured;
    }
    PG_END_TRY();
    table_close(rel, NoLock);
    int dims[1] = {count};
    int lbs[1] = {1};
    PG_RETURN_ARRAYTYPE_P(
        construct_md_array(results, result_nulls, 1, dims, lbs, JSONBOID, -1, false, TYPALIGN_INT));
}

} // namespace

OUTBOX_FUNCTION(outbox__run_as_table_owner) {
    return run_as_table_owner(fcinfo, false);
}

OUTBOX_FUNCTION(outbox__run_as_table_owner_uncaptured) {
    return run_as_table_owner(fcinfo, true);
}
