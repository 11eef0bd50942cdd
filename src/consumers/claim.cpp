// outbox.claim() (docs/consumers.md).  A claim is a drain whose handler is a
// process outside the database.  It walks due shards with a drain pass
// (drain_pass.hpp) of its own, claims them as a drain does (advisory lock,
// tried; delivery/claims.cpp), and instead of calling handlers records a
// lease per shard (leases.hpp) and returns the shard's first messages.  The
// lease holds the shard across transactions: drains and other claims leave
// a shard alone while its lease is live (delivery/claims.cpp, not_held and
// skip_stopped_shards), and find it due again once the lease has passed.
// The same role's claims take it again only once the others had their turn
// (turns.hpp).
//
// All of it runs as the extension's owner, after checking that the calling
// role holds CONSUME on the categories (outbox.grant_category): no code of
// the caller's runs in between.  Plain C-style code: PostgreSQL errors
// unwind through it.
#include "consumers/leases.hpp"
#include "consumers/turns.hpp"
#include "delivery/session_pass.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "settings.hpp"

extern "C" {
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
}

using namespace pgoutbox;

namespace {

// What one call may claim at most: the messages are in memory.
constexpr int max_claim_messages = 10000;

// The categories that role may consume: of names when given (an unknown or
// refused name is an ERROR), else all that it holds CONSUME on and that
// have no handler here (the worker's: a claim takes those only when it
// names them).  Inside SPI, as the extension's owner.
Categories consumable_categories(Oid role, ArrayType *names) {
    Oid types[2] = {TEXTARRAYOID, OIDOID};
    Datum args[2] = {names ? PointerGetDatum(names) : (Datum)0, ObjectIdGetDatum(role)};
    char nulls[2] = {names ? ' ' : 'n', ' '};
    static SPIPlanPtr plan = nullptr;
    uint64 n =
        pg::spi_run_kept(&plan, "reading the categories a role may consume",
                         "SELECT c.id, c.name, EXISTS (SELECT FROM outbox.category_grants g"
                         " WHERE g.category = c.id AND g.privilege = 'CONSUME'"
                         " AND pg_catalog.pg_has_role($2, g.role, 'USAGE'))"
                         " FROM outbox.categories c WHERE CASE WHEN $1 IS NULL"
                         " THEN NOT EXISTS (SELECT FROM outbox.handlers h WHERE h.category = c.id)"
                         " ELSE c.name = ANY ($1) END ORDER BY c.id",
                         2, types, args, nulls, true, SPI_OK_SELECT);
    bool everything = superuser_arg(role);
    Categories result = {0, (int32 *)palloc(sizeof(int32) * Max(n, 1)),
                         (char **)palloc(sizeof(char *) * Max(n, 1))};
    for (uint64 r = 0; r < n; r++) {
        HeapTuple tuple = SPI_tuptable->vals[r];
        bool isnull;
        char *name = SPI_getvalue(tuple, SPI_tuptable->tupdesc, 2);
        if (!everything && !DatumGetBool(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 3, &isnull))) {
            if (names == nullptr)
                continue;
            ereport(ERROR,
                    (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                     errmsg("permission denied to consume category %s", quote_literal_cstr(name)),
                     errhint("The extension's owner grants it with "
                             "outbox.grant_category(%s, role, 'CONSUME').",
                             quote_literal_cstr(name))));
        }
        result.ids[result.n] =
            DatumGetInt32(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 1, &isnull));
        result.names[result.n] = name;
        result.n++;
    }
    if (names != nullptr) {
        Datum *items;
        bool *item_nulls;
        int nitems;
        deconstruct_array(names, TEXTOID, -1, false, TYPALIGN_INT, &items, &item_nulls, &nitems);
        for (int i = 0; i < nitems; i++) {
            char *name = TextDatumGetCString(items[i]);
            bool found = false;
            for (int c = 0; c < result.n && !found; c++)
                found = strcmp(result.names[c], name) == 0;
            if (!found)
                ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                                errmsg("category %s is not registered", quote_literal_cstr(name))));
        }
    }
    if (result.n == 0)
        ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                        errmsg("role %s may consume no category", GetUserNameFromId(role, false)),
                        errhint("The extension's owner grants categories with "
                                "outbox.grant_category(category, role, 'CONSUME').")));
    return result;
}

// The pass this session's claims walk.
SessionPass claimed = {};

// outbox.claim(max_messages, lease, categories, silo, cell_name) and
// outbox.claim_json(...): up to max_messages due messages of whole shards,
// each shard under a lease of its own, written to out.
void claim_messages(FunctionCallInfo fcinfo, const char *function, ClaimOutput *out) {
    refuse_drain_in_handler(function);
    if (PG_ARGISNULL(0))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("max_messages must not be NULL")));
    int32 max_messages = PG_GETARG_INT32(0);
    if (max_messages < 1 || max_messages > max_claim_messages)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("max_messages must be between 1 and %d, not %d", max_claim_messages,
                               max_messages)));
    int64 lease_usecs = lease_usecs_argument(fcinfo, 1);
    ArrayType *names = PG_ARGISNULL(2) ? nullptr : PG_GETARG_ARRAYTYPE_P(2);
    if (names != nullptr) {
        if (ARR_NDIM(names) > 1)
            ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                            errmsg("categories must be a one-dimensional array")));
        if (ArrayGetNItems(ARR_NDIM(names), ARR_DIMS(names)) == 0)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("categories must not be empty"),
                            errhint("Pass NULL for every category the role may consume.")));
        if (array_contains_nulls(names))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("categories must not contain NULL")));
    }
    bool cell = true, control = true;
    char *cell_name = PG_ARGISNULL(4) ? nullptr : text_to_cstring(PG_GETARG_TEXT_PP(4));
    if (!PG_ARGISNULL(3)) {
        Silo silo = silo_argument(fcinfo, 3);
        cell = silo == Silo::Cell;
        control = silo == Silo::Control;
        if (cell && cell_name != nullptr)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("cell_name is for control shards only")));
    } else if (cell_name != nullptr) {
        cell = false; // one cell's messages: the control silo's
    } else if (silo_mode != SILO_MODE_MONOLITH) {
        cell = silo_mode == SILO_MODE_CELL;
        control = silo_mode == SILO_MODE_CONTROL;
    }
    Oid role = GetUserId();

    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    Categories categories = consumable_categories(role, names);
    if (cell_name != nullptr) {
        static SPIPlanPtr plan = nullptr;
        Oid types[1] = {TEXTOID};
        Datum args[1] = {CStringGetTextDatum(cell_name)};
        if (pg::spi_run_kept(&plan, "looking up a cell",
                             "SELECT FROM outbox.cells c WHERE c.name = $1", 1, types, args,
                             nullptr, true, SPI_OK_SELECT) == 0)
            ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                            errmsg("cell_name %s is not a registered cell",
                                   quote_literal_cstr(cell_name))));
    }
    DrainPass *pass =
        session_pass_resume(&claimed, cell, control, categories.ids, categories.n, cell_name);
    Turns turns = turns_begin(role);
    TimestampTz claimed_at = GetCurrentTimestamp();
    TimestampTz lease_until = claimed_at + lease_usecs;
    bool started = false;
    int messages = 0, shards = 0;
    // Rows are read and coalesced as the drain does (SPEC section 4): up to
    // outbox.drain_batch_size rows of a shard a read, so that one object's
    // rows within a read are one message with the newest payload;
    // max_messages counts messages.
    MemoryContext work =
        AllocSetContextCreate(CurrentMemoryContext, "pg_outbox claim", ALLOCSET_DEFAULT_SIZES);
    while (messages < max_messages && shards < drain_max_shards) {
        if (pass == nullptr) {
            if (started)
                break;
            pass = session_pass_begin(&claimed, cell, control, categories.ids, categories.n,
                                      cell_name);
            started = true;
        }
        int wanted = max_messages - messages;
        // The shards of the messages wanted: those past them were read and
        // coalesced for nothing, and waited for the next pass while later
        // partitions went first.
        DrainBatch *batch =
            drain_pass_next(pass, drain_batch_size, drain_max_shards - shards, wanted);
        if (batch == nullptr) {
            session_pass_end(&claimed);
            pass = nullptr;
            continue;
        }
        MemoryContext old = MemoryContextSwitchTo(work);
        LeasedBatch leased;
        TimestampTz *turn_before = turns_leave(&turns, batch);
        lease_batch(batch, &leased);
        // Beyond the messages wanted: not handed out.  Only the batch's
        // last shard can hold them (drain_pass_next's bound); it is claimed
        // with its first messages.
        if (leased.nmessages > wanted)
            leased.nmessages = wanted;
        messages += record_leases(batch, &leased, &categories, role, claimed_at, lease_until,
                                  turn_before, out);
        MemoryContextSwitchTo(old);
        MemoryContextReset(work);
        drain_pass_batch_done(pass);
        shards += batch->nsegments;
    }
    pg::run_as_end(&scope);
    SPI_finish();
}

} // namespace

OUTBOX_FUNCTION(outbox_claim) {
    InitMaterializedSRF(fcinfo, 0);
    auto *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
    ClaimOutput out = {rsinfo->setResult, rsinfo->setDesc, nullptr};
    claim_messages(fcinfo, "outbox.claim()", &out);
    return (Datum)0;
}

// The same messages as one JSON array of arrays: a client parses one value
// instead of 13 columns of every row, and the server writes one (writing
// the rows was a third of a claim's time; docs/consumers.md).
OUTBOX_FUNCTION(outbox_claim_json) {
    // Written after room for the value's header: returned as it is, not
    // copied (a copy of an array near 1 GB would pass MaxAllocSize).
    StringInfoData json;
    initStringInfo(&json);
    appendStringInfoSpaces(&json, VARHDRSZ);
    appendStringInfoChar(&json, '[');
    ClaimOutput out = {nullptr, nullptr, &json};
    claim_messages(fcinfo, "outbox.claim_json()", &out);
    appendStringInfoChar(&json, ']');
    SET_VARSIZE(json.data, json.len);
    PG_RETURN_TEXT_P((text *)json.data);
}
