// Links between clusters (link.hpp).
#include "link/link.hpp"

#include "cascade/tombstones.hpp"
#include "pg/spi.hpp"
#include "registry/table_meta.hpp"
#include "settings.hpp"

extern "C" {
#include "commands/defrem.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/fmgroids.h"
#include "utils/timestamp.h"
}

namespace pgoutbox {

namespace {

// Messages a batch holds, and how long the lease on them lasts: far longer
// than a batch takes to send, so that a completion is never refused.
constexpr int batch_messages = 5000;
constexpr const char *lease = "1 minute";
// Connecting and each call to the other side, at most.
constexpr long call_timeout_ms = 30000;

// One connection per destination, kept across cycles.
struct Connection {
    char destination[NAMEDATALEN * 2];
    PGconn *conn;
};
Connection connections[64];
int nconnections = 0;

Connection *connection_of(const char *destination) {
    for (int i = 0; i < nconnections; i++)
        if (strcmp(connections[i].destination, destination) == 0)
            return &connections[i];
    if (nconnections == lengthof(connections))
        return nullptr;
    Connection *c = &connections[nconnections++];
    strlcpy(c->destination, destination, sizeof c->destination);
    c->conn = nullptr;
    return c;
}

void drop_connection(Connection *c) {
    if (c->conn != nullptr)
        PQfinish(c->conn);
    c->conn = nullptr;
}

// Waits until the socket is ready for events or the deadline passes
// (false then); wakes on the latch to let an interrupt (SIGTERM) end it.
bool wait_socket(PGconn *conn, int events, TimestampTz deadline) {
    for (;;) {
        long left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
        if (left <= 0)
            return false;
        int rc =
            WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH | events,
                              PQsocket(conn), left, PG_WAIT_EXTENSION);
        if (rc & WL_LATCH_SET) {
            ResetLatch(MyLatch);
            CHECK_FOR_INTERRUPTS();
        }
        if (rc & events)
            return true;
    }
}

PGconn *connect(const LinkTarget *target, char *error, size_t error_size) {
    TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), call_timeout_ms);
    PGconn *conn = PQconnectStartParams(target->keywords, target->values, 0);
    if (conn == nullptr) {
        strlcpy(error, "out of memory connecting", error_size);
        return nullptr;
    }
    PostgresPollingStatusType status = PGRES_POLLING_WRITING;
    while (PQstatus(conn) != CONNECTION_BAD && status != PGRES_POLLING_OK &&
           status != PGRES_POLLING_FAILED) {
        int events = status == PGRES_POLLING_READING ? WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE;
        if (!wait_socket(conn, events, deadline)) {
            snprintf(error, error_size, "connecting to server %s timed out", target->server);
            PQfinish(conn);
            return nullptr;
        }
        status = PQconnectPoll(conn);
    }
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(error, error_size, "could not connect to server %s: %s", target->server,
                 PQerrorMessage(conn));
        PQfinish(conn);
        return nullptr;
    }
    return conn;
}

// Runs sql with text parameters; the first value of the result, or NULL
// with the reason in error.
char *call(PGconn *conn, const char *sql, int nparams, const char *const *params, char *error,
           size_t error_size) {
    TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), call_timeout_ms);
    if (!PQsendQueryParams(conn, sql, nparams, nullptr, params, nullptr, nullptr, 0)) {
        strlcpy(error, PQerrorMessage(conn), error_size);
        return nullptr;
    }
    while (PQisBusy(conn)) {
        if (!wait_socket(conn, WL_SOCKET_READABLE, deadline)) {
            strlcpy(error, "the call timed out", error_size);
            return nullptr;
        }
        if (!PQconsumeInput(conn)) {
            strlcpy(error, PQerrorMessage(conn), error_size);
            return nullptr;
        }
    }
    char *value = nullptr;
    bool failed = false;
    for (PGresult *result; (result = PQgetResult(conn)) != nullptr; PQclear(result)) {
        if (PQresultStatus(result) != PGRES_TUPLES_OK) {
            if (!failed)
                strlcpy(error, PQresultErrorMessage(result), error_size);
            failed = true;
        } else if (!failed && PQntuples(result) > 0) {
            value = pstrdup(PQgetvalue(result, 0, 0));
        }
    }
    return failed ? nullptr : value;
}

// The libpq options of a foreign server and of the worker's user mapping
// for it (any wrapper's options that are not libpq's are left out).
void connection_options(LinkTarget *target) {
    ForeignServer *server = GetForeignServerByName(target->server, false);
    UserMapping *mapping = GetUserMapping(GetUserId(), server->serverid);
    PQconninfoOption *defaults = PQconndefaults();
    int n = list_length(server->options) + list_length(mapping->options) + 2;
    auto **keywords = (const char **)palloc0(sizeof(char *) * (n + 1));
    auto **values = (const char **)palloc0(sizeof(char *) * (n + 1));
    int k = 0;
    List *lists[2] = {server->options, mapping->options};
    for (List *options : lists) {
        ListCell *cell;
        foreach (cell, options) {
            DefElem *option = (DefElem *)lfirst(cell);
            bool libpq = false;
            for (PQconninfoOption *o = defaults; o != nullptr && o->keyword != nullptr; o++)
                libpq = libpq || strcmp(o->keyword, option->defname) == 0;
            if (!libpq)
                continue;
            keywords[k] = pstrdup(option->defname);
            values[k] = pstrdup(defGetString(option));
            k++;
        }
    }
    PQconninfoFree(defaults);
    keywords[k] = "fallback_application_name";
    values[k++] = "pg_outbox link";
    keywords[k] = nullptr;
    target->keywords = keywords;
    target->values = values;
}

char *array_text(Datum array) {
    return OidOutputFunctionCall(F_ARRAY_OUT, array);
}

const char *spi_text(int column) {
    char *value = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, column);
    return value ? value : "{}";
}

} // namespace

int link_targets(MemoryContext context, LinkTarget **targets, bool *receives_cell,
                 bool *receives_control) {
    static SPIPlanPtr plan = nullptr;
    Oid types[1] = {TEXTOID};
    Datum args[1] = {CStringGetTextDatum(silo_mode == SILO_MODE_CELL      ? "cell"
                                         : silo_mode == SILO_MODE_CONTROL ? "control"
                                                                          : "monolith")};
    MemoryContext caller = CurrentMemoryContext;
    uint64 n = pg::spi_run_kept(
        &plan, "reading links",
        "SELECT t.destination, t.server, t.origin, t.control_silo,"
        " coalesce(s.next_attempt_at > pg_catalog.now(), false)"
        " FROM (SELECT c.name AS destination, c.server, 'control' AS origin, true AS control_silo"
        "         FROM outbox.cells c WHERE c.server IS NOT NULL AND $1 <> 'cell'"
        "       UNION ALL"
        "       SELECT 'control', l.server, l.cell_name, false FROM outbox.control_link l"
        "        WHERE $1 <> 'control') t"
        " LEFT JOIN outbox.link_status s ON s.destination = t.destination ORDER BY 1",
        1, types, args, nullptr, true, SPI_OK_SELECT);
    MemoryContextSwitchTo(context);
    auto *result = (LinkTarget *)palloc0(sizeof(LinkTarget) * Max(n, 1));
    int k = 0;
    *receives_cell = *receives_control = false;
    for (uint64 r = 0; r < n; r++) {
        HeapTuple tuple = SPI_tuptable->vals[r];
        TupleDesc desc = SPI_tuptable->tupdesc;
        bool isnull;
        bool control_silo = DatumGetBool(SPI_getbinval(tuple, desc, 4, &isnull));
        // Rows of the other silo come in here once a link exists.
        *(control_silo ? receives_cell : receives_control) = true;
        if (DatumGetBool(SPI_getbinval(tuple, desc, 5, &isnull)))
            continue; // backing off
        LinkTarget *target = &result[k++];
        target->destination = pstrdup(SPI_getvalue(tuple, desc, 1));
        target->server = pstrdup(SPI_getvalue(tuple, desc, 2));
        target->origin = pstrdup(SPI_getvalue(tuple, desc, 3));
        target->control_silo = control_silo;
        connection_options(target);
    }
    MemoryContextSwitchTo(caller);
    *targets = result;
    return k;
}

bool link_claim(const LinkTarget *target, LinkBatch *batch, MemoryContext context) {
    static SPIPlanPtr plan = nullptr;
    Oid types[4] = {INT4OID, INTERVALOID, TEXTOID, TEXTOID};
    Datum args[4] = {Int32GetDatum(batch_messages),
                     DirectFunctionCall3(interval_in, CStringGetDatum(lease),
                                         ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)),
                     CStringGetTextDatum(target->control_silo ? "control" : "cell"),
                     target->control_silo ? CStringGetTextDatum(target->destination) : (Datum)0};
    char nulls[4] = {' ', ' ', ' ', target->control_silo ? ' ' : 'n'};
    MemoryContext caller = CurrentMemoryContext;
    (void)pg::spi_run_kept(
        &plan, "claiming for a link",
        "WITH c AS (SELECT c.*, k.id AS category_id"
        "             FROM outbox.claim($1, $2, NULL, $3, $4) WITH ORDINALITY AS c"
        "             JOIN outbox.categories k ON k.name = c.category)"
        " SELECT count(*)::int, array_agg(DISTINCT c.claim)::text,"
        " array_agg(c.shard_scope ORDER BY c.ordinality)::text,"
        " array_agg(c.shard_identifier ORDER BY c.ordinality)::text,"
        " array_agg(coalesce(c.cell_name, '') ORDER BY c.ordinality)::text,"
        " array_agg(c.category ORDER BY c.ordinality)::text,"
        " array_agg(c.object_identifier ORDER BY c.ordinality)::text,"
        " array_agg(c.payload ORDER BY c.ordinality)::text,"
        " array_agg(c.last_id ORDER BY c.ordinality)::text,"
        " array_agg(c.category_id ORDER BY c.ordinality),"
        " array_agg(c.object_identifier ORDER BY c.ordinality) FROM c",
        4, types, args, nulls, false, SPI_OK_SELECT);
    MemoryContextSwitchTo(caller);
    bool isnull;
    int n = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
    if (n == 0)
        return false;
    SPITupleTable *claimed = SPI_tuptable;
    MemoryContext old = MemoryContextSwitchTo(context);
    batch->n = n;
    batch->claims = pstrdup(spi_text(2));
    batch->scopes = pstrdup(spi_text(3));
    batch->identifiers = pstrdup(spi_text(4));
    batch->cells = pstrdup(spi_text(5));
    batch->categories = pstrdup(spi_text(6));
    batch->objects = pstrdup(spi_text(7));
    batch->payloads = pstrdup(spi_text(8));
    batch->last_ids = pstrdup(spi_text(9));
    MemoryContextSwitchTo(old);

    // The tombstones that go with them: messages of a category with one
    // registered table here whose row is gone (the other side has no such
    // table to look in).
    Datum *categories, *objects;
    int ncategories, nobjects;
    deconstruct_array(
        DatumGetArrayTypeP(SPI_getbinval(claimed->vals[0], claimed->tupdesc, 10, &isnull)), INT4OID,
        4, true, TYPALIGN_INT, &categories, nullptr, &ncategories);
    deconstruct_array(
        DatumGetArrayTypeP(SPI_getbinval(claimed->vals[0], claimed->tupdesc, 11, &isnull)), INT8OID,
        8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &objects, nullptr, &nobjects);
    const Registry *registry = registry_get();
    auto *ids = (int64 *)palloc(sizeof(int64) * n);
    auto *tables = (Datum *)palloc(sizeof(Datum) * n);
    auto *gone = (Datum *)palloc(sizeof(Datum) * n);
    int ngone = 0;
    for (int t = 0; t < registry->nsole_tables; t++) {
        const SoleTable *table = &registry->sole_tables[t];
        if (table->control != target->control_silo)
            continue;
        int k = 0;
        for (int m = 0; m < n; m++)
            if (DatumGetInt32(categories[m]) == table->category)
                ids[k++] = DatumGetInt64(objects[m]);
        Datum array = gone_ids(table, ids, k);
        if (array == (Datum)0)
            continue;
        Datum *items;
        int nitems;
        deconstruct_array(DatumGetArrayTypeP(array), INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
                          &items, nullptr, &nitems);
        for (int i = 0; i < nitems && ngone < n; i++) {
            tables[ngone] = CStringGetTextDatum(table->table_key);
            gone[ngone++] = items[i];
        }
    }
    Datum table_array =
        PointerGetDatum(construct_array(tables, ngone, TEXTOID, -1, false, TYPALIGN_INT));
    Datum object_array =
        PointerGetDatum(construct_array(gone, ngone, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
    old = MemoryContextSwitchTo(context);
    batch->tombstone_tables = array_text(table_array);
    batch->tombstone_objects = array_text(object_array);
    MemoryContextSwitchTo(old);
    return true;
}

bool link_send(const LinkTarget *target, const LinkBatch *batch, int *taken, char *error,
               size_t error_size) {
    Connection *c = connection_of(target->destination);
    if (c == nullptr) {
        strlcpy(error, "too many links", error_size);
        return false;
    }
    if (c->conn != nullptr && PQstatus(c->conn) != CONNECTION_OK)
        drop_connection(c);
    if (c->conn == nullptr)
        c->conn = connect(target, error, error_size);
    if (c->conn == nullptr)
        return false;
    const char *params[11] = {target->origin,
                              target->control_silo ? "control" : "cell",
                              batch->scopes,
                              batch->identifiers,
                              batch->cells,
                              batch->categories,
                              batch->objects,
                              batch->payloads,
                              batch->last_ids,
                              batch->tombstone_tables,
                              batch->tombstone_objects};
    char *accepted = call(c->conn,
                          "SELECT outbox.receive($1, $2, $3::int[], $4::bigint[], $5::text[],"
                          " $6::text[], $7::bigint[], $8::jsonb[], $9::bigint[], $10::text[],"
                          " $11::bigint[])",
                          11, params, error, error_size);
    if (accepted == nullptr) {
        // Whatever state the connection is in, the next batch starts anew.
        drop_connection(c);
        return false;
    }
    *taken = atoi(accepted);
    return true;
}

void link_settle(const LinkTarget *target, const LinkBatch *batch, bool sent, int taken,
                 const char *error) {
    static SPIPlanPtr done_plan = nullptr, failed_plan = nullptr;
    Oid types[6] = {TEXTOID, TEXTOID, TEXTOID, INT4OID, TEXTOID, INT4OID};
    Datum args[6] = {
        CStringGetTextDatum(batch->claims),      CStringGetTextDatum(target->destination),
        CStringGetTextDatum(target->server),     Int32GetDatum(batch->n),
        CStringGetTextDatum(error ? error : ""), Int32GetDatum(taken)};
    if (sent) {
        (void)pg::spi_run_kept(
            &done_plan, "completing a link batch",
            "WITH done AS (SELECT outbox.complete($1::bigint[]))"
            " INSERT INTO outbox.link_status AS s (destination, server, messages_sent,"
            " duplicates, last_sent_at) SELECT $2, $3, $6, $4 - $6, pg_catalog.now() FROM done"
            " ON CONFLICT (destination) DO UPDATE SET server = excluded.server,"
            " messages_sent = s.messages_sent + excluded.messages_sent,"
            " duplicates = s.duplicates + excluded.duplicates,"
            " last_sent_at = excluded.last_sent_at, failures = 0, next_attempt_at = NULL",
            6, types, args, nullptr, false, SPI_OK_INSERT);
        return;
    }
    // Given back: the shards are due again at once (a link's failure is not
    // theirs); the link waits 1 s, 2 s, ... at most a minute.
    (void)pg::spi_run_kept(
        &failed_plan, "giving a link batch back",
        "WITH back AS (SELECT outbox.complete($1::bigint[],"
        " pg_catalog.array_fill(0, ARRAY[pg_catalog.cardinality($1::bigint[])])))"
        " INSERT INTO outbox.link_status AS s (destination, server, failures, last_error,"
        " last_error_at, next_attempt_at)"
        " SELECT $2, $3, 1, $5, pg_catalog.now(), pg_catalog.now() + interval '1 second'"
        " FROM back"
        " ON CONFLICT (destination) DO UPDATE SET server = excluded.server,"
        " failures = s.failures + 1, last_error = excluded.last_error,"
        " last_error_at = excluded.last_error_at,"
        " next_attempt_at = pg_catalog.now() + LEAST(interval '1 second' * 2 ^ s.failures,"
        " interval '1 minute')",
        5, types, args, nullptr, false, SPI_OK_INSERT);
}

} // namespace pgoutbox
