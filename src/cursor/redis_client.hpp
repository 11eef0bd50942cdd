// A Redis connection inside a backend (hiredis), one per backend, reused.
//
// The password is the first line of outbox.redis_password_file, a file the
// server's OS user owns and nobody else may read (SPEC section 9): it never
// passes through SQL, a GUC, a catalog or a message.
//
// Every wait is bounded (outbox.redis_connect_timeout_ms for the connect,
// outbox.redis_command_timeout_ms for each command) and interruptible: the
// socket is non-blocking and waited on with WaitLatchOrSocket, so a query
// cancel, statement_timeout or termination ends a call stuck on a hung
// Redis.  A connection interrupted mid-command, or that failed, is dropped
// and made anew on next use; on first use in each transaction it is checked
// with PING.
//
// Each connection first claims the key prefix for its database: Redis key
// <outbox.redis_key_prefix>outbox_database holds "<system identifier>:<database
// oid>" of the first database that connected with that prefix (SET NX), and
// every other database is refused with an error naming both.  Two databases
// sharing a prefix would share every backfill cursor and cascade watermark:
// one moves the other's cursor past rows it never wrote (issue 34's soak).
// The system identifier survives a standby's promotion and a restart, so a
// failover keeps the claim; pg_upgrade and a restore from a dump make a new
// one, and the hint says to delete the key then.
//
// These functions report failure through their return value and an error
// buffer, never with ereport (apart from CHECK_FOR_INTERRUPTS), so the
// post-commit path can turn a failure into a WARNING.  Messages name
// host:port and carry Redis's own text; never the password.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox::redis {

struct Error {
    char message[512];
    // Set for a failure that is no connection failure (the prefix claimed by
    // another database): its SQLSTATE and a hint.
    int sqlerrcode = 0;
    char hint[512] = "";
};

// GET key: true on success; *value is NULL for a missing key, else a palloc'd
// copy in the current memory context.
bool get(const char *key, char **value, Error *error);

// MSET key value ...: n keys in one round trip.  With interrupts held (at
// commit), a cancel or terminate request ends the wait with a failure, so
// that the request takes effect once the commit is done.
bool mset(int n, const char *const *keys, const char *const *values, Error *error);

// DEL key ...: n keys in one round trip, with mset's rule for interrupts.
bool del(int n, const char *const *keys, Error *error);

// SET key value NX: sets key only if it does not exist (a reply of nil, when
// it does, is no error).
bool set_if_absent(const char *key, const char *value, Error *error);

// GET, raising a failure as an ERROR.
char *get_or_error(const char *key);

} // namespace pgoutbox::redis
