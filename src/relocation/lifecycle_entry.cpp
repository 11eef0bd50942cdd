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

Arguments read_arguments(FunctionCallInfo fcinfo) {
    const char *names[] = {"kind", "relocation", "state"};
    for (int a = 0; a < 3; a++)
        if (PG_ARGISNULL(a))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s must not be NULL", names[a])));
    if (PG_ARGISNULL(6))
        ereport(ERROR,
                (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("operation must not be NULL")));
    Arguments args;
    const char *kind = text_argument(fcinfo, 0);
    if (strcmp(kind, "import") == 0)
        args.kind = RelocationKind::Import;
    else if (strcmp(kind, "move") == 0)
        args.kind = RelocationKind::Move;
    else if (strcmp(kind, "fork") == 0)
        args.kind = RelocationKind::Fork;
    else
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("kind: %s is none of import, move and fork", quote_literal_cstr(kind))));
    const char *operation = text_argument(fcinfo, 6);
    if (strcmp(operation, "pause") == 0)
        args.operation = Operation::Pause;
    else if (strcmp(operation, "resume") == 0)
        args.operation = Operation::Resume;
    else if (strcmp(operation, "cancel") == 0)
        args.operation = Operation::Cancel;
    else
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("operation: %s is none of pause, resume and cancel",
                               quote_literal_cstr(operation))));
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
