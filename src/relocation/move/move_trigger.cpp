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
#include "relocation/move/move_trigger.hpp"

#include "pg/compat.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "pg/transition_rows.hpp"
#include "registry/table_meta.hpp"
#include "relocation/import/relocation_writing.hpp"

extern "C" {
#include "executor/executor.h"
#include "nodes/params.h"
#include "parser/parsetree.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "catalog/namespace.h"
#include "utils/datum.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
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

// One of this file's statements (a kept plan) as the extension's owner, in
// an SPI connection the caller ends with SPI_finish once it has read
// SPI_tuptable.  With the latest snapshot, whatever the writer's isolation
// level, as a foreign key's check reads the referenced row: a fence or a
// move that committed before this statement is seen, also by a REPEATABLE
// READ transaction that began before it.  The source's in_flight step
// then waits only for the transactions that hold a lock on a moving table
// (40_move_cell_log.sql), not for every transaction of the database.
uint64 run_as_owner(SPIPlanPtr *plan, const char *what, const char *sql, int nargs, Oid *types,
                    Datum *values, int expected) {
    SPI_connect();
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    int rc = SPI_execute_snapshot(pg::spi_prepare_kept(plan, what, sql, nargs, types), values,
                                  nullptr, GetLatestSnapshot(), InvalidSnapshot, false, true, 0);
    if (rc != expected)
        elog(ERROR, "pg_outbox: %s failed: %s", what, SPI_result_code_string(rc));
    pg::run_as_end(&scope);
    return SPI_processed;
}

// Whether this cell has a move under way or a fence that statements must
// look at: read once, then kept until outbox.organization_moves changes.
// The move's triggers are on every Organization-scoped table ahead of any
// move (issue 44), and a cell that has none pays no query per statement.
// Every change of that table sends a relcache invalidation of it at
// commit (outbox._move_moves_changed), which a backend takes in when it
// starts a transaction or locks a table.  A transaction that locked its
// table before a prepare committed may go on seeing none: the prepare's
// export waits for every such transaction (_move_export), and the fence
// comes after the prepare.
enum class MovesHere { Unknown, None, Some };
MovesHere moves_here = MovesHere::Unknown;
Oid moves_relid = InvalidOid;

void moves_changed(Datum, Oid relid) {
    if (relid == InvalidOid || moves_relid == InvalidOid || relid == moves_relid)
        moves_here = MovesHere::Unknown;
}

const char *moves_here_sql = "SELECT EXISTS (SELECT FROM outbox.organization_moves o"
                             " WHERE o.side <> 'control' AND (o.fenced OR o.state = 'moving'))";

bool any_moves_here() {
    static bool registered = false;
    if (!registered) {
        CacheRegisterRelcacheCallback(moves_changed, (Datum)0);
        registered = true;
    }
    if (moves_here != MovesHere::Unknown)
        return moves_here == MovesHere::Some;
    moves_relid = get_relname_relid("organization_moves", get_namespace_oid("outbox", false));
    static SPIPlanPtr plan = nullptr;
    run_as_owner(&plan, "looking for moves", moves_here_sql, 0, nullptr, nullptr, SPI_OK_SELECT);
    bool isnull;
    bool some =
        DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    SPI_finish();
    moves_here = some ? MovesHere::Some : MovesHere::None;
    return some;
}

void refuse_truncate(const char *model) {
    if (!any_moves_here())
        return;
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
    if (!any_moves_here())
        return 0;
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

// The organizations this cell gave away for good (a complete move whose
// source is still fenced), read once per statement and transaction.
struct GoneOrganizations {
    LocalTransactionId lxid = InvalidLocalTransactionId;
    TimestampTz statement = 0;
    int n = 0;
    int64 *organizations = nullptr; // TopTransactionContext
    char **to_cells = nullptr;
    char **roots = nullptr;
};

GoneOrganizations gone;

const char *gone_sql =
    "SELECT o.organization, o.to_cell, o.plan OPERATOR(pg_catalog.->>) 'root'"
    " FROM outbox.organization_moves o WHERE o.side = 'source' AND o.state = 'complete'"
    " AND o.fenced";

void read_gone() {
    if (gone.lxid == pg::local_xid() && gone.statement == GetCurrentStatementStartTimestamp())
        return;
    if (!any_moves_here()) {
        gone.n = 0;
        return;
    }
    static SPIPlanPtr plan = nullptr;
    uint64 n = run_as_owner(&plan, "looking for moved organizations", gone_sql, 0, nullptr, nullptr,
                            SPI_OK_SELECT);
    MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
    gone.organizations = (int64 *)palloc(sizeof(int64) * (n + 1));
    gone.to_cells = (char **)palloc(sizeof(char *) * (n + 1));
    gone.roots = (char **)palloc(sizeof(char *) * (n + 1));
    for (uint64 i = 0; i < n; i++) {
        HeapTuple row = SPI_tuptable->vals[i];
        TupleDesc desc = SPI_tuptable->tupdesc;
        bool isnull;
        gone.organizations[i] = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));
        char *to_cell = SPI_getvalue(row, desc, 2);
        char *root = SPI_getvalue(row, desc, 3);
        gone.to_cells[i] = pstrdup(to_cell ? to_cell : "");
        gone.roots[i] = pstrdup(root ? root : "");
    }
    MemoryContextSwitchTo(old);
    SPI_finish();
    gone.n = (int)n;
    gone.lxid = pg::local_xid();
    gone.statement = GetCurrentStatementStartTimestamp();
}

// Refuses (OBM01) a new row whose column refers to an organization this
// cell gave away, when column refers to that move's root table.
void refuse_gone_reference(Relation rel, HeapTuple tuple, const char *column, const char *parent) {
    for (int g = 0; g < gone.n; g++) {
        if (strcmp(gone.roots[g], parent) != 0)
            continue;
        Oid type;
        AttrNumber attnum = integer_column(rel, column, &type);
        bool isnull;
        Datum value = heap_getattr(tuple, attnum, RelationGetDescr(rel), &isnull);
        if (isnull || integer_datum(value, type) != gone.organizations[g])
            continue;
        ereport(ERROR,
                (errcode(MAKE_SQLSTATE('O', 'B', 'M', '0', '1')),
                 errmsg("organization " INT64_FORMAT " has moved to cell %s", gone.organizations[g],
                        gone.to_cells[g]),
                 errdetail("The new row of %s refers to it (column %s).",
                           RelationGetRelationName(rel), column),
                 errhint("Send the organization's requests to cell %s "
                         "(outbox.organization_cell(" INT64_FORMAT ") on control) and try again.",
                         gone.to_cells[g], gone.organizations[g])));
    }
}

// The first organization this cell gave away for good whose root is root
// and whose key is one of values (n of them); -1 if none.
int gone_among(const char *root, const int64 *values, int n, int64 *hit) {
    for (int g = 0; g < gone.n; g++) {
        if (strcmp(gone.roots[g], root) != 0)
            continue;
        for (int i = 0; i < n; i++)
            if (values[i] == gone.organizations[g]) {
                *hit = values[i];
                return g;
            }
    }
    return -1;
}

// The integer keys a WHERE clause compares column attnum of range table
// entry rti with (=, IN, = ANY of a constant array), under AND and OR
// only: a statement that names an organization this way targets its rows.
struct Named {
    int n = 0, size = 0;
    int64 *values = nullptr;
};

void add_named(Named *named, int64 value) {
    if (named->n == named->size) {
        named->size = Max(named->size * 2, 8);
        named->values = named->values
                            ? (int64 *)repalloc(named->values, sizeof(int64) * named->size)
                            : (int64 *)palloc(sizeof(int64) * named->size);
    }
    named->values[named->n++] = value;
}

bool is_integer_type(Oid type) {
    return type == INT2OID || type == INT4OID || type == INT8OID;
}

bool is_column(Node *node, Index rti, AttrNumber attnum) {
    while (node != nullptr && IsA(node, RelabelType))
        node = (Node *)((RelabelType *)node)->arg;
    return node != nullptr && IsA(node, Var) && ((Var *)node)->varno == (int)rti &&
           ((Var *)node)->varattno == attnum && ((Var *)node)->varlevelsup == 0;
}

// A constant or a parameter's value, if an integer.
bool integer_value(Node *node, ParamListInfo params, int64 *value) {
    while (node != nullptr && IsA(node, RelabelType))
        node = (Node *)((RelabelType *)node)->arg;
    if (node == nullptr)
        return false;
    if (IsA(node, Const)) {
        auto *c = (Const *)node;
        if (c->constisnull || !is_integer_type(c->consttype))
            return false;
        *value = integer_datum(c->constvalue, c->consttype);
        return true;
    }
    if (IsA(node, Param) && ((Param *)node)->paramkind == PARAM_EXTERN && params != nullptr) {
        int id = ((Param *)node)->paramid;
        if (id < 1 || id > params->numParams)
            return false;
        ParamExternData workspace;
        ParamExternData *p = params->paramFetch != nullptr
                                 ? params->paramFetch(params, id, false, &workspace)
                                 : &params->params[id - 1];
        if (p == nullptr || p->isnull || !is_integer_type(p->ptype))
            return false;
        *value = integer_datum(p->value, p->ptype);
        return true;
    }
    return false;
}

bool is_equality(Oid opno) {
    char *name = get_opname(opno);
    return name != nullptr && strcmp(name, "=") == 0;
}

void named_in(Node *qual, Index rti, AttrNumber attnum, ParamListInfo params, Named *named) {
    if (qual == nullptr)
        return;
    if (IsA(qual, List)) {
        ListCell *lc;
        foreach (lc, (List *)qual)
            named_in((Node *)lfirst(lc), rti, attnum, params, named);
    } else if (IsA(qual, BoolExpr) && ((BoolExpr *)qual)->boolop != NOT_EXPR) {
        named_in((Node *)((BoolExpr *)qual)->args, rti, attnum, params, named);
    } else if (IsA(qual, OpExpr) && list_length(((OpExpr *)qual)->args) == 2 &&
               is_equality(((OpExpr *)qual)->opno)) {
        Node *left = (Node *)linitial(((OpExpr *)qual)->args);
        Node *right = (Node *)lsecond(((OpExpr *)qual)->args);
        int64 value;
        if ((is_column(left, rti, attnum) && integer_value(right, params, &value)) ||
            (is_column(right, rti, attnum) && integer_value(left, params, &value)))
            add_named(named, value);
    } else if (IsA(qual, ScalarArrayOpExpr) && ((ScalarArrayOpExpr *)qual)->useOr &&
               is_equality(((ScalarArrayOpExpr *)qual)->opno)) {
        auto *saop = (ScalarArrayOpExpr *)qual;
        Node *array = (Node *)lsecond(saop->args);
        if (!is_column((Node *)linitial(saop->args), rti, attnum) || !IsA(array, Const) ||
            ((Const *)array)->constisnull)
            return;
        ArrayType *a = DatumGetArrayTypeP(((Const *)array)->constvalue);
        Oid type = ARR_ELEMTYPE(a);
        if (!is_integer_type(type))
            return;
        int16 typlen;
        bool typbyval;
        char typalign;
        get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
        Datum *items;
        bool *nulls;
        int n;
        deconstruct_array(a, type, typlen, typbyval, typalign, &items, &nulls, &n);
        for (int i = 0; i < n; i++)
            if (!nulls[i])
                add_named(named, integer_datum(items[i], type));
    }
}

// The scans of range table entry rti in plan (a statement's), and the
// conditions each applies to its rows.
void scan_quals(Plan *plan, Index rti, List **quals) {
    if (plan == nullptr)
        return;
    switch (nodeTag(plan)) {
    case T_SeqScan:
    case T_SampleScan:
    case T_TidScan:
    case T_TidRangeScan:
        if (((Scan *)plan)->scanrelid == rti)
            *quals = lappend(*quals, plan->qual);
        break;
    case T_IndexScan:
        if (((Scan *)plan)->scanrelid == rti)
            *quals = lappend(lappend(*quals, plan->qual), ((IndexScan *)plan)->indexqualorig);
        break;
    case T_BitmapHeapScan:
        if (((Scan *)plan)->scanrelid == rti)
            *quals = lappend(lappend(*quals, plan->qual), ((BitmapHeapScan *)plan)->bitmapqualorig);
        break;
    case T_Append: {
        ListCell *lc;
        foreach (lc, ((Append *)plan)->appendplans)
            scan_quals((Plan *)lfirst(lc), rti, quals);
        break;
    }
    case T_MergeAppend: {
        ListCell *lc;
        foreach (lc, ((MergeAppend *)plan)->mergeplans)
            scan_quals((Plan *)lfirst(lc), rti, quals);
        break;
    }
    case T_SubqueryScan:
        scan_quals(((SubqueryScan *)plan)->subplan, rti, quals);
        break;
    default:
        break;
    }
    scan_quals(plan->lefttree, rti, quals);
    scan_quals(plan->righttree, rti, quals);
}

// The arguments of relid's move statement trigger called name, copied
// (the relation cache may rebuild its entry at any later lookup); 0 if it
// has none.
int move_trigger_args(Oid relid, const char *name, char ***args) {
    Relation rel = RelationIdGetRelation(relid);
    if (rel == nullptr)
        return 0;
    int nargs = 0;
    for (int i = 0; rel->trigdesc != nullptr && i < rel->trigdesc->numtriggers; i++) {
        const Trigger *t = &rel->trigdesc->triggers[i];
        if (strcmp(t->tgname, name) != 0 || t->tgnargs < 2 || t->tgnargs % 2 != 0)
            continue;
        char *proname = get_func_name(t->tgfoid);
        Oid nsp = get_func_namespace(t->tgfoid);
        char *nspname = OidIsValid(nsp) ? get_namespace_name(nsp) : nullptr;
        if (proname == nullptr || nspname == nullptr || strcmp(proname, "_move_trigger") != 0 ||
            strcmp(nspname, "outbox") != 0)
            continue;
        nargs = t->tgnargs;
        *args = (char **)palloc(sizeof(char *) * nargs);
        for (int a = 0; a < nargs; a++)
            (*args)[a] = pstrdup(t->tgargs[a]);
        break;
    }
    RelationClose(rel);
    return nargs;
}

// Refuses (OBM01) an UPDATE or DELETE of a table with the move's triggers
// whose WHERE clause names, by the root's key or by a column that refers
// to the root, an organization this cell gave away: it matches none of the
// organization's rows here (they left with it), and a stale client would
// take "0 rows" for an answer (issue 44).
void refuse_stale_statement(QueryDesc *query) {
    PlannedStmt *stmt = query->plannedstmt;
    if ((stmt->commandType != CMD_UPDATE && stmt->commandType != CMD_DELETE) ||
        stmt->resultRelations == NIL || relocation_writing)
        return;
    const char *name =
        stmt->commandType == CMD_UPDATE ? "pg_outbox_move_update" : "pg_outbox_move_delete";
    ListCell *lc;
    foreach (lc, stmt->resultRelations) {
        Index rti = (Index)lfirst_int(lc);
        RangeTblEntry *rte = rt_fetch(rti, stmt->rtable);
        if (rte->rtekind != RTE_RELATION)
            continue;
        char **args = nullptr;
        int nargs = move_trigger_args(rte->relid, name, &args);
        if (nargs == 0)
            continue;
        List *quals = NIL;
        scan_quals(stmt->planTree, rti, &quals);
        if (quals == NIL)
            continue;
        // The root's key names its organization; a reference, its parent's.
        for (int i = 0; i < nargs; i += 2) {
            const char *column = i == 0 ? args[1] : args[i];
            const char *parent = i == 0 ? args[0] : args[i + 1];
            AttrNumber attnum = get_attnum(rte->relid, column);
            if (attnum == InvalidAttrNumber)
                continue;
            Named named;
            named_in((Node *)quals, rti, attnum, query->params, &named);
            if (named.n == 0)
                continue;
            read_gone();
            int64 hit;
            int g = gone_among(parent, named.values, named.n, &hit);
            if (g < 0)
                continue;
            ereport(ERROR,
                    (errcode(MAKE_SQLSTATE('O', 'B', 'M', '0', '1')),
                     errmsg("organization " INT64_FORMAT " has moved to cell %s", hit,
                            gone.to_cells[g]),
                     errdetail("The statement names it (%s.%s = " INT64_FORMAT
                               "); this cell holds none of its rows.",
                               get_rel_name(rte->relid), column, hit),
                     errhint("Send the organization's requests to cell %s "
                             "(outbox.organization_cell(" INT64_FORMAT ") on control) and try "
                             "again.",
                             gone.to_cells[g], hit)));
        }
    }
}

ExecutorStart_hook_type previous_executor_start = nullptr;

void stale_statement_check(QueryDesc *query, int eflags) {
    if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) == 0)
        refuse_stale_statement(query);
    if (previous_executor_start != nullptr)
        previous_executor_start(query, eflags);
    else
        standard_ExecutorStart(query, eflags);
}

} // namespace

void pgoutbox::relocation::install_stale_statement_check() {
    previous_executor_start = ExecutorStart_hook;
    ExecutorStart_hook = stale_statement_check;
}

// outbox._move_row_trigger(): BEFORE INSERT OR UPDATE FOR EACH ROW, on the
// Organization-scoped tables that refer to the scope's root and on the root
// itself, with the statement trigger's arguments.  A stale client's new row
// that refers to an organization this cell gave away gets OBM01 naming its
// new cell, before the foreign key check fails with 23503 (issue 44): the
// statement trigger fires after the foreign key's.
OUTBOX_FUNCTION(outbox__move_row_trigger) {
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR,
                (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                 errmsg("outbox._move_row_trigger() was not called by the trigger manager")));
    auto *td = (TriggerData *)fcinfo->context;
    Trigger *trigger = td->tg_trigger;
    if (!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
        TRIGGER_FIRED_BY_DELETE(td->tg_event) || trigger->tgnargs < 2 || trigger->tgnargs % 2 != 0)
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("outbox._move_row_trigger() must be a BEFORE INSERT OR UPDATE row "
                               "trigger with a table key, a primary key and pairs of references")));
    HeapTuple tuple = TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_newtuple : td->tg_trigtuple;
    if (relocation_writing)
        return PointerGetDatum(tuple);
    read_gone();
    if (gone.n == 0)
        return PointerGetDatum(tuple);
    Relation rel = td->tg_relation;
    refuse_gone_reference(rel, tuple, trigger->tgargs[1], trigger->tgargs[0]);
    for (int i = 2; i + 1 < trigger->tgnargs; i += 2)
        refuse_gone_reference(rel, tuple, trigger->tgargs[i], trigger->tgargs[i + 1]);
    return PointerGetDatum(tuple);
}

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

// outbox._move_moves_changed(): an AFTER statement trigger on
// outbox.organization_moves.  Tells every backend at commit that the moves
// here changed (any_moves_here reads them again).
OUTBOX_FUNCTION(outbox__move_moves_changed) {
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR,
                (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                 errmsg("outbox._move_moves_changed() was not called by the trigger manager")));
    auto *td = (TriggerData *)fcinfo->context;
    CacheInvalidateRelcacheByRelid(RelationGetRelid(td->tg_relation));
    return PointerGetDatum(nullptr);
}
