// outbox._boundary_selftest(mode text): drives both directions of the
// C++/PostgreSQL boundary so the regression tests can show that neither a
// C++ exception nor a PostgreSQL error escapes badly, and that destructors
// run when a PostgreSQL error passes through C++ frames.
#include "pg/guard.hpp"

#include <stdexcept>

namespace {

long live_probes = 0;

// Owns heap memory; a skipped destructor shows up in live_probes.
struct Probe {
    std::string ballast = std::string(100000, 'x');
    Probe() {
        live_probes++;
    }
    ~Probe() {
        live_probes--;
    }
    Probe(const Probe &) = delete;
    Probe &operator=(const Probe &) = delete;
};

} // namespace

OUTBOX_FUNCTION(outbox__boundary_selftest) {
    if (PG_ARGISNULL(0))
        throw pgoutbox::pg::SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "mode must not be NULL");
    std::string mode = text_to_cstring(PG_GETARG_TEXT_PP(0));
    if (mode == "cpp_exception") {
        Probe probe;
        throw std::runtime_error("C++ exception raised on purpose by the boundary self-test");
    }
    if (mode == "pg_error") {
        Probe probe;
        pgoutbox::pg::pg_call([] { return DirectFunctionCall1(int4in, CStringGetDatum("x1")); });
        return (Datum)0;
    }
    if (mode == "live_probes")
        PG_RETURN_INT64(live_probes);
    throw pgoutbox::pg::SqlError(ERRCODE_INVALID_PARAMETER_VALUE,
                                 "mode \"" + mode + "\" is unknown",
                                 "Use cpp_exception, pg_error or live_probes.");
}
