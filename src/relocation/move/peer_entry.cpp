// outbox.relocation_peer(protocol, operation, argument): control's one entry
// into a cell for the steps of a move, and a cell's into control for
// control's record of one (docs/relocation.md).  The operations are
// outbox._relocation_peer's (extension/functions/69_relocation/42_move_peer.sql);
// this entry marks the step, so that the owner code it reaches runs under
// outbox.owner_code_timeout and owner_lock_timeout
// (relocation/import/relocation_writing.hpp): a table owner's slow trigger
// fails the step in the cell within that bound, and control, which waits
// for the answer, retries it later.
//
// Plain C-style code: PostgreSQL errors unwind through it.
#include "pg/guard.hpp"
#include "relocation/import/relocation_writing.hpp"

using namespace pgoutbox;

bool pgoutbox::move_step_running = false;

OUTBOX_FUNCTION(outbox_relocation_peer) {
    Oid types[3] = {INT4OID, TEXTOID, JSONBOID};
    Datum values[3];
    char nulls[4] = "   ";
    for (int i = 0; i < 3; i++) {
        values[i] = PG_ARGISNULL(i) ? (Datum)0 : PG_GETARG_DATUM(i);
        nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
    }
    volatile Datum answer = (Datum)0;
    volatile bool isnull = true;
    bool was_running = move_step_running;
    move_step_running = true;
    PG_TRY();
    {
        SPI_connect();
        pg::spi_run("answering a move's peer", "SELECT outbox._relocation_peer($1, $2, $3)", 3,
                    types, values, nulls, false, 0, SPI_OK_SELECT);
        bool null;
        Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &null);
        isnull = null;
        if (!null)
            answer = SPI_datumTransfer(value, false, -1);
        SPI_finish();
    }
    PG_FINALLY();
    { move_step_running = was_running; }
    PG_END_TRY();
    if (isnull)
        PG_RETURN_NULL();
    PG_RETURN_DATUM(answer);
}
