// outbox._move_trigger(): the change log and the fence of the moves a cell
// takes part in (extension/functions/69_relocation/40_move_cell_log.sql installs it on
// every Organization-scoped table: AFTER INSERT, UPDATE and DELETE FOR EACH
// STATEMENT with transition tables, BEFORE TRUNCATE, all ENABLE ALWAYS).
// Its arguments: the table's key, its primary key column, then each
// reference's column and the parent's table key.
//
// For each move under way here, one statement:
//   - a source that is not fenced yet logs the keys of every row the
//     statement changed (outbox.move_changes, in the writing transaction;
//     whose rows they are is decided when the catch-up reads them);
//   - a fenced side refuses (OBM01) a statement that changes one of the
//     organization's rows (outbox.move_members), writes a row that refers
//     to one, or writes its root.
// A relocation's own statements pass (relocation/import/relocation_writing.hpp).
// TRUNCATE of such a table is refused while a move is under way.
//
// The keys are read from the transition tables here, in C; what is done
// with them runs as the extension's owner (the writer may not read
// pg_outbox's tables), in SQL that runs none of the writer's code: only
// int8 keys and table keys reach it.
//
// This file calls PostgreSQL directly and owns no C++ objects with
// destructors: an ERROR may unwind through any of its frames.
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "pg/transition_rows.hpp"
#include "registry/table_meta.hpp"
#include "relocation/import/relocation_writing.hpp"

extern "C" {
#include "utils/array.h"
#include "utils/datum.h"
}

using namespace pgoutbox;

namespace {

// The moves a statement on a table must log or check.  A source that gave
// the organization away holds none of its rows any more: only its root can
// be written again, so its fence costs the other tables' statements
// nothing.
const char *moves_sql =
    "SELECT o.relocation, o.organization, o.side = 'source', o.state = 'moving', o.fenced,"
    " o.to_cell, o.plan OPERATOR(pg_catalog.->>) 'root'"
    " FROM outbox.organization_moves o WHERE o.side <> 'control'"
    " AND (o.fenced OR (o.side = 'source' AND o.state = 'moving'))"
    " AND NOT (o.side = 'source' AND o.state = 'complete'"
    " AND o.plan OPERATOR(pg_catalog.->>) 'root' <> $1)";

const char *log_sql = "INSERT INTO outbox.move_changes (relocation, model, pk)"
                      " SELECT DISTINCT $1, $2, k FROM pg_catalog.unnest($3) k";

// (model, key) pairs: the statement's own rows, and the rows its new rows
// refer to.
const char *hit_sql =
    "SELECT x.m, x.k FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3)) x(m, k)"
    " WHERE (x.m = $4 AND x.k = $5) OR EXISTS (SELECT FROM outbox.move_members mm"
    " WHERE mm.relocation = $1 AND mm.model = x.m AND mm.pk = x.k AND mm.present) LIMIT 1";

const char *truncate_sql = "SELECT o.organization, o.from_cell, o.to_cell"
                           " FROM outbox.organization_moves o WHERE o.side <> 'control'"
                           " AND o.state NOT IN ('complete', 'cancelled') LIMIT 1";

struct Move {
    Datum relocation; // uuid
    int64 organization;
    bool source;
    bool moving;
    bool fenced;
    char *to_cell;
    char *root;
};

// The keys a statement wrote or removed, with the table each names.
struct Keys {
    int n = 0, size = 0;
    Datum *models = nullptr; // text
    Datum *keys = nullptr;   // int8
};

void add_key(Keys *keys, Datum model, int64 key) {
    if (keys->n == keys->size) {
        keys->size = Max(keys->size * 2, 64);
        keys->models = keys->models ? (Datum *)repalloc(keys->models, sizeof(Datum) * keys->size)
                                    : (Datum *)palloc(sizeof(Datum) * keys->size);
        keys->keys = keys->keys ? (Datum *)repalloc(keys->keys, sizeof(Datum) * keys->size)
                                : (Datum *)palloc(sizeof(Datum) * keys->size);
    }
    keys->models[keys->n] = model;
    keys->keys[keys->n] = Int64GetDatum(key);
    keys->n++;
}

// An integer column of rel by name: the keys and references a move follows.
AttrNumber integer_column(Relation rel, const char *column, Oid *type) {
    AttrNumber attnum = get_attnum(RelationGetRelid(rel), column);
    if (attnum == InvalidAttrNumber)
        ereport(ERROR,
                (errcode(ERRCODE_UNDEFINED_COLUMN),
                 errmsg("column \"%s\" of %s does not exist", column, RelationGetRelationName(rel)),
                 errhint("The move's triggers on it are out of date: cancel the move.")));
    *type = TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid;
    if (*type != INT2OID && *type != INT4OID && *type != INT8OID)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("column \"%s\" of %s is not an integer: a move cannot follow it",
                               column, RelationGetRelationName(rel))));
    return attnum;
}

// Adds column's value in every row of rows to keys, as the table model's.
void read_keys(Keys *keys, Relation rel, Tuplestorestate *rows, const char *column, Datum model,
               TupleTableSlot *slot, MemoryContext per_row) {
    Oid type;
    AttrNumber attnum = integer_column(rel, column, &type);
    MemoryContext into = CurrentMemoryContext;
    pg::for_each_row(rows, slot, per_row, [&](TupleTableSlot *row) {
        bool isnull;
        Datum value = slot_getattr(row, attnum, &isnull);
        if (!isnull) {
            MemoryContext old = MemoryContextSwitchTo(into);
            add_key(keys, model, integer_datum(value, type));
            MemoryContextSwitchTo(old);
        }
    });
}

Datum text_array(const Datum *values, int n) {
    return PointerGetDatum(
        construct_array(const_cast<Datum *>(values), n, TEXTOID, -1, false, TYPALIGN_INT));
}

Datum int8_datum_array(const Datum *values, int n) {
    return PointerGetDatum(construct_array(const_cast<Datum *>(values), n, INT8OID, 8,
                                           FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

// One of this file's statements (a kept plan, each with a fresh snapshot,
// as PL/pgSQL's would be: a fence that committed after the writer's
// statement began refuses it already) as the extension's owner, in an SPI
// connection the caller ends with SPI_finish once it has read
// SPI_tuptable.
uint64 run_as_owner(SPIPlanPtr *plan, const char *what, const char *sql, int nargs, Oid *types,
                    Datum *values, int expected) {
    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    uint64 n = pg::spi_run_kept(plan, what, sql, nargs, types, values, nullptr, false, expected);
    pg::run_as_end(&scope);
    return n;
}

void refuse_truncate(const char *model) {
    static SPIPlanPtr plan = nullptr;
    uint64 n =
        run_as_owner(&plan, "looking for moves", truncate_sql, 0, nullptr, nullptr, SPI_OK_SELECT);
    if (n > 0) {
        HeapTuple row = SPI_tuptable->vals[0];
        TupleDesc desc = SPI_tuptable->tupdesc;
        ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
                        errmsg("cannot truncate %s: organization %s is moving from cell %s to "
                               "cell %s",
                               model, SPI_getvalue(row, desc, 1), SPI_getvalue(row, desc, 2),
                               SPI_getvalue(row, desc, 3)),
                        errhint("Delete the rows instead, or wait for the move to end.")));
    }
    SPI_finish();
}

// The moves under way here that concern a statement on the table model, in
// CurrentMemoryContext.
int read_moves(const char *model, Move **moves) {
    static SPIPlanPtr plan = nullptr;
    MemoryContext caller = CurrentMemoryContext;
    Oid types[1] = {TEXTOID};
    Datum values[1] = {CStringGetTextDatum(model)};
    uint64 n = run_as_owner(&plan, "looking for moves", moves_sql, 1, types, values, SPI_OK_SELECT);
    MemoryContext spi = MemoryContextSwitchTo(caller);
    *moves = (Move *)palloc0(sizeof(Move) * (n + 1));
    for (uint64 i = 0; i < n; i++) {
        HeapTuple row = SPI_tuptable->vals[i];
        TupleDesc desc = SPI_tuptable->tupdesc;
        bool isnull;
        Move *move = &(*moves)[i];
        move->relocation = datumCopy(SPI_getbinval(row, desc, 1, &isnull), false, 16);
        move->organization = DatumGetInt64(SPI_getbinval(row, desc, 2, &isnull));
        move->source = DatumGetBool(SPI_getbinval(row, desc, 3, &isnull));
        move->moving = DatumGetBool(SPI_getbinval(row, desc, 4, &isnull));
        move->fenced = DatumGetBool(SPI_getbinval(row, desc, 5, &isnull));
        char *to_cell = SPI_getvalue(row, desc, 6);
        char *root = SPI_getvalue(row, desc, 7);
        move->to_cell = pstrdup(to_cell ? to_cell : "");
        move->root = pstrdup(root ? root : "");
    }
    MemoryContextSwitchTo(spi);
    SPI_finish();
    return (int)n;
}

void log_changes(const Move *move, Datum model, Datum keys) {
    static SPIPlanPtr plan = nullptr;
    Oid types[3] = {UUIDOID, TEXTOID, INT8ARRAYOID};
    Datum values[3] = {move->relocation, model, keys};
    run_as_owner(&plan, "logging a move's changes", log_sql, 3, types, values, SPI_OK_INSERT);
    SPI_finish();
}

void check_fence(const Move *move, Datum models, Datum keys) {
    static SPIPlanPtr plan = nullptr;
    Oid types[5] = {UUIDOID, TEXTARRAYOID, INT8ARRAYOID, TEXTOID, INT8OID};
    Datum values[5] = {move->relocation, models, keys, CStringGetTextDatum(move->root),
                       Int64GetDatum(move->organization)};
    uint64 n =
        run_as_owner(&plan, "checking a move's fence", hit_sql, 5, types, values, SPI_OK_SELECT);
    if (n == 0) {
        SPI_finish();
        return;
    }
    HeapTuple row = SPI_tuptable->vals[0];
    TupleDesc desc = SPI_tuptable->tupdesc;
    const char *hit_model = SPI_getvalue(row, desc, 1);
    const char *hit = SPI_getvalue(row, desc, 2);
    int sqlstate = MAKE_SQLSTATE('O', 'B', 'M', '0', '1');
    if (move->source)
        ereport(ERROR,
                (errcode(sqlstate),
                 errmsg("organization " INT64_FORMAT " has moved to cell %s", move->organization,
                        move->to_cell),
                 errdetail("Row %s of %s is the organization's, which cell %s holds now.", hit,
                           hit_model, move->to_cell),
                 errhint("Send the organization's requests to cell %s "
                         "(outbox.organization_cell(" INT64_FORMAT ") on control) and try again.",
                         move->to_cell, move->organization)));
    ereport(
        ERROR,
        (errcode(sqlstate),
         errmsg("organization " INT64_FORMAT " is moving to this cell and takes no writes here yet",
                move->organization),
         errdetail("Row %s of %s is the organization's.", hit, hit_model),
         errhint("Until the move's cutover its requests go where "
                 "outbox.organization_cell(" INT64_FORMAT ") on control says; try again there.",
                 move->organization)));
}

} // namespace

OUTBOX_FUNCTION(outbox__move_trigger) {
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._move_trigger() was not called by the trigger manager")));
    auto *td = (TriggerData *)fcinfo->context;
    Trigger *trigger = td->tg_trigger;
    if (!TRIGGER_FIRED_FOR_STATEMENT(td->tg_event) || trigger->tgnargs < 2 ||
        trigger->tgnargs % 2 != 0)
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._move_trigger() must be a statement trigger with a table "
                               "key, a primary key and pairs of references")));
    if (relocation_writing)
        return PointerGetDatum(nullptr);
    const char *model = trigger->tgargs[0];
    if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event)) {
        refuse_truncate(model);
        return PointerGetDatum(nullptr);
    }
    bool deleting = TRIGGER_FIRED_BY_DELETE(td->tg_event);
    bool inserting = TRIGGER_FIRED_BY_INSERT(td->tg_event);
    if ((!deleting && td->tg_newtable == nullptr) || (!inserting && td->tg_oldtable == nullptr))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._move_trigger() needs its transition tables")));
    if (tuplestore_tuple_count(deleting ? td->tg_oldtable : td->tg_newtable) == 0)
        return PointerGetDatum(nullptr);
    Move *moves = nullptr;
    int nmoves = read_moves(model, &moves);
    if (nmoves == 0)
        return PointerGetDatum(nullptr);

    Relation rel = td->tg_relation;
    TupleTableSlot *slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsMinimalTuple);
    MemoryContext per_row =
        AllocSetContextCreate(CurrentMemoryContext, "pg_outbox move row", ALLOCSET_SMALL_SIZES);
    Datum own_model = CStringGetTextDatum(model);
    const char *pk = trigger->tgargs[1];
    Keys own;
    if (!deleting)
        read_keys(&own, rel, td->tg_newtable, pk, own_model, slot, per_row);
    if (!inserting)
        read_keys(&own, rel, td->tg_oldtable, pk, own_model, slot, per_row);
    // The fence also looks at what the new rows refer to.
    Keys pairs = own;
    bool with_references = false;
    for (int m = 0; m < nmoves; m++)
        with_references = with_references || moves[m].fenced;
    if (with_references && !deleting && trigger->tgnargs > 2) {
        pairs = Keys{};
        for (int i = 0; i < own.n; i++)
            add_key(&pairs, own.models[i], DatumGetInt64(own.keys[i]));
        for (int i = 2; i + 1 < trigger->tgnargs; i += 2)
            read_keys(&pairs, rel, td->tg_newtable, trigger->tgargs[i],
                      CStringGetTextDatum(trigger->tgargs[i + 1]), slot, per_row);
    }
    ExecDropSingleTupleTableSlot(slot);
    MemoryContextDelete(per_row);

    Datum own_keys = int8_datum_array(own.keys, own.n);
    Datum pair_models = text_array(pairs.models, pairs.n);
    Datum pair_keys = int8_datum_array(pairs.keys, pairs.n);
    for (int m = 0; m < nmoves; m++) {
        const Move *move = &moves[m];
        if (move->source && move->moving && !move->fenced && own.n > 0)
            log_changes(move, own_model, own_keys);
        if (move->fenced && pairs.n > 0)
            check_fence(move, pair_models, pair_keys);
    }
    return PointerGetDatum(nullptr);
}
