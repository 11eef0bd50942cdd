// outbox._relocation_decide(kind, relocation, state, step, organization,
// to_cell, operation): asks the relocation state machine (lifecycle.hpp)
// whether pause_relocation, resume_relocation or cancel_relocation may
// act on a relocation whose row says state and step; returns the state to
// record, or raises the refusal's ERROR.
//
// The arguments are read before any C++ object exists (their errors unwind
// freely); the decision's strings are left behind as a thrown SqlError or
// a result copied without a PostgreSQL error.
#include "pg/guard.hpp"
#include "relocation/lifecycle.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/uuid.h"
}

using namespace pgoutbox;
using namespace pgoutbox::relocation;

namespace {

struct Arguments {
    RelocationKind kind;
    Operation operation;
    const char *relocation;
    const char *state;
    const char *step;    // "" for none
    int64 organization;  // 0 for none
    const char *to_cell; // "" for none
};

const char *text_argument(FunctionCallInfo fcinfo, int arg) {
    return PG_ARGISNULL(arg) ? "" : text_to_cstring(PG_GETARG_TEXT_PP(arg));
}

// The position of argument arg's value among the three names (the enum's
// order), or an ERROR naming the argument.
int one_of(FunctionCallInfo fcinfo, int arg, const char *arg_name, const char *const names[3]) {
    if (PG_ARGISNULL(arg))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be NULL", arg_name)));
    const char *value = text_argument(fcinfo, arg);
    for (int i = 0; i < 3; i++)
        if (strcmp(value, names[i]) == 0)
            return i;
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("%s: %s is none of %s, %s and %s", arg_name, quote_literal_cstr(value),
                           names[0], names[1], names[2])));
    return -1; // not reached
}

Arguments read_arguments(FunctionCallInfo fcinfo) {
    const char *const kinds[3] = {"import", "move", "fork"};
    const char *const operations[3] = {"pause", "resume", "cancel"};
    Arguments args;
    args.kind = static_cast<RelocationKind>(one_of(fcinfo, 0, "kind", kinds));
    args.operation = static_cast<Operation>(one_of(fcinfo, 6, "operation", operations));
    if (PG_ARGISNULL(1))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("relocation must not be NULL")));
    if (PG_ARGISNULL(2))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("state must not be NULL")));
    args.relocation = DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(1)));
    args.state = text_argument(fcinfo, 2);
    args.step = text_argument(fcinfo, 3);
    args.organization = PG_ARGISNULL(4) ? 0 : PG_GETARG_INT64(4);
    args.to_cell = text_argument(fcinfo, 5);
    return args;
}

// The state to record, or a thrown SqlError with the refusal.
text *decided(const Arguments &args) {
    LifecycleFacts facts;
    facts.kind = args.kind;
    facts.relocation = args.relocation;
    facts.state = args.state;
    facts.step = args.step;
    facts.organization = args.organization;
    facts.to_cell = args.to_cell;
    LifecycleDecision d = decide(facts, args.operation);
    if (d.refused) {
        const char *s = d.sqlstate.c_str();
        throw pg::SqlError(MAKE_SQLSTATE(s[0], s[1], s[2], s[3], s[4]), d.message, d.hint);
    }
    return pg::text_of(d.state);
}

} // namespace

OUTBOX_FUNCTION(outbox__relocation_decide) {
    Arguments args = read_arguments(fcinfo);
    PG_RETURN_TEXT_P(decided(args));
}
