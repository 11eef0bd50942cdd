// A link's connection to its destination (connection.hpp).
#include "link/connection.hpp"

#include "pg/ids.hpp"
#include "settings.hpp"

extern "C" {
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
}

namespace pgoutbox {

namespace {

Connection *connections = nullptr; // in TopMemoryContext
int nconnections = 0;
int connections_capacity = 0;

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

} // namespace

PGconn *link_connect(const LinkTarget *target, char *error, size_t error_size) {
    TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), link_timeout_ms);
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

Connection *connection_of(const char *destination) {
    for (int i = 0; i < nconnections; i++)
        if (strcmp(connections[i].destination, destination) == 0)
            return &connections[i];
    if (nconnections == connections_capacity) {
        connections_capacity = Max(connections_capacity * 2, 8);
        connections =
            connections == nullptr
                ? (Connection *)MemoryContextAlloc(TopMemoryContext,
                                                   sizeof(Connection) * connections_capacity)
                : (Connection *)repalloc(connections, sizeof(Connection) * connections_capacity);
    }
    Connection *c = &connections[nconnections++];
    memset(c, 0, sizeof *c);
    strlcpy(c->destination, destination, sizeof c->destination);
    return c;
}

Connection *link_connections(int *n) {
    *n = nconnections;
    return connections;
}

void drop_connection(Connection *c) {
    if (c->conn != nullptr)
        PQfinish(c->conn);
    c->conn = nullptr;
    c->recovered = false;
    if (c->conninfo != nullptr)
        pfree(c->conninfo);
    c->conninfo = nullptr;
}

void owe_acknowledgement(Connection *c, int64 batch) {
    if (c->nacknowledge + c->npending == c->acknowledge_capacity) {
        c->acknowledge_capacity = Max(c->acknowledge_capacity * 2, 16);
        c->acknowledge =
            c->acknowledge == nullptr
                ? (int64 *)MemoryContextAlloc(TopMemoryContext,
                                              sizeof(int64) * c->acknowledge_capacity)
                : (int64 *)repalloc(c->acknowledge, sizeof(int64) * c->acknowledge_capacity);
    }
    c->acknowledge[c->nacknowledge + c->npending++] = batch;
}

Connection *round_connection(const LinkTarget *target, char *error, size_t error_size) {
    Connection *c = connection_of(target->destination);
    // A connection left busy (an ERROR here during a round) or broken
    // starts anew: the other side rolls back what it had of that round.
    // So does one made with other connection options than the target's now
    // (the server, its options or the user mapping changed).
    if (c->conn != nullptr &&
        (PQstatus(c->conn) != CONNECTION_OK || PQtransactionStatus(c->conn) != PQTRANS_IDLE ||
         PQpipelineStatus(c->conn) != PQ_PIPELINE_ON || strcmp(c->conninfo, target->conninfo) != 0))
        drop_connection(c);
    if (c->conn != nullptr)
        return c;
    c->conn = link_connect(target, error, error_size);
    if (c->conn == nullptr)
        return nullptr;
    if (PQsetnonblocking(c->conn, 1) != 0 || !PQenterPipelineMode(c->conn)) {
        strlcpy(error, PQerrorMessage(c->conn), error_size);
        drop_connection(c);
        return nullptr;
    }
    c->session = pg::random_token();
    c->conninfo = MemoryContextStrdup(TopMemoryContext, target->conninfo);
    return c;
}

PGresult *next_result(PGconn *conn, char *error, size_t error_size) {
    TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), link_timeout_ms);
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
    PGresult *result = PQgetResult(conn);
    if (result == nullptr)
        strlcpy(error, "the other side sent no answer", error_size);
    return result;
}

bool flush(PGconn *conn, char *error, size_t error_size) {
    TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), link_timeout_ms);
    for (;;) {
        int rc = PQflush(conn);
        if (rc == 0)
            return true;
        if (rc < 0) {
            strlcpy(error, PQerrorMessage(conn), error_size);
            return false;
        }
        if (!wait_socket(conn, WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE, deadline)) {
            strlcpy(error, "sending timed out", error_size);
            return false;
        }
        if (!PQconsumeInput(conn)) {
            strlcpy(error, PQerrorMessage(conn), error_size);
            return false;
        }
    }
}

} // namespace pgoutbox
