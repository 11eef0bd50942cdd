// A link's connection to its destination (link.cpp drives the rounds over
// it): made with the libpq options of the destination's foreign server and
// of the worker's user mapping for it (server_options.hpp, as postgres_fdw's
// connection.c and option.c make theirs), kept across cycles, made anew when it broke, was
// left busy, or the server, its options or the mapping changed.  Waits are
// bounded by outbox.link_timeout and wake on the latch, so that an
// interrupt ends them.
#pragma once

#include "link/link.hpp"

extern "C" {
#include "libpq-fe.h"
}

namespace pgoutbox {

// One connection per destination, kept across cycles, and what this side
// owes the other about its batches (outbox.inbox).
struct Connection {
    char destination[NAMEDATALEN * 2];
    PGconn *conn;
    char *conninfo; // what it connected with (TopMemoryContext)
    int64 session;  // a random token, new with each connection
    bool recovered; // asked outbox.received() since it connected
    // Batches taken there whose rows this side deleted: acknowledged with
    // the next batch, once that deletion has committed (pending until then).
    int64 *acknowledge;
    int nacknowledge, acknowledge_capacity;
    int npending;
};

// The connection of a destination (created, unconnected, on first use).
Connection *connection_of(const char *destination);

// Every destination's connection, for what ends with a transaction.
Connection *link_connections(int *n);

// Closes it; the next round connects again (and recovers first).
void drop_connection(Connection *c);

// A batch the other side took, to acknowledge once this transaction commits.
void owe_acknowledgement(Connection *c, int64 batch);

// A connection to the destination, ready for a round: idle, in pipeline
// mode; NULL with the reason in error.
Connection *round_connection(const LinkTarget *target, char *error, size_t error_size);

// A new connection to the target's server (connecting bounded by
// outbox.link_timeout, waking on the latch); NULL with the reason in error.
PGconn *link_connect(const LinkTarget *target, char *error, size_t error_size);

// The result of the pipeline's next query or sync point, once it has come
// (NULL: the call timed out or the connection broke; error says why).
PGresult *next_result(PGconn *conn, char *error, size_t error_size);

// Sends what libpq holds, waiting on the socket meanwhile (the connection
// does not block, so that a slow receiver can be given up on).
bool flush(PGconn *conn, char *error, size_t error_size);

} // namespace pgoutbox
