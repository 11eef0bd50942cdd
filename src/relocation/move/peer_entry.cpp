// outbox.relocation_peer(protocol, operation, argument): control's one entry
// into a cell for the steps of a move, and a cell's into control for
// control's record of one (docs/relocation.md).  It checks the caller (a
// cell answers control's link role only, checked by identity as the link's
// receiving functions check it: outbox._link_peer), finds the operation
// (peer_protocol.hpp), locks the move's row on the operation's side FOR NO
// KEY UPDATE, and runs the operation's answer.  The step is marked, so
// that the owner code it reaches runs under outbox.owner_code_timeout and
// owner_lock_timeout (relocation/import/relocation_writing.hpp): a table
// owner's slow trigger fails the step in the cell within that bound, and
// control, which waits for the answer, retries it later.
//
// Plain C-style code: PostgreSQL errors unwind through it.
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "relocation/import/relocation_writing.hpp"
#include "relocation/move/peer_protocol.hpp"
#include "settings.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"
}

using namespace pgoutbox;
using namespace pgoutbox::relocation;

bool pgoutbox::move_step_running = false;

namespace {

// The statements' parameters: $1 the relocation, $2 the argument, $3 this
// cell's name (peer_protocol.hpp).
struct PeerCall {
    Datum values[3];
    char nulls[4];
};

// Runs sql, which gives one row of one column or none; *isnull when it
// gives none or NULL, else the value copied out of SPI (by its type's
// length: a uuid is no varlena).
Datum run_answer(const char *what, const char *sql, PeerCall *call, bool *isnull) {
    Oid types[3] = {UUIDOID, JSONBOID, TEXTOID};
    pg::spi_run(what, sql, 3, types, call->values, call->nulls, false, 0, SPI_OK_SELECT);
    *isnull = true;
    if (SPI_processed == 0)
        return (Datum)0;
    Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, isnull);
    Form_pg_attribute column = TupleDescAttr(SPI_tuptable->tupdesc, 0);
    return *isnull ? (Datum)0 : SPI_datumTransfer(value, column->attbyval, column->attlen);
}

// The statement that answers an operation, as json (relocation_peer's
// type; an answer built as jsonb is written out as text once): of the
// move's row on side, or of none (side NULL).
char *answer_sql(const char *answer, const char *side) {
    if (side == nullptr)
        return psprintf("SELECT (%s)::pg_catalog.json", answer);
    return psprintf("SELECT (%s)::pg_catalog.json FROM outbox.organization_moves o"
                    " WHERE o.relocation = $1 AND o.side = '%s'",
                    answer, side);
}

[[noreturn]] void not_control_link() {
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("role %s is not the link role of this cell's control",
                           quote_identifier(GetUserNameFromId(GetSessionUserId(), false)))));
    pg_unreachable();
}

// A cell's answer to control; inside SPI.
Datum cell_answer(const char *operation, Datum argument, bool argument_null, bool *isnull) {
    PeerCall call = {{(Datum)0, argument, (Datum)0}, {'n', argument_null ? 'n' : ' ', 'n', '\0'}};
    if (silo_mode != SILO_MODE_CELL)
        not_control_link();
    bool null;
    Datum cell = run_answer("finding this cell's link to control",
                            "SELECT l.cell_name::text FROM outbox.control_link l"
                            " WHERE l.link_role = session_user",
                            &call, &null);
    if (null)
        not_control_link();
    call.values[2] = cell;
    call.nulls[2] = ' ';
    // By identity too: dropped and created again, or a superuser now.
    run_answer("checking control's link role", "SELECT outbox._link_peer(1)", &call, &null);
    if (argument_null || !JB_ROOT_IS_OBJECT(DatumGetJsonbP(argument)))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("argument must be a JSON object")));
    call.values[0] = run_answer("reading the argument's relocation",
                                "SELECT ($2->>'relocation')::pg_catalog.uuid", &call, &null);
    if (null)
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("argument.relocation must not be NULL")));
    call.nulls[0] = ' ';
    const PeerOperation *found = find_peer_operation(operation);
    if (found == nullptr)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("operation %s is not one of relocation protocol %d",
                               operation ? quote_literal_cstr(operation) : "NULL", peer_protocol)));
    const char *side = peer_side_name(found->side);
    if (side == nullptr) {
        if (strcmp(found->name, "prepare") == 0)
            run_answer("asking control whether it recorded the move",
                       "SELECT outbox._move_recorded_by_control(l, $2)"
                       " FROM outbox.control_link l WHERE NOT EXISTS"
                       " (SELECT FROM outbox.organization_moves o WHERE o.relocation = $1)",
                       &call, &null);
        return run_answer("answering a move's peer", answer_sql(found->answer, nullptr), &call,
                          isnull);
    }
    // FOR NO KEY UPDATE: writers' change log entries refer to this row
    // (their foreign key check takes FOR KEY SHARE), and a step such as the
    // export holds it for as long as it runs; FOR UPDATE made every writer
    // of the cell wait for the export (issue 44).
    Datum state = run_answer("locking the move",
                             psprintf("SELECT o.state::text FROM outbox.organization_moves o"
                                      " WHERE o.relocation = $1 AND o.side = '%s'"
                                      " FOR NO KEY UPDATE",
                                      side),
                             &call, &null);
    const char *relocation = DatumGetCString(DirectFunctionCall1(uuid_out, call.values[0]));
    if (null)
        ereport(ERROR,
                (errcode(ERRCODE_UNDEFINED_OBJECT),
                 errmsg("relocation %s is no move whose %s this cell is", relocation, side)));
    if (strcmp(TextDatumGetCString(state), "cancelled") == 0)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("relocation %s was cancelled", relocation)));
    return run_answer("answering a move's peer", answer_sql(found->answer, side), &call, isnull);
}

// Control's answer to a cell: its record of a move; inside SPI.
Datum control_answer(const char *operation, Datum argument, bool argument_null, bool *isnull) {
    PeerCall call = {{(Datum)0, argument, operation ? CStringGetTextDatum(operation) : (Datum)0},
                     {'n', argument_null ? 'n' : ' ', operation ? ' ' : 'n', '\0'}};
    return run_answer("answering a cell",
                      "SELECT outbox._move_record(outbox._link_peer(1), $3, $2)::pg_catalog.json",
                      &call, isnull);
}

} // namespace

OUTBOX_FUNCTION(outbox_relocation_peer) {
    if (PG_ARGISNULL(0) || PG_GETARG_INT32(0) != peer_protocol)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("relocation protocol %s is not supported here (this side speaks %d)",
                               PG_ARGISNULL(0) ? "NULL" : psprintf("%d", PG_GETARG_INT32(0)),
                               peer_protocol)));
    const char *operation = PG_ARGISNULL(1) ? nullptr : text_to_cstring(PG_GETARG_TEXT_PP(1));
    Datum argument = PG_ARGISNULL(2) ? (Datum)0 : PG_GETARG_DATUM(2);
    volatile Datum answer = (Datum)0;
    volatile bool isnull = true;
    bool was_running = move_step_running;
    move_step_running = true;
    PG_TRY();
    {
        SPI_connect();
        bool null;
        answer = silo_mode == SILO_MODE_CONTROL
                     ? control_answer(operation, argument, PG_ARGISNULL(2), &null)
                     : cell_answer(operation, argument, PG_ARGISNULL(2), &null);
        isnull = null;
        SPI_finish();
    }
    PG_FINALLY();
    { move_step_running = was_running; }
    PG_END_TRY();
    if (isnull)
        PG_RETURN_NULL();
    PG_RETURN_DATUM(answer);
}
