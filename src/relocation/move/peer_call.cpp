// outbox._relocation_call(server, cell, operation, argument): one call of
// outbox.relocation_peer() in a cell, by control's worker as it moves an
// organization (extension/functions/69_relocation/50_move_control.sql).  It reaches
// the cell as the links do (link/connection.hpp): the cell's foreign server
// and the worker's user mapping for it, so that control logs in there as
// its link role, which the cell trusts with moves only when it granted it
// outbox.relocation_peer.  The link's own connection to the cell, kept
// for the next call and round (a move makes many calls); a call waits at
// most outbox.link_timeout, on the latch.  An error there is raised here with its SQLSTATE, its
// message prefixed with the cell's name.  The answer is the cell's, not trusted: at most max_answer
// bytes, and a text the caller parses as jsonb.
//
// Only the extension's owner may execute it (90_privileges.sql revokes it
// from PUBLIC).  Plain C-style code: PostgreSQL errors unwind through it;
// a connection an error left busy is dropped by the next call or round.
#include "link/connection.hpp"
#include "link/server_options.hpp"
#include "pg/guard.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/memutils.h"
}

using namespace pgoutbox;

namespace {

constexpr int max_answer = 64 * 1024 * 1024;

[[noreturn]] void unreachable(Connection *c, const char *cell, const char *error) {
    char *message = pstrdup(error);
    if (c != nullptr)
        drop_connection(c);
    ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE), errmsg("cell %s: %s", cell, message)));
    pg_unreachable();
}

char *copy_field(const PGresult *result, int field) {
    const char *value = PQresultErrorField(result, field);
    return value == nullptr || *value == '\0' ? nullptr : pstrdup(value);
}

} // namespace

OUTBOX_FUNCTION(outbox__relocation_call) {
    const char *names[4] = {"server", "cell", "operation", "argument"};
    for (int i = 0; i < 4; i++)
        if (PG_ARGISNULL(i))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("%s must not be NULL", names[i])));
    char *server = text_to_cstring(PG_GETARG_TEXT_PP(0));
    char *cell = text_to_cstring(PG_GETARG_TEXT_PP(1));
    char *operation = text_to_cstring(PG_GETARG_TEXT_PP(2));
    char *argument = text_to_cstring(PG_GETARG_TEXT_PP(3));

    LinkTarget target;
    memset(&target, 0, sizeof target);
    target.destination = cell;
    target.server = server;
    const char *unusable = connection_options(&target);
    if (unusable != nullptr)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("cell %s: %s", cell, unusable)));

    // The link's connection to the cell (link/connection.hpp): one cache,
    // in pipeline mode, each call followed by a sync point.
    char error[512] = "";
    Connection *c = round_connection(&target, error, sizeof error);
    if (c == nullptr)
        unreachable(nullptr, cell, error);
    const char *values[3] = {"1", operation, argument};
    if (!PQsendQueryParams(c->conn,
                           "SELECT outbox.relocation_peer($1::pg_catalog.int4, "
                           "$2::pg_catalog.text, $3::pg_catalog.jsonb)::pg_catalog.text",
                           3, nullptr, values, nullptr, nullptr, 0) ||
        !PQpipelineSync(c->conn))
        unreachable(c, cell, PQerrorMessage(c->conn));
    if (!flush(c->conn, error, sizeof error))
        unreachable(c, cell, error);
    PGresult *result = next_result(c->conn, error, sizeof error);
    if (result == nullptr)
        unreachable(c, cell, error);

    char *answer = nullptr;
    char *message = nullptr, *detail = nullptr, *hint = nullptr;
    int sqlstate = ERRCODE_PROTOCOL_VIOLATION;
    ExecStatusType status = PQresultStatus(result);
    if (status == PGRES_TUPLES_OK && PQntuples(result) == 1 && PQnfields(result) == 1 &&
        !PQgetisnull(result, 0, 0) && PQgetlength(result, 0, 0) <= max_answer) {
        answer = pstrdup(PQgetvalue(result, 0, 0));
    } else if (status == PGRES_FATAL_ERROR) {
        const char *code = PQresultErrorField(result, PG_DIAG_SQLSTATE);
        sqlstate = code != nullptr && strlen(code) == 5
                       ? MAKE_SQLSTATE(code[0], code[1], code[2], code[3], code[4])
                       : ERRCODE_INTERNAL_ERROR;
        message = copy_field(result, PG_DIAG_MESSAGE_PRIMARY);
        detail = copy_field(result, PG_DIAG_MESSAGE_DETAIL);
        hint = copy_field(result, PG_DIAG_MESSAGE_HINT);
    } else {
        message = psprintf("outbox.relocation_peer() answered with %s, %d rows",
                           PQresStatus(status), PQntuples(result));
    }
    PQclear(result);
    // The query's results end with a NULL, the call with its sync point;
    // a connection in any other state goes.
    result = PQgetResult(c->conn);
    if (result == nullptr)
        result = next_result(c->conn, error, sizeof error);
    bool synced = result != nullptr && PQresultStatus(result) == PGRES_PIPELINE_SYNC;
    PQclear(result);
    if (!synced)
        drop_connection(c);
    if (answer != nullptr)
        PG_RETURN_TEXT_P(cstring_to_text(answer));
    ereport(ERROR, (errcode(sqlstate), errmsg("cell %s: %s", cell, message ? message : "an error"),
                    detail ? errdetail("%s", detail) : 0, hint ? errhint("%s", hint) : 0));
    PG_RETURN_NULL();
}
