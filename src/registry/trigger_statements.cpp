// outbox._trigger_statement(kind, tbl, arguments): the DDL of pg_outbox's
// triggers on an application's table, its names quoted here with
// quote_identifier and nowhere else: capture's triggers (the registry and
// the DDL guard), the move's (relocation/move), a trigger's DROP, and the
// LOCK TABLE a move's DDL takes first.  Each CREATE comes with its ALTER
// TABLE ... ENABLE ALWAYS: session_replication_role = replica must not
// turn capture or a move's fence off.
//
// The text is built in palloc'd memory (StringInfo) by frames that own
// nothing with a destructor, so a PostgreSQL error may unwind them.
#include "pg/guard.hpp"

extern "C" {
#include "catalog/pg_type_d.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
}

using namespace pgoutbox;

namespace {

// A statement trigger of capture's or of the move's: its name, its event,
// its transition tables and its function.
struct TriggerShape {
    const char *name;
    const char *timing_and_event;
    const char *transition_tables; // "" for none
    const char *function;          // called with the kind's arguments
};

constexpr TriggerShape capture_triggers[] = {
    {"outbox_capture_insert", "AFTER INSERT", "REFERENCING NEW TABLE AS outbox_new",
     "outbox.capture_statement"},
    {"outbox_capture_update", "AFTER UPDATE",
     "REFERENCING OLD TABLE AS outbox_old NEW TABLE AS outbox_new", "outbox.capture_statement"},
    {"outbox_capture_delete", "AFTER DELETE", "REFERENCING OLD TABLE AS outbox_old",
     "outbox.capture_statement"},
    {"outbox_capture_truncate", "BEFORE TRUNCATE", "", "outbox.capture_truncate"},
};

constexpr TriggerShape move_triggers[] = {
    {"pg_outbox_move_insert", "AFTER INSERT", "REFERENCING NEW TABLE AS pg_outbox_new",
     "outbox._move_trigger"},
    {"pg_outbox_move_update", "AFTER UPDATE",
     "REFERENCING OLD TABLE AS pg_outbox_old NEW TABLE AS pg_outbox_new", "outbox._move_trigger"},
    {"pg_outbox_move_delete", "AFTER DELETE", "REFERENCING OLD TABLE AS pg_outbox_old",
     "outbox._move_trigger"},
    {"pg_outbox_move_truncate", "BEFORE TRUNCATE", "", "outbox._move_trigger"},
};

// LOCK TABLE's modes, as the move's steps name them.
constexpr const char *lock_modes[] = {
    "ACCESS SHARE", "ROW SHARE",           "ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE",
    "SHARE",        "SHARE ROW EXCLUSIVE", "EXCLUSIVE",     "ACCESS EXCLUSIVE"};

// The elements of arguments, as C strings; NULL refused.
const char **read_arguments(ArrayType *array, int *count) {
    if (ARR_NDIM(array) > 1)
        ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                        errmsg("arguments must be a one-dimensional array")));
    Datum *values;
    bool *nulls;
    deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &values, &nulls, count);
    auto **texts = (const char **)palloc(sizeof(char *) * Max(*count, 1));
    for (int i = 0; i < *count; i++) {
        if (nulls[i])
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("arguments must not hold NULL")));
        texts[i] = TextDatumGetCString(values[i]);
    }
    return texts;
}

void expect_arguments(const char *kind, int count, int expected, const char *what) {
    if (count != expected)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("arguments: kind %s takes %s, not %d argument(s)", kind, what, count)));
}

void append_create(StringInfo sql, const TriggerShape &shape, const char *table, const char *level,
                   const char *when, const char *call_arguments) {
    appendStringInfo(sql,
                     "CREATE TRIGGER %s %s ON %s%s%s FOR EACH %s%s%s EXECUTE FUNCTION %s(%s); ",
                     shape.name, shape.timing_and_event, table,
                     *shape.transition_tables != '\0' ? " " : "", shape.transition_tables, level,
                     *when != '\0' ? " " : "", when, shape.function, call_arguments);
}

void append_enable(StringInfo sql, const char *table, const TriggerShape *shapes, int n) {
    appendStringInfo(sql, "ALTER TABLE %s", table);
    for (int i = 0; i < n; i++)
        appendStringInfo(sql, "%s ENABLE ALWAYS TRIGGER %s", i == 0 ? "" : ",", shapes[i].name);
}

} // namespace

OUTBOX_FUNCTION(outbox__trigger_statement) {
    const char *names[] = {"kind", "tbl", "arguments"};
    for (int a = 0; a < 3; a++)
        if (PG_ARGISNULL(a))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s must not be NULL", names[a])));
    const char *kind = text_to_cstring(PG_GETARG_TEXT_PP(0));
    Oid relid = PG_GETARG_OID(1);
    const char *relname = get_rel_name(relid);
    if (relname == nullptr)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("tbl: relation with OID %u does not exist", relid)));
    const char *table =
        quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)), relname);
    int count;
    const char **arguments = read_arguments(PG_GETARG_ARRAYTYPE_P(2), &count);

    StringInfoData sql;
    initStringInfo(&sql);
    if (strcmp(kind, "outbox_capture_apply") == 0) {
        // The row trigger that only logical replication's apply worker
        // fires (statement triggers do not fire there).
        expect_arguments(kind, count, 0, "none");
        TriggerShape apply = {"outbox_capture_apply", "AFTER INSERT OR UPDATE OR DELETE", "",
                              "outbox.capture_row"};
        append_create(&sql, apply, table, "ROW", "WHEN (outbox._in_logical_apply())", "");
        append_enable(&sql, table, &apply, 1);
    } else if (strcmp(kind, "pg_outbox_move") == 0 || strcmp(kind, "pg_outbox_move_row") == 0) {
        // The move's triggers, called with the table's key and reference
        // names as literals (relocation/move/move_trigger.cpp reads them).
        if (count == 0 || count % 2 != 0)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("arguments: kind %s takes the table key, its key column and "
                                   "pairs of a column and its parent, not %d argument(s)",
                                   kind, count)));
        StringInfoData call;
        initStringInfo(&call);
        for (int i = 0; i < count; i++)
            appendStringInfo(&call, "%s%s", i == 0 ? "" : ", ", quote_literal_cstr(arguments[i]));
        if (strcmp(kind, "pg_outbox_move") == 0) {
            for (const TriggerShape &shape : move_triggers)
                append_create(&sql, shape, table, "STATEMENT", "", call.data);
            append_enable(&sql, table, move_triggers, lengthof(move_triggers));
        } else {
            TriggerShape row = {"pg_outbox_move_row", "BEFORE INSERT OR UPDATE", "",
                                "outbox._move_row_trigger"};
            append_create(&sql, row, table, "ROW", "", call.data);
            append_enable(&sql, table, &row, 1);
        }
    } else if (strcmp(kind, "drop_trigger") == 0) {
        expect_arguments(kind, count, 1, "the trigger's name");
        appendStringInfo(&sql, "DROP TRIGGER %s ON %s", quote_identifier(arguments[0]), table);
    } else if (strcmp(kind, "lock") == 0) {
        expect_arguments(kind, count, 1, "the lock mode");
        const char *mode = nullptr;
        for (const char *known : lock_modes)
            if (pg_strcasecmp(arguments[0], known) == 0)
                mode = known;
        if (mode == nullptr)
            ereport(ERROR,
                    (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                     errmsg("arguments: no lock mode %s", quote_literal_cstr(arguments[0]))));
        appendStringInfo(&sql, "LOCK TABLE %s IN %s MODE", table, mode);
    } else {
        const TriggerShape *capture = nullptr;
        for (const TriggerShape &shape : capture_triggers)
            if (strcmp(kind, shape.name) == 0)
                capture = &shape;
        if (capture == nullptr)
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("kind: no statement of kind %s", quote_literal_cstr(kind))));
        expect_arguments(kind, count, 0, "none");
        append_create(&sql, *capture, table, "STATEMENT", "", "");
        append_enable(&sql, table, capture, 1);
    }
    PG_RETURN_TEXT_P(cstring_to_text(sql.data));
}
