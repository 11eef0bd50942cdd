// Links between clusters (link.hpp).
#include "link/link.hpp"

#include "link/connection.hpp"
#include "link/server_options.hpp"

#include "delivery/tombstones.hpp"
#include "delivery/delivery.hpp"
#include "delivery/drain_pass.hpp"
#include "stats/stats.hpp"
#include "pg/ids.hpp"
#include "pg/spi.hpp"
#include "pg/subtransaction.hpp"
#include "registry/table_meta.hpp"
#include "settings.hpp"

extern "C" {
#include "access/tableam.h"
#include "access/xlog.h"
#include "access/xact.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "port/pg_bswap.h"
#include "libpq-fe.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
}

namespace pgoutbox {

namespace {

// Batches a round hands over (one transaction on each side): the other
// side takes one while this one claims and sends the next.
constexpr int round_batches = 4;

void record_status(const LinkTarget *target, int sent, int recovered, const char *error);

// outbox.receive()'s arguments.  The arrays go in PostgreSQL's binary
// array format (array_recv's), written straight from the batch: as text
// (array_out) they were a tenth of the sender's time and their parsing
// (array_in) the top of the receiver's, and construct_array with array_send
// still called a send function and allocated for every element
// (bench/cells).  Element types are built-in, so their OIDs, which
// array_recv checks, are the same on both sides.
struct BinaryArray {
    StringInfoData buf;

    BinaryArray(Oid element, int n, bool hasnull) {
        initStringInfo(&buf);
        pq_sendint32(&buf, n == 0 ? 0 : 1); // dimensions
        pq_sendint32(&buf, hasnull ? 1 : 0);
        pq_sendint32(&buf, element);
        if (n > 0) {
            pq_sendint32(&buf, n);
            pq_sendint32(&buf, 1); // lower bound
        }
    }
    void int8(int64 value) {
        pq_sendint32(&buf, 8);
        pq_sendint64(&buf, value);
    }
    void text(const char *value) { // NULL for NULL
        if (value == nullptr) {
            pq_sendint32(&buf, -1);
            return;
        }
        int length = (int)strlen(value);
        pq_sendint32(&buf, length);
        appendBinaryStringInfo(&buf, value, length);
    }
    void jsonb(Datum value) { // 0 for NULL
        if (value == (Datum)0) {
            pq_sendint32(&buf, -1);
            return;
        }
        // As jsonb_send: a version byte and the text, written in place.
        int at = buf.len;
        pq_sendint32(&buf, 0);
        pq_sendint8(&buf, 1);
        Jsonb *document = DatumGetJsonbP(value);
        (void)JsonbToCString(&buf, &document->root, VARSIZE(document));
        uint32 length = pg_hton32((uint32)(buf.len - at - 4));
        memcpy(buf.data + at, &length, sizeof length);
    }
};

struct ReceiveParams {
    static constexpr int count = 14;
    const char *values[count];
    int lengths[count];
    int formats[count];

    void text(int i, const char *value) {
        values[i] = value;
        lengths[i] = 0;
        formats[i] = 0;
    }
    void array(int i, const BinaryArray &array) {
        values[i] = array.buf.data;
        lengths[i] = array.buf.len;
        formats[i] = 1;
    }
    void int8_array(int i, const int64 *items, int n) {
        BinaryArray array(INT8OID, n, false);
        for (int k = 0; k < n; k++)
            array.int8(items[k]);
        this->array(i, array);
    }
};

// This side's receipt for a batch it sends: an HMAC-SHA256 keyed by
// outbox.link_secret of the destination's name and a zero byte, the
// batch's token, its number of messages and its row ids (bigints in network
// order, as int8send writes them), in hex.  The other side hands it back
// with the batch when outbox.received() answers; only a batch whose receipt
// is this side's for that destination deletes rows here, and counts the
// messages the receipt covers.
char *receipt(const uint8 *key, int key_len, const char *destination, int64 token, int64 messages,
              const int64 *ids, int n) {
    uint8 digest[PG_SHA256_DIGEST_LENGTH];
    pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);
    uint64 word = pg_hton64((uint64)token);
    uint64 count = pg_hton64((uint64)messages);
    bool ok = ctx != nullptr && pg_hmac_init(ctx, key, key_len) == 0 &&
              pg_hmac_update(ctx, (const uint8 *)destination, strlen(destination) + 1) == 0 &&
              pg_hmac_update(ctx, (const uint8 *)&word, sizeof word) == 0 &&
              pg_hmac_update(ctx, (const uint8 *)&count, sizeof count) == 0;
    for (int i = 0; ok && i < n; i++) {
        word = pg_hton64((uint64)ids[i]);
        ok = pg_hmac_update(ctx, (const uint8 *)&word, sizeof word) == 0;
    }
    ok = ok && pg_hmac_final(ctx, digest, sizeof digest) == 0;
    pg_hmac_free(ctx);
    if (!ok)
        ereport(ERROR, (errmsg("pg_outbox: could not compute a link receipt")));
    char *hex = (char *)palloc(2 * sizeof digest + 1);
    hex_encode((const char *)digest, sizeof digest, hex);
    hex[2 * sizeof digest] = '\0';
    return hex;
}

// The key of the receipts, made if a link exists and it does not
// (outbox._require_link_role makes it with the first link), and the key
// before a rotation while it still counts.
void read_secret(MemoryContext context, LinkTarget *targets, int n) {
    static SPIPlanPtr read_plan = nullptr, make_plan = nullptr;
    static const char *read_sql =
        "SELECT secret, CASE WHEN previous_until > pg_catalog.now() THEN previous END"
        " FROM outbox.link_secret";
    if (n == 0)
        return;
    if (pg::spi_run_kept(&read_plan, "reading the link secret", read_sql, 0, nullptr, nullptr,
                         nullptr, true, SPI_OK_SELECT) == 0) {
        (void)pg::spi_run_kept(
            &make_plan, "making the link secret",
            "INSERT INTO outbox.link_secret (secret) SELECT pg_catalog.decode(pg_catalog.replace("
            "pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text, '-', ''),"
            " 'hex') ON CONFLICT DO NOTHING",
            0, nullptr, nullptr, nullptr, false, SPI_OK_INSERT);
        CommandCounterIncrement();
        (void)pg::spi_run_kept(&read_plan, "reading the link secret", read_sql, 0, nullptr, nullptr,
                               nullptr, true, SPI_OK_SELECT);
    }
    const uint8 *keys[2] = {nullptr, nullptr};
    int lens[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        bool isnull;
        Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, k + 1, &isnull);
        if (isnull)
            continue;
        bytea *secret = DatumGetByteaPP(value);
        lens[k] = (int)VARSIZE_ANY_EXHDR(secret);
        auto *key = (uint8 *)MemoryContextAlloc(context, lens[k]);
        memcpy(key, VARDATA_ANY(secret), lens[k]);
        keys[k] = key;
    }
    for (int t = 0; t < n; t++) {
        targets[t].secret = keys[0];
        targets[t].secret_len = lens[0];
        targets[t].previous = keys[1];
        targets[t].previous_len = lens[1];
    }
}

} // namespace

int link_read_names(MemoryContext context, SPIPlanPtr *plan, const char *table, int32 **ids,
                    const char ***names) {
    uint64 n = pg::spi_run_kept(plan, "reading names",
                                psprintf("SELECT id, name FROM outbox.%s ORDER BY id", table), 0,
                                nullptr, nullptr, nullptr, true, SPI_OK_SELECT);
    MemoryContext caller = MemoryContextSwitchTo(context);
    *ids = (int32 *)palloc(sizeof(int32) * Max(n, 1));
    *names = (const char **)palloc(sizeof(char *) * Max(n, 1));
    for (uint64 r = 0; r < n; r++) {
        bool isnull;
        (*ids)[r] =
            DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
        (*names)[r] = pstrdup(SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2));
    }
    MemoryContextSwitchTo(caller);
    return (int)n;
}

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
        " coalesce(s.next_attempt_at > pg_catalog.now(), false),"
        " EXISTS (SELECT FROM outbox.link_unrecognised u WHERE u.destination = t.destination"
        "          AND u.given_up_at IS NOT NULL)"
        " FROM (SELECT c.name AS destination, c.server, 'control' AS origin, true AS control_silo"
        "         FROM outbox.cells c WHERE c.server IS NOT NULL AND $1 <> 'cell'"
        "       UNION ALL"
        "       SELECT 'control', l.server, l.cell_name, false FROM outbox.control_link l"
        "        WHERE $1 <> 'control') t"
        " LEFT JOIN outbox.link_status s ON s.destination = t.destination ORDER BY 1",
        1, types, args, nullptr, true, SPI_OK_SELECT);
    MemoryContextSwitchTo(context);
    SPITupleTable *links = SPI_tuptable; // record_status runs SQL of its own
    auto *result = (LinkTarget *)palloc0(sizeof(LinkTarget) * Max(n, 1));
    int k = 0;
    *receives_cell = *receives_control = false;
    for (uint64 r = 0; r < n; r++) {
        HeapTuple tuple = links->vals[r];
        TupleDesc desc = links->tupdesc;
        bool isnull;
        bool control_silo = DatumGetBool(SPI_getbinval(tuple, desc, 4, &isnull));
        // Rows of the other silo come in here once a link exists.
        *(control_silo ? receives_cell : receives_control) = true;
        if (DatumGetBool(SPI_getbinval(tuple, desc, 5, &isnull)))
            continue; // backing off
        LinkTarget *target = &result[k++];
        target->destination = pstrdup(SPI_getvalue(tuple, desc, 1));
        target->server = pstrdup(SPI_getvalue(tuple, desc, 2));
        target->sender = pstrdup(SPI_getvalue(tuple, desc, 3));
        target->control_silo = control_silo;
        target->give_up_pending = DatumGetBool(SPI_getbinval(tuple, desc, 6, &isnull));
        const char *unusable = connection_options(target);
        if (unusable != nullptr) {
            record_status(target, 0, 0, unusable); // and it backs off
            MemoryContextSwitchTo(context);
            k--;
        }
    }
    MemoryContextSwitchTo(caller);
    // Every category, for the passes (a link carries them all), and the
    // names of categories and scopes (the other side knows them by name:
    // its ids may differ).
    static SPIPlanPtr categories_plan = nullptr, scopes_plan = nullptr;
    int32 *category_ids, *scope_ids;
    const char **category_names, **scope_names;
    int ncategories =
        link_read_names(context, &categories_plan, "categories", &category_ids, &category_names);
    int nscopes = link_read_names(context, &scopes_plan, "scopes", &scope_ids, &scope_names);
    for (int t = 0; t < k; t++) {
        result[t].ncategories = ncategories;
        result[t].categories = category_ids;
        result[t].category_names = category_names;
        result[t].nscopes = nscopes;
        result[t].scopes = scope_ids;
        result[t].scope_names = scope_names;
    }
    read_secret(context, result, k);
    *targets = result;
    return k;
}

DrainPass *link_pass_begin(const LinkTarget *target) {
    return drain_pass_begin(!target->control_silo, target->control_silo, target->categories,
                            target->ncategories,
                            target->control_silo ? target->destination : nullptr, true);
}

namespace {

// The batch's rows, its receipt and its messages as
// outbox.receive()'s arguments ($4 to $12, and $14): scopes and categories
// by name, cell_names the control rows' cell or this cell's own name,
// tombstones[m] the table whose row of message m's object is gone here and
// present[m] the table whose row is there (messages of a category with one
// registered table here: the other side has no such table to look in).  False, with error, when a
// table's tombstone check fails (delivery/tombstones.hpp): the batch stays here, since its
// tombstones must travel with its messages; that link's round fails and backs off, and the other
// links go on.
bool receive_arguments(const LinkTarget *target, const DrainBatch *batch, const LeasedBatch *leased,
                       int64 token, ReceiveParams *params, char *error, size_t error_size) {
    int n = leased->nmessages;
    BinaryArray scopes(TEXTOID, n, false), identifiers(INT8OID, n, false), cells(TEXTOID, n, false),
        categories(TEXTOID, n, false), objects(INT8OID, n, false);
    bool payload_nulls = false;
    for (int m = 0; m < n; m++)
        payload_nulls = payload_nulls || leased->messages[m].payload == (Datum)0;
    BinaryArray payloads(JSONBOID, n, payload_nulls);
    for (int m = 0; m < n; m++) {
        const LeasedMessage *message = &leased->messages[m];
        const ShardKey *shard = &batch->segments[message->segment].shard;
        scopes.text(
            name_of(shard->shard_scope, target->nscopes, target->scopes, target->scope_names));
        identifiers.int8(shard->shard_identifier);
        cells.text(target->control_silo ? shard->cell_name : target->sender);
        categories.text(name_of(message->category, target->ncategories, target->categories,
                                target->category_names));
        objects.int8(message->object_identifier);
        payloads.jsonb(message->payload);
    }
    int nrows = n == 0 ? 0 : leased->messages[n - 1].row_end;
    params->text(3, receipt(target->secret, target->secret_len, target->destination, token, n,
                            leased->ids, nrows));
    params->int8_array(4, leased->ids, nrows);
    params->array(5, scopes);
    params->array(6, identifiers);
    params->array(7, cells);
    params->array(8, categories);
    params->array(9, objects);
    params->array(10, payloads);

    // tombstones[m] and present[m]: a table's key, or NULL.
    auto *tombstones = (const char **)palloc0(sizeof(char *) * Max(n, 1));
    auto *present = (const char **)palloc0(sizeof(char *) * Max(n, 1));
    int ngone = 0, nthere = 0;
    const Registry *registry = registry_get();
    auto *ids = (int64 *)palloc(sizeof(int64) * Max(n, 1));
    auto *positions = (int *)palloc(sizeof(int) * Max(n, 1));
    for (int t = 0; t < registry->nsole_tables; t++) {
        const SoleTable *table = &registry->sole_tables[t];
        if (table->control != target->control_silo)
            continue;
        int k = 0;
        for (int m = 0; m < n; m++)
            if (leased->messages[m].category == table->category) {
                positions[k] = m;
                ids[k++] = leased->messages[m].object_identifier;
            }
        Datum array;
        char *failure;
        bool told;
        if (!gone_ids(table, ids, k, &array, &failure, &told)) {
            snprintf(error, error_size, "tombstone check of %s failed: %s", table->table_key,
                     failure);
            return false;
        }
        if (!told)
            continue;
        Datum *items = nullptr;
        int nitems = 0;
        if (array != (Datum)0)
            deconstruct_array(DatumGetArrayTypeP(array), INT8OID, 8, FLOAT8PASSBYVAL,
                              TYPALIGN_DOUBLE, &items, nullptr, &nitems);
        // Each gone object's messages of this table's category.
        auto *gone = (int64 *)palloc(sizeof(int64) * Max(nitems, 1));
        for (int i = 0; i < nitems; i++)
            gone[i] = DatumGetInt64(items[i]);
        qsort(gone, nitems, sizeof(int64), pg::compare_int64);
        for (int j = 0; j < k; j++)
            if (nitems > 0 &&
                bsearch(&ids[j], gone, nitems, sizeof(int64), pg::compare_int64) != nullptr) {
                tombstones[positions[j]] = table->table_key;
                ngone++;
            } else {
                present[positions[j]] = table->table_key;
                nthere++;
            }
    }
    BinaryArray gone_tables(TEXTOID, n, ngone < n), present_tables(TEXTOID, n, nthere < n);
    for (int m = 0; m < n; m++) {
        gone_tables.text(tombstones[m]);
        present_tables.text(present[m]);
    }
    params->array(11, gone_tables);
    params->array(13, present_tables);
    return true;
}

void record_status(const LinkTarget *target, int sent, int recovered, const char *error) {
    static SPIPlanPtr sent_plan = nullptr, failed_plan = nullptr;
    Oid types[5] = {TEXTOID, TEXTOID, INT4OID, INT4OID, TEXTOID};
    Datum args[5] = {CStringGetTextDatum(target->destination), CStringGetTextDatum(target->server),
                     Int32GetDatum(sent), Int32GetDatum(recovered),
                     CStringGetTextDatum(error ? error : "")};
    if (error == nullptr) {
        (void)pg::spi_run_kept(
            &sent_plan, "recording a link's round",
            "INSERT INTO outbox.link_status AS s (destination, server, messages_sent, recovered,"
            " last_sent_at) VALUES ($1, $2, $3, $4, pg_catalog.now())"
            " ON CONFLICT (destination) DO UPDATE SET server = excluded.server,"
            " messages_sent = s.messages_sent + excluded.messages_sent,"
            " recovered = s.recovered + excluded.recovered,"
            " last_sent_at = excluded.last_sent_at, failures = 0, next_attempt_at = NULL,"
            " last_error = NULL", // last_error_at stays: when it last failed
            5, types, args, nullptr, false, SPI_OK_INSERT);
        return;
    }
    // The link waits 1 s, 2 s, ... at most a minute.
    (void)pg::spi_run_kept(
        &failed_plan, "recording a link's failure",
        "INSERT INTO outbox.link_status AS s (destination, server, failures, last_error,"
        " last_error_at, next_attempt_at)"
        " VALUES ($1, $2, 1, $5, pg_catalog.now(), pg_catalog.now() + interval '1 second')"
        " ON CONFLICT (destination) DO UPDATE SET server = excluded.server,"
        " failures = s.failures + 1, last_error = excluded.last_error,"
        " last_error_at = excluded.last_error_at,"
        " next_attempt_at = pg_catalog.now() + LEAST(interval '1 second' * 2 ^ s.failures,"
        " interval '1 minute')",
        5, types, args, nullptr, false, SPI_OK_INSERT);
}

} // namespace

int64 link_prune_inbox() {
    if (inbox_retention_s == 0)
        return 0;
    static SPIPlanPtr plan = nullptr;
    Oid types[1] = {INT4OID};
    Datum args[1] = {Int32GetDatum(inbox_retention_s)};
    return (int64)pg::spi_run_kept(
        &plan, "pruning the inbox",
        "DELETE FROM outbox.inbox WHERE ctid = ANY (ARRAY(SELECT i.ctid FROM outbox.inbox i"
        " WHERE i.received_at < pg_catalog.now() - pg_catalog.make_interval(secs => $1)"
        " LIMIT 10000))",
        1, types, args, nullptr, false, SPI_OK_DELETE);
}

namespace {

// The number outbox.receive() answered with for the pipeline's next query,
// or -1 (error says why).
int64 taken_by_receive(PGconn *conn, char *error, size_t error_size) {
    PGresult *result = next_result(conn, error, error_size);
    if (result == nullptr)
        return -1;
    int64 taken = -1;
    if (PQresultStatus(result) == PGRES_TUPLES_OK && PQntuples(result) == 1)
        taken = strtol(PQgetvalue(result, 0, 0), nullptr, 10);
    else
        strlcpy(error,
                PQresultStatus(result) == PGRES_PIPELINE_ABORTED ? "the batch was not taken"
                                                                 : PQresultErrorMessage(result),
                error_size);
    PQclear(result);
    // A query's results end with a NULL.
    if (taken >= 0 && (result = PQgetResult(conn)) != nullptr) {
        PQclear(result);
        strlcpy(error, "outbox.receive() answered more than once", error_size);
        taken = -1;
    }
    return taken;
}

struct SentBatch {
    LeasedBatch leased;
    Oid *partitions; // of the batch's segments
    int64 token;     // its name in the other side's inbox
};

// Batches outbox.received() may answer with, at most: those of the rounds
// whose answers were lost (four batches a round).
constexpr int max_recovered_batches = 64;

// text as a bigint, without raising.
bool parse_int8(const char *text, int64 *value) {
    errno = 0;
    char *end;
    long long parsed = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0')
        return false;
    *value = (int64)parsed;
    return true;
}

// A bigint[] in its text form ("{1,2,3}", no NULL), appended to *ids
// (palloc'd, of *capacity, grown as needed), *n of them, at most max in
// all; false, without raising, for anything else.
bool parse_int8_array(const char *text, int64 **ids, int *capacity, int *n, int max) {
    if (*text++ != '{')
        return false;
    if (*text == '}')
        return text[1] == '\0';
    for (;;) {
        errno = 0;
        char *end;
        long long parsed = strtoll(text, &end, 10);
        if (errno != 0 || end == text || *n >= max)
            return false;
        if (*n == *capacity) {
            *capacity = Min(*capacity * 2, max);
            *ids = (int64 *)repalloc(*ids, sizeof(int64) * *capacity);
        }
        (*ids)[(*n)++] = (int64)parsed;
        if (*end == '}')
            return end[1] == '\0';
        if (*end != ',')
            return false;
        text = end + 1;
    }
}

// Whether answered is this side's receipt for the batch, under its key or,
// during a rotation's overlap, the key before it; compared in constant time.
bool is_receipt(const LinkTarget *target, const char *answered, int64 batch, int64 messages,
                const int64 *ids, int n) {
    const uint8 *keys[2] = {target->secret, target->previous};
    int lens[2] = {target->secret_len, target->previous_len};
    size_t length = strlen(answered);
    bool match = false;
    for (int k = 0; k < 2; k++) {
        if (keys[k] == nullptr)
            continue;
        const char *ours = receipt(keys[k], lens[k], target->destination, batch, messages, ids, n);
        match = (length == strlen(ours) && timingsafe_bcmp(answered, ours, length) == 0) || match;
    }
    return match;
}

// Lists a batch whose receipt is not this side's in outbox.link_unrecognised
// (once); returns whether the operator gave up on it.
bool note_unrecognised(const LinkTarget *target, int64 batch, int64 messages, const int64 *ids,
                       int n) {
    static SPIPlanPtr plan = nullptr;
    Oid types[4] = {TEXTOID, INT8OID, INT4OID, INT8ARRAYOID};
    Datum args[4] = {CStringGetTextDatum(target->destination), Int64GetDatum(batch),
                     Int32GetDatum((int32)messages), pg::int8_array(ids, n)};
    (void)pg::spi_run_kept(
        &plan, "listing a batch of no receipt of this side",
        "INSERT INTO outbox.link_unrecognised AS u (destination, batch, messages, row_ids)"
        " VALUES ($1, $2, $3, $4) ON CONFLICT (destination, batch) DO UPDATE"
        " SET messages = excluded.messages, row_ids = excluded.row_ids"
        " RETURNING u.given_up_at IS NOT NULL",
        4, types, args, nullptr, false, SPI_OK_INSERT_RETURNING);
    bool isnull;
    return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

// After an answer: the listed batches that the destination no longer holds
// leave outbox.link_unrecognised, and link_status counts those it holds
// that nobody gave up on.
void forget_unrecognised(const LinkTarget *target, const int64 *batches, int nbatches,
                         int unrecognised) {
    static SPIPlanPtr forget_plan = nullptr, count_plan = nullptr;
    Oid types[3] = {TEXTOID, INT8ARRAYOID, TEXTOID};
    Datum args[3] = {CStringGetTextDatum(target->destination), pg::int8_array(batches, nbatches),
                     CStringGetTextDatum(target->server)};
    (void)pg::spi_run_kept(&forget_plan, "forgetting batches of no receipt of this side",
                           "DELETE FROM outbox.link_unrecognised u WHERE u.destination = $1"
                           " AND u.batch <> ALL ($2)",
                           2, types, args, nullptr, false, SPI_OK_DELETE);
    types[1] = INT4OID;
    args[1] = Int32GetDatum(unrecognised);
    (void)pg::spi_run_kept(
        &count_plan, "counting batches of no receipt of this side",
        "INSERT INTO outbox.link_status AS s (destination, server, unrecognised)"
        " VALUES ($1, $3, $2) ON CONFLICT (destination) DO UPDATE"
        " SET unrecognised = excluded.unrecognised WHERE s.unrecognised <> excluded.unrecognised",
        3, types, args, nullptr, false, SPI_OK_INSERT);
}

// The batches the other side took whose answer was lost (a crash here, a
// broken connection) are deleted here instead of being sent again, in this
// transaction, before the round claims anything: as a link's batch would
// have been, with the tombstones of the rows gone.  Their messages were
// counted there; here they count as recovered, not as sent.  Returns how
// many messages, or -1 (error says why).
int recover(const LinkTarget *target, Connection *c, char *error, size_t error_size) {
    const char *params[2] = {psprintf("%d", link_protocol), psprintf(INT64_FORMAT, c->session)};
    if (!PQsendQueryParams(c->conn,
                           "SELECT batch, row_ids, messages, receipt FROM outbox.received($1, $2)",
                           2, nullptr, params, nullptr, nullptr, 0) ||
        !PQpipelineSync(c->conn)) {
        strlcpy(error, PQerrorMessage(c->conn), error_size);
        return -1;
    }
    if (!flush(c->conn, error, error_size))
        return -1;
    PGresult *result = next_result(c->conn, error, error_size);
    if (result == nullptr)
        return -1;
    if (PQresultStatus(result) != PGRES_TUPLES_OK) {
        strlcpy(error, PQresultErrorMessage(result), error_size);
        PQclear(result);
        return -1;
    }
    // The answer is the other side's: parsed without raising, so that a bad
    // one fails this link alone (the round's transaction is every
    // destination's), bounded (the other side holds at most the batches of
    // the rounds whose answers were lost), and believed only where it
    // hands back this side's receipt for a batch sent to this destination.
    int nbatches = PQntuples(result);
    if (PQnfields(result) != 4 || nbatches > max_recovered_batches) {
        snprintf(error, error_size, "outbox.received() answered %d rows of %d columns", nbatches,
                 PQnfields(result));
        PQclear(result);
        return -1;
    }
    int max_ids = max_recovered_batches * link_batch_size;
    auto *first_ids = (int64 *)palloc(sizeof(int64) * Max(nbatches, 1));
    auto *batches = (int64 *)palloc(sizeof(int64) * Max(nbatches, 1));
    auto *messages = (int *)palloc(sizeof(int) * Max(nbatches, 1));
    auto *recognised = (bool *)palloc(sizeof(bool) * Max(nbatches, 1));
    int unrecognised = 0;
    int capacity = 1024;
    auto *ids = (int64 *)palloc(sizeof(int64) * capacity);
    int nids = 0;
    for (int i = 0; i < nbatches; i++) {
        int64 count;
        int before = nids;
        bool ok = !PQgetisnull(result, i, 0) && !PQgetisnull(result, i, 1) &&
                  !PQgetisnull(result, i, 2) && parse_int8(PQgetvalue(result, i, 0), &batches[i]) &&
                  parse_int8(PQgetvalue(result, i, 2), &count) && count >= 0 && count <= max_ids &&
                  parse_int8_array(PQgetvalue(result, i, 1), &ids, &capacity, &nids, max_ids);
        if (!ok) {
            snprintf(error, error_size,
                     "outbox.received() answered a batch that is not (bigint, bigint[] of at most "
                     "%d ids, int)",
                     max_ids);
            PQclear(result);
            return -1;
        }
        recognised[i] =
            !PQgetisnull(result, i, 3) && is_receipt(target, PQgetvalue(result, i, 3), batches[i],
                                                     count, ids + before, nids - before);
        if (!recognised[i]) {
            // Not this side's under any key: it deletes nothing here, is
            // listed for the operator, and the link goes on.
            if (note_unrecognised(target, batches[i], count, ids + before, nids - before))
                owe_acknowledgement(c, batches[i]); // given up on: forgotten there
            else
                unrecognised++;
            nids = before;
            messages[i] = 0;
            first_ids[i] = -1;
            continue;
        }
        messages[i] = (int)count;
        first_ids[i] = nids > before ? ids[before] : -1;
    }
    forget_unrecognised(target, batches, nbatches, unrecognised);
    // Every batch's rows in one statement (a scan of this silo's outbox,
    // which has no index: this runs once a connection), and only rows that
    // go to this destination: a cell's answer cannot delete another cell's
    // rows.
    static SPIPlanPtr plans[2] = {nullptr, nullptr};
    Oid types[2] = {INT8ARRAYOID, TEXTOID};
    Datum args[2] = {pg::int8_array(ids, nids), CStringGetTextDatum(target->destination)};
    uint64 n =
        nids == 0
            ? 0
            : pg::spi_run_kept(
                  &plans[target->control_silo], "deleting the rows the other side took",
                  target->control_silo ? "DELETE FROM outbox.control_outbox o WHERE o.id = ANY ($1)"
                                         " AND o.cell_name = $2"
                                         " RETURNING o.id, o.category, o.object_identifier"
                                       : "DELETE FROM outbox.cell_outbox o WHERE o.id = ANY ($1)"
                                         " AND $2 = 'control'"
                                         " RETURNING o.id, o.category, o.object_identifier",
                  2, types, args, nullptr, false, SPI_OK_DELETE_RETURNING);
    auto *deleted = (int64 *)palloc(sizeof(int64) * Max(n, 1));
    auto *categories = (int32 *)palloc(sizeof(int32) * Max(n, 1));
    auto *objects = (int64 *)palloc(sizeof(int64) * Max(n, 1));
    auto *control = (bool *)palloc(sizeof(bool) * Max(n, 1));
    for (uint64 r = 0; r < n; r++) {
        bool isnull;
        HeapTuple row = SPI_tuptable->vals[r];
        deleted[r] = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
        categories[r] = DatumGetInt32(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
        objects[r] = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 3, &isnull));
        control[r] = target->control_silo;
        stats_count_processed(categories[r], 1);
    }
    CommandCounterIncrement();
    tombstones_of_delivered((int)n, categories, objects, control);
    // A batch's rows were deleted together: here now (its messages are
    // recovered), or by this side's round that committed before the
    // acknowledgement went out (nothing to count).
    qsort(deleted, n, sizeof(int64), pg::compare_int64);
    int recovered = 0;
    for (int i = 0; i < nbatches; i++) {
        if (!recognised[i])
            continue;
        if (first_ids[i] >= 0 &&
            bsearch(&first_ids[i], deleted, n, sizeof(int64), pg::compare_int64) != nullptr)
            recovered += messages[i];
        owe_acknowledgement(c, batches[i]);
    }
    PQclear(result);
    // The query's results end with a NULL, the pipeline's with its sync.
    result = PQgetResult(c->conn);
    if (result == nullptr)
        result = next_result(c->conn, error, error_size);
    bool synced = result != nullptr && PQresultStatus(result) == PGRES_PIPELINE_SYNC;
    if (result != nullptr && !synced)
        strlcpy(error, "outbox.received() answered more than once", error_size);
    PQclear(result);
    if (!synced)
        return -1;
    c->recovered = true;
    return recovered;
}

} // namespace

struct LinkRound {
    const LinkTarget *target;
    Connection *connection; // once connected
    int nbatches;
    SentBatch batches[round_batches];
    int shards;       // claimed so far: at most drain_max_shards a round
    int acknowledged; // of connection->acknowledge, sent with the first batch
    int recovered;    // messages
    bool over;        // the pass is
    bool failed;
    char error[512];
};

LinkRound *link_round_begin(const LinkTarget *target) {
    auto *round = (LinkRound *)palloc0(sizeof(LinkRound));
    round->target = target;
    return round;
}

LinkSend link_round_send(LinkRound *round, DrainPass *pass) {
    if (round->over)
        return LinkSend::PassOver;
    if (round->failed || round->nbatches == round_batches || round->shards >= drain_max_shards)
        return LinkSend::RoundFull;
    const LinkTarget *target = round->target;
    SentBatch *sent = &round->batches[round->nbatches];
    DrainBatch *batch;
    for (;;) {
        batch = drain_pass_next(pass, link_batch_size, drain_max_shards - round->shards);
        if (batch == nullptr) {
            round->over = true;
            return LinkSend::PassOver;
        }
        // Connected only when there is something to send, and before the
        // claim: the rows the other side took already are gone by then
        // (lease_batch finds the rows as they are now).
        if (round->connection == nullptr) {
            round->connection = round_connection(target, round->error, sizeof round->error);
            round->failed = round->connection == nullptr;
            if (!round->failed && (!round->connection->recovered || target->give_up_pending)) {
                round->recovered =
                    recover(target, round->connection, round->error, sizeof round->error);
                round->failed = round->recovered < 0;
            }
            if (round->failed)
                return LinkSend::RoundFull;
        }
        lease_batch(batch, &sent->leased);
        // The pass goes on after this batch whatever becomes of it: its
        // shards are skipped to the pass's end (lease_batch blocks them).
        drain_pass_batch_done(pass);
        round->shards += batch->nsegments;
        if (sent->leased.nmessages > 0)
            break;
        if (round->shards >= drain_max_shards)
            return LinkSend::RoundFull;
    }
    round->nbatches++;
    sent->partitions = (Oid *)palloc(sizeof(Oid) * Max(batch->nsegments, 1));
    for (int s = 0; s < batch->nsegments; s++)
        sent->partitions[s] = shard_partition(&batch->segments[s].shard);
    // A random token names the batch in the other side's inbox.
    sent->token = pg::random_token();
    Connection *c = round->connection;
    ReceiveParams params;
    params.text(0, psprintf("%d", link_protocol));
    params.text(1, psprintf(INT64_FORMAT, c->session));
    params.text(2, psprintf(INT64_FORMAT, sent->token));
    if (!receive_arguments(target, batch, &sent->leased, sent->token, &params, round->error,
                           sizeof round->error)) {
        round->failed = true; // nothing of this batch was sent
        return LinkSend::Sent;
    }
    if (round->nbatches == 1)
        round->acknowledged = c->nacknowledge;
    params.int8_array(12, c->acknowledge, round->nbatches == 1 ? c->nacknowledge : 0);
    pgstat_report_activity(STATE_RUNNING, "pg_outbox: sending link batches");
    if (!PQsendQueryParams(c->conn,
                           "SELECT outbox.receive($1::int, $2::bigint, $3::bigint, $4::text,"
                           " $5::bigint[], $6::text[], $7::bigint[], $8::text[], $9::text[],"
                           " $10::bigint[], $11::jsonb[], $12::text[], $13::bigint[],"
                           " $14::text[])",
                           ReceiveParams::count, nullptr, params.values, params.lengths,
                           params.formats, 0) ||
        !PQpipelineSync(c->conn)) {
        strlcpy(round->error, PQerrorMessage(c->conn), sizeof round->error);
        round->failed = true;
    } else if (!flush(c->conn, round->error, sizeof round->error)) {
        round->failed = true;
    }
    return LinkSend::Sent;
}

namespace {

// Deletes the rows of the round's batches, which the other side took, and
// records the tombstones of their objects as a drain would; returns the
// messages.
int delete_taken(const LinkRound *round) {
    const LinkTarget *target = round->target;
    TimestampTz now = GetCurrentTimestamp();
    int nmessages = 0;
    for (int b = 0; b < round->nbatches; b++) {
        const LeasedBatch &leased = round->batches[b].leased;
        const Oid *partitions = round->batches[b].partitions;
        auto *categories = (int32 *)palloc(sizeof(int32) * leased.nmessages);
        auto *objects = (int64 *)palloc(sizeof(int64) * leased.nmessages);
        auto *control = (bool *)palloc(sizeof(bool) * leased.nmessages);
        int start = 0;
        for (int m = 0; m < leased.nmessages; m++) {
            const LeasedMessage *message = &leased.messages[m];
            bool last_of_segment =
                m + 1 == leased.nmessages || leased.messages[m + 1].segment != message->segment;
            if (last_of_segment) {
                // By the ctids the batch found them at, in this transaction
                // and under the shard's claim, as a drain deletes.
                Relation rel = table_open(partitions[message->segment], RowExclusiveLock);
                for (int r = start; r < message->row_end; r++)
                    simple_table_tuple_delete(rel, &leased.ctids[r], GetActiveSnapshot());
                table_close(rel, NoLock);
                start = message->row_end;
            }
            int nrows = message->row_end - (m == 0 ? 0 : leased.messages[m - 1].row_end);
            stats_count_delivered(message->category, message->oldest_added, now);
            stats_count_processed(message->category, nrows);
            categories[m] = message->category;
            objects[m] = message->object_identifier;
            control[m] = target->control_silo;
        }
        CommandCounterIncrement();
        tombstones_of_delivered(leased.nmessages, categories, objects, control);
        nmessages += leased.nmessages;
    }
    return nmessages;
}

} // namespace

int link_round_finish(LinkRound *round, char *error, size_t error_size) {
    const LinkTarget *target = round->target;
    if (round->nbatches == 0 && !round->failed) {
        if (round->recovered > 0)
            record_status(target, 0, round->recovered, nullptr);
        return 0;
    }
    // A round that sent a batch has a connection.
    if (!round->failed && round->connection == nullptr) {
        strlcpy(round->error, "pg_outbox: a link round sent a batch without a connection",
                sizeof round->error);
        round->failed = true;
    }
    PGconn *conn = round->connection ? round->connection->conn : nullptr;
    // Each batch is a transaction of its own there (a sync point follows
    // each): the other side's worker delivers the first while this side
    // sends the rest, rather than all of them after the round (bench/cells).
    // A batch that failed there fails the round here: this side deletes
    // nothing, and the next connection finds the batches the other side did
    // take in its inbox (recover()).
    for (int b = 0; b < round->nbatches && !round->failed; b++) {
        round->failed = taken_by_receive(conn, round->error, sizeof round->error) < 0;
        if (round->failed)
            break;
        PGresult *sync = next_result(conn, round->error, sizeof round->error);
        round->failed = sync == nullptr || PQresultStatus(sync) != PGRES_PIPELINE_SYNC;
        if (sync != nullptr && round->failed)
            strlcpy(round->error, PQresultErrorMessage(sync), sizeof round->error);
        PQclear(sync);
    }
    if (round->failed) {
        // Whatever state it is in, the next round starts anew, and asks
        // what the other side took of this one.
        if (round->connection != nullptr)
            drop_connection(round->connection);
        strlcpy(error, round->error, error_size);
        record_status(target, 0, 0, error);
        return -1;
    }
    // Taken there: delivered here, in a subtransaction of this destination
    // (a failure here rolls back its deletions alone, and the other links
    // go on) of this transaction (a crash before it commits leaves the rows
    // here).  Either way the next connection finds the batches in the
    // other side's inbox and deletes the rows then.
    int nmessages = 0;
    ErrorData *failure = pg::in_subtransaction([&] { nmessages = delete_taken(round); },
                                               [](const ErrorData *caught) {
                                                   return ERRCODE_TO_CATEGORY(caught->sqlerrcode) !=
                                                          ERRCODE_OPERATOR_INTERVENTION;
                                               });
    if (failure != nullptr) {
        drop_connection(round->connection);
        snprintf(error, error_size, "taken by %s, but deleting its rows here failed: %s",
                 target->destination, failure->message ? failure->message : "");
        FreeErrorData(failure);
        record_status(target, 0, 0, error);
        return -1;
    }
    // The acknowledged batches are gone there, the round's are there (owed
    // as pending: an ERROR from now on rolls the deletions back, and
    // link_rounds_ended has this side ask again).
    Connection *c = round->connection;
    c->nacknowledge -= round->acknowledged;
    if (round->acknowledged > 0)
        memmove(c->acknowledge, c->acknowledge + round->acknowledged,
                sizeof(int64) * (c->nacknowledge + c->npending));
    for (int b = 0; b < round->nbatches; b++)
        owe_acknowledgement(c, round->batches[b].token);
    record_status(target, nmessages, round->recovered, nullptr);
    return nmessages;
}

void link_rounds_ended(bool committed) {
    int n;
    Connection *all = link_connections(&n);
    bool pending = false;
    for (int i = 0; i < n; i++)
        pending = pending || all[i].npending > 0;
    // An acknowledgement makes the other side forget the batch, so it goes
    // out only once this side's deletion of the batch's rows is durable:
    // the worker commits with synchronous_commit = off, and a commit lost
    // in a crash (a backend's SIGKILL restarts the postmaster, whose WAL
    // buffers go) would bring the rows back with no inbox entry left for
    // recovery to find: they went out again, and were applied twice
    // (cells.sh part 5, under the sanitizers).  As the cursor store does
    // before a key moves in Redis.
    if (committed && pending && !XLogRecPtrIsInvalid(XactLastCommitEnd))
        XLogFlush(XactLastCommitEnd);
    for (int i = 0; i < n; i++) {
        Connection *c = &all[i];
        if (committed)
            c->nacknowledge += c->npending;
        else if (c->npending > 0)
            c->recovered = false; // the other side took batches this side still has
        c->npending = 0;
    }
}

} // namespace pgoutbox
