// outbox._move_next(step, mode, chunk_rows, rows_done, rows_total, checked,
// answer): control's move step asks the step machine (move_machine.hpp)
// where the move goes after the cells' answer.  The answer is a JSON object
// of the scalars the step reads (MoveAnswer's names); anything else in it,
// or a value of another type, counts as not given, and the machine calls
// an answer without what its step needs a protocol violation.
//
// Plain C-style code: PostgreSQL errors unwind through it (the machine's
// structs have no destructors).
#include "pg/guard.hpp"
#include "relocation/move/move_machine.hpp"

extern "C" {
#include "access/htup_details.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
}

#include <cerrno>
#include <cstdlib>

using namespace pgoutbox;
using namespace pgoutbox::relocation;

namespace {

// Counts and ordinals of a move stay far below this; a larger one, from
// the caller or in an answer, is refused (and sums of two cannot
// overflow).
const int64 largest_count = INT64CONST(1) << 53;

bool answer_value(Jsonb *answer, const char *key, JsonbValue *value) {
    return JB_ROOT_IS_OBJECT(answer) &&
           getKeyJsonValueFromContainer(&answer->root, key, (int)strlen(key), value) != nullptr;
}

// A count of the answer, or missing: not a number, not written as a whole
// one, negative, or above largest_count.
int64 answer_int(Jsonb *answer, const char *key, int64 missing) {
    JsonbValue value;
    if (!answer_value(answer, key, &value) || value.type != jbvNumeric)
        return missing;
    const char *digits =
        DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(value.val.numeric)));
    char *end = nullptr;
    errno = 0;
    long long n = strtoll(digits, &end, 10);
    if (errno != 0 || end == digits || *end != '\0' || n < 0 || n > largest_count)
        return missing;
    return (int64)n;
}

// true, or a number above 0 (in_flight and export count what they wait for).
bool answer_flag(Jsonb *answer, const char *key) {
    JsonbValue value;
    if (!answer_value(answer, key, &value))
        return false;
    if (value.type == jbvBool)
        return value.val.boolean;
    return value.type == jbvNumeric && answer_int(answer, key, 0) > 0;
}

const char *outcome_name(MoveOutcome outcome) {
    switch (outcome) {
    case MoveOutcome::Next:
        return "next";
    case MoveOutcome::Wait:
        return "wait";
    case MoveOutcome::Failed:
        return "failed";
    case MoveOutcome::Complete:
        return "complete";
    case MoveOutcome::ProtocolViolation:
        break;
    }
    return "protocol_violation";
}

} // namespace

OUTBOX_FUNCTION(outbox__move_next) {
    MoveFacts facts;
    char *step = text_to_cstring(PG_GETARG_TEXT_PP(0));
    if (!parse_move_step(step, &facts.step))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("step: %s is not a step of a move", quote_literal_cstr(step))));
    char *mode = text_to_cstring(PG_GETARG_TEXT_PP(1));
    if (strcmp(mode, "move") != 0 && strcmp(mode, "fork") != 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("mode: %s is neither move nor fork", quote_literal_cstr(mode))));
    facts.fork = strcmp(mode, "fork") == 0;
    const char *names[4] = {"chunk_rows", "rows_done", "rows_total", "checked"};
    int64 counts[4];
    for (int i = 0; i < 4; i++) {
        counts[i] = PG_GETARG_INT64(2 + i);
        if (counts[i] < (i == 0 ? 1 : 0) || counts[i] > largest_count)
            ereport(ERROR, (errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
                            errmsg("%s: " INT64_FORMAT " is out of range", names[i], counts[i])));
    }
    facts.chunk_rows = counts[0];
    facts.rows_done = counts[1];
    facts.rows_total = counts[2];
    facts.checked = counts[3];
    Jsonb *given = PG_GETARG_JSONB_P(6);

    MoveAnswer answer;
    answer.waiting = answer_flag(given, "waiting");
    answer.rows = answer_int(given, "rows", -1);
    answer.taken = answer_flag(given, "taken");
    answer.first_row = answer_int(given, "first_row", -1);
    answer.row_count = answer_int(given, "row_count", -1);
    answer.more = answer_flag(given, "more");
    answer.left = answer_int(given, "left", -1);
    answer.applied = answer_int(given, "applied", 0);
    answer.seqs = answer_int(given, "seqs", 0);
    answer.deleted = answer_int(given, "deleted", -1);
    answer.done = answer_flag(given, "done");

    MoveTransition t = next_move_step(facts, answer);

    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("outbox._move_next must return a row")));
    Datum values[6] = {CStringGetTextDatum(move_step_name(t.step)),
                       CStringGetTextDatum(outcome_name(t.outcome)),
                       Int64GetDatum(t.rows_done),
                       Int64GetDatum(t.rows_total),
                       Int64GetDatum(t.checked),
                       BoolGetDatum(t.fenced)};
    bool nulls[6] = {false, false, false, false, false, false};
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}
