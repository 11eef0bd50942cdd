#include "cursor/redis_client.hpp"

#include "pg/compat.hpp"
#include "settings.hpp"

extern "C" {
#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/wait_event.h"
}

#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pgoutbox::redis {

namespace {

redisContext *connection = nullptr;
// Set while a command is in flight: still set at the next call means an
// interrupt (cancel, timeout) left the protocol state unknown.
bool in_flight = false;
char connected_to[1024] = ""; // host:port/db of the live connection
LocalTransactionId checked_in = InvalidLocalTransactionId;

void drop_connection() {
    if (connection != nullptr)
        redisFree(connection);
    connection = nullptr;
    in_flight = false;
}

void fail(Error *error, const char *fmt, const char *detail) {
    snprintf(error->message, sizeof error->message, fmt, redis_host, redis_port, detail);
    drop_connection();
}

// Waits for the socket, or fails at the deadline; an interrupt ends it.
bool wait_for(int events, TimestampTz deadline, int timeout_ms, const char *what, Error *error) {
    for (;;) {
        long remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
        if (remaining <= 0) {
            char detail[128];
            snprintf(detail, sizeof detail, "no answer within %d ms (%s)", timeout_ms, what);
            fail(error, "Redis at %s:%d: %s", detail);
            return false;
        }
        int rc =
            WaitLatchOrSocket(MyLatch, events | WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                              connection->fd, remaining, PG_WAIT_EXTENSION);
        if (rc & WL_LATCH_SET) {
            ResetLatch(MyLatch);
            CHECK_FOR_INTERRUPTS();
            // Interrupts are held (a commit callback): give up the wait, and
            // the cancel or terminate takes effect once they are resumed.
            if (QueryCancelPending || ProcDiePending) {
                fail(error, "Redis at %s:%d: %s", "interrupted by a cancel or terminate request");
                return false;
            }
        }
        if (rc & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE))
            return true;
    }
}

bool command(redisReply **reply_out, Error *error, int argc, const char **argv) {
    auto *lengths = (size_t *)palloc(sizeof(size_t) * argc);
    for (int i = 0; i < argc; i++)
        lengths[i] = strlen(argv[i]);
    int appended = redisAppendCommandArgv(connection, argc, argv, lengths);
    pfree(lengths);
    if (appended != REDIS_OK) {
        fail(error, "Redis at %s:%d: %s", connection->errstr);
        return false;
    }
    TimestampTz deadline =
        TimestampTzPlusMilliseconds(GetCurrentTimestamp(), redis_command_timeout_ms);
    in_flight = true;
    int done = 0;
    while (!done) {
        if (redisBufferWrite(connection, &done) != REDIS_OK) {
            fail(error, "Redis at %s:%d: %s", connection->errstr);
            return false;
        }
        if (!done && !wait_for(WL_SOCKET_WRITEABLE, deadline, redis_command_timeout_ms,
                               "outbox.redis_command_timeout_ms", error))
            return false;
    }
    void *reply = nullptr;
    for (;;) {
        if (redisGetReplyFromReader(connection, &reply) != REDIS_OK) {
            fail(error, "Redis at %s:%d: %s", connection->errstr);
            return false;
        }
        if (reply != nullptr)
            break;
        if (!wait_for(WL_SOCKET_READABLE, deadline, redis_command_timeout_ms,
                      "outbox.redis_command_timeout_ms", error))
            return false;
        if (redisBufferRead(connection) != REDIS_OK) {
            fail(error, "Redis at %s:%d: %s", connection->errstr);
            return false;
        }
    }
    in_flight = false;
    auto *r = (redisReply *)reply;
    if (r->type == REDIS_REPLY_ERROR) {
        char detail[400];
        strlcpy(detail, r->str, sizeof detail);
        freeReplyObject(r);
        // The connection is fine; Redis refused the command.
        snprintf(error->message, sizeof error->message, "Redis at %s:%d: %s", redis_host,
                 redis_port, detail);
        return false;
    }
    *reply_out = r;
    return true;
}

bool simple_command(Error *error, int argc, const char **argv) {
    redisReply *reply;
    if (!command(&reply, error, argc, argv))
        return false;
    freeReplyObject(reply);
    return true;
}

// The password: the first line of outbox.redis_password_file, or none.  The
// file must belong to the server's OS user and be unreadable by anyone else,
// as PostgreSQL requires of its SSL key.  Never put into a message.
bool password(char *buffer, size_t size, Error *error) {
    buffer[0] = '\0';
    if (redis_password_file == nullptr || redis_password_file[0] == '\0')
        return true;
    FILE *file = AllocateFile(redis_password_file, "r");
    if (file == nullptr) {
        snprintf(error->message, sizeof error->message,
                 "could not open outbox.redis_password_file \"%s\": %s", redis_password_file,
                 strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fileno(file), &st) != 0 || st.st_uid != geteuid() ||
        (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        FreeFile(file);
        snprintf(error->message, sizeof error->message,
                 "outbox.redis_password_file \"%s\" must belong to the database server's OS "
                 "user and give no permission to group or others (chmod 600)",
                 redis_password_file);
        return false;
    }
    if (fgets(buffer, (int)size, file) == nullptr)
        buffer[0] = '\0';
    FreeFile(file);
    buffer[strcspn(buffer, "\r\n")] = '\0';
    return true;
}

// Claims the key prefix for this database, or finds it claimed by this
// database already (see redis_client.hpp).
bool claim_prefix(Error *error) {
    const char *prefix = redis_key_prefix ? redis_key_prefix : "";
    char *key = psprintf("%soutbox_database", prefix);
    char self[64];
    snprintf(self, sizeof self, UINT64_FORMAT ":%u", GetSystemIdentifier(), MyDatabaseId);
    bool ok = false;
    // Twice: the claim may be deleted between our SET NX and GET.
    for (int attempt = 0; attempt < 2 && !ok; attempt++) {
        const char *set[] = {"SET", key, self, "NX"};
        redisReply *reply;
        if (!command(&reply, error, 4, set))
            break;
        ok = reply->type == REDIS_REPLY_STATUS;
        freeReplyObject(reply);
        if (ok)
            break;
        const char *get[] = {"GET", key};
        if (!command(&reply, error, 2, get))
            break;
        if (reply->type == REDIS_REPLY_STRING) {
            char owner[128];
            strlcpy(owner, reply->str, Min(sizeof owner, reply->len + 1));
            ok = strcmp(owner, self) == 0;
            if (!ok) {
                snprintf(error->message, sizeof error->message,
                         "Redis at %s:%d db %d, key prefix \"%s\": these keys belong to another "
                         "database (%s); this database is %s",
                         redis_host, redis_port, redis_db, prefix, owner, self);
                snprintf(error->hint, sizeof error->hint,
                         "Two databases must not share backfill cursors and watermarks: give "
                         "each its own outbox.redis_key_prefix or outbox.redis_db.  If that "
                         "database is gone, or was this one before pg_upgrade or a restore, "
                         "delete Redis key \"%s\".",
                         key);
                error->sqlerrcode = ERRCODE_OBJECT_IN_USE;
                freeReplyObject(reply);
                break;
            }
        }
        freeReplyObject(reply);
    }
    pfree(key);
    return ok;
}

bool connect(Error *error) {
    char secret[256];
    if (!password(secret, sizeof secret, error))
        return false;
    connection = redisConnectNonBlock(redis_host, redis_port);
    if (connection == nullptr) {
        fail(error, "could not connect to Redis at %s:%d: %s", "out of memory");
        return false;
    }
    if (connection->err) {
        fail(error, "could not connect to Redis at %s:%d: %s", connection->errstr);
        return false;
    }
    TimestampTz deadline =
        TimestampTzPlusMilliseconds(GetCurrentTimestamp(), redis_connect_timeout_ms);
    in_flight = true;
    if (!wait_for(WL_SOCKET_WRITEABLE, deadline, redis_connect_timeout_ms,
                  "outbox.redis_connect_timeout_ms", error))
        return false;
    int socket_error = 0;
    socklen_t length = sizeof socket_error;
    if (getsockopt(connection->fd, SOL_SOCKET, SO_ERROR, &socket_error, &length) != 0 ||
        socket_error != 0) {
        fail(error, "could not connect to Redis at %s:%d: %s", strerror(socket_error));
        return false;
    }
    in_flight = false;
    if (secret[0] != '\0') {
        const char *auth[] = {"AUTH", secret};
        bool ok = simple_command(error, 2, auth);
        explicit_bzero(secret, sizeof secret);
        if (!ok) {
            drop_connection();
            return false;
        }
    }
    if (redis_db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", redis_db);
        const char *select[] = {"SELECT", db};
        if (!simple_command(error, 2, select)) {
            drop_connection();
            return false;
        }
    }
    if (!claim_prefix(error)) {
        drop_connection();
        return false;
    }
    return true;
}

// A usable connection to the configured server, checked once per transaction.
bool ensure_connection(Error *error) {
    char target[1024];
    // A changed password file takes effect on the next connection.
    // And a changed key prefix is claimed anew.
    snprintf(target, sizeof target, "%s:%d/%d/%s/%s", redis_host, redis_port, redis_db,
             redis_password_file ? redis_password_file : "",
             redis_key_prefix ? redis_key_prefix : "");
    if (connection != nullptr && (in_flight || strcmp(target, connected_to) != 0))
        drop_connection();
    if (connection == nullptr) {
        if (!connect(error))
            return false;
        strlcpy(connected_to, target, sizeof connected_to);
        checked_in = pg::local_xid();
        return true;
    }
    if (checked_in != pg::local_xid()) {
        const char *ping[] = {"PING"};
        if (!simple_command(error, 1, ping)) {
            // One reconnect: the server may have restarted since.
            if (!connect(error))
                return false;
            strlcpy(connected_to, target, sizeof connected_to);
        }
        checked_in = pg::local_xid();
    }
    return true;
}

} // namespace

bool get(const char *key, char **value, Error *error) {
    if (!ensure_connection(error))
        return false;
    const char *argv[] = {"GET", key};
    redisReply *reply;
    if (!command(&reply, error, 2, argv))
        return false;
    bool ok = true;
    if (reply->type == REDIS_REPLY_NIL) {
        *value = nullptr;
    } else if (reply->type == REDIS_REPLY_STRING) {
        *value = pnstrdup(reply->str, reply->len);
    } else {
        snprintf(error->message, sizeof error->message,
                 "Redis at %s:%d: unexpected reply type %d to GET", redis_host, redis_port,
                 reply->type);
        ok = false;
    }
    freeReplyObject(reply);
    return ok;
}

bool mset(int n, const char *const *keys, const char *const *values, Error *error) {
    if (!ensure_connection(error))
        return false;
    auto **argv = (const char **)palloc(sizeof(char *) * (1 + 2 * n));
    argv[0] = "MSET";
    for (int i = 0; i < n; i++) {
        argv[1 + 2 * i] = keys[i];
        argv[2 + 2 * i] = values[i];
    }
    bool ok = simple_command(error, 1 + 2 * n, argv);
    pfree(argv);
    return ok;
}

bool del(int n, const char *const *keys, Error *error) {
    if (!ensure_connection(error))
        return false;
    auto **argv = (const char **)palloc(sizeof(char *) * (1 + n));
    argv[0] = "DEL";
    for (int i = 0; i < n; i++)
        argv[1 + i] = keys[i];
    bool ok = simple_command(error, 1 + n, argv);
    pfree(argv);
    return ok;
}

bool set_if_absent(const char *key, const char *value, Error *error) {
    if (!ensure_connection(error))
        return false;
    const char *argv[] = {"SET", key, value, "NX"};
    return simple_command(error, 4, argv);
}

char *get_or_error(const char *key) {
    Error error;
    char *value;
    if (!get(key, &value, &error))
        ereport(ERROR,
                (errcode(error.sqlerrcode != 0 ? error.sqlerrcode : ERRCODE_CONNECTION_FAILURE),
                 errmsg("%s", error.message), errdetail("Reading backfill cursor \"%s\".", key),
                 error.hint[0] != '\0' ? errhint("%s", error.hint) : 0));
    return value;
}

} // namespace pgoutbox::redis
