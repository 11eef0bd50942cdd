// The background worker "pg_outbox worker": registered when pg_outbox is in
// shared_preload_libraries, connected to outbox.database_name.
//
// Each cycle (every outbox.naptime, or when woken):
//   1. drain the due shards of the local silo(s), oldest first, one
//      transaction per batch, counting the outbox rows it scheduled (a
//      pass reads the partitions that may hold something to deliver:
//      delivery/partition_watch.hpp);
//   2. backfill with what is left of the per-minute budget
//      (outbox.backfill_rate_per_minute, held over a minute, not per cycle),
//      but at least outbox.backfill_min_rate_per_minute a minute:
//      one batch per table per transaction, so the Redis cursor moves after
//      each commit.
// Between cycles, and between the units of work of a cycle, a commit that
// wrote rows a handler takes starts a pass over the partitions it wrote
// (outbox.wake_on_commit): at most one every woken_pass_ms.
// SIGHUP reloads the GUCs.  SIGTERM (pg_terminate_backend, shutdown) ends it
// at the next interrupt check, mid-backfill included, with exit code 1: the
// postmaster starts it again after bgw_restart_time, and it resumes from the
// cursor.  Redis being down pauses the backfill: logged once per outage,
// retried with a growing pause, resumed when Redis is back.
//
// Plain C-style code: every PostgreSQL error unwinds to the PG_TRY of the
// unit of work it happened in.
#include "worker/worker.hpp"

#include "pg/guard.hpp"
#include "pg/hash.hpp"

#include "backfill/backfill_batch.hpp"
#include "backfill/backfill_walk.hpp"
#include "cascade/cascade.hpp"
#include "consumers/turns.hpp"
#include "delivery/tombstones.hpp"
#include "delivery/compaction.hpp"
#include "delivery/delivery.hpp"
#include "delivery/drain_pass.hpp"
#include "delivery/partition_watch.hpp"
#include "handlers/handlers.hpp"
#include "link/link.hpp"
#include "pg/spi.hpp"
#include "resync/resync.hpp"
#include "settings.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "pgstat.h"
#include "catalog/pg_extension.h"
#include "storage/lmgr.h"
#include "commands/async.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/ps_status.h"

PGDLLEXPORT void outbox_worker_main(Datum);
}

namespace pgoutbox {

namespace {

// The per-minute window of the backfill budget.
TimestampTz window_start = 0;
int64 window_used = 0;
int64 window_backfilled = 0; // of window_used: for outbox.backfill_min_rate_per_minute

// Redis (or another cursor store failure): pause the backfill, log once.
bool backfill_paused = false;
TimestampTz backfill_retry_at = 0;
int backfill_pause_ms = 0;

MemoryContext cycle_context = nullptr;

// When the worker last pruned outbox.inbox.
TimestampTz inbox_pruned_at = 0;

// For outbox.worker_status: "<what>: <message>", formatted on the stack
// (errors outside a cycle would otherwise leak into a long-lived context).
void record_error(const char *what, const char *message) {
    char text[sizeof worker_shared->last_error];
    snprintf(text, sizeof text, "%s: %s", what, message ? message : "");
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&worker_shared->mutex);
    memcpy(worker_shared->last_error, text, sizeof text);
    worker_shared->last_error_at = now;
    SpinLockRelease(&worker_shared->mutex);
}

void report_error(const char *what, ErrorData *edata) {
    ereport(LOG, (errmsg("pg_outbox worker: %s failed: %s", what, edata->message)));
    record_error(what, edata->message);
}

// Runs one unit of work in its own transaction; returns false when it raised
// an ERROR, after logging it, or handing it to *error (in the caller's
// memory context, which the caller resets).  Either way the caller's memory
// context is current again afterwards: CommitTransactionCommand and
// AbortOutOfAnyTransaction leave TopMemoryContext current, and whatever was
// allocated there would never be freed.
//
// Each one also relays the commits that wrote outbox rows since the last to
// consumers, with a NOTIFY sent when it commits: a long cycle delays a
// wake-up by one unit of work at most.  At most one NOTIFY every
// notify_interval_ms: until it is sent, the flag stays set and a commit
// only reads it, so the cost to writers is bounded whatever their rate (a
// NOTIFY and a latch per commit took 43% off 30,000 single-row inserts a
// second on two cores, bench/consumer).
constexpr int notify_interval_ms = 10;
TimestampTz last_notify = 0;

// The worker's timers are wall-clock timestamps (GetCurrentTimestamp), and
// a virtual machine's clock can be stepped back (seen here: a minute): a
// mark in the past that is now in the future counts as now, so that a step
// back never holds the worker for its length.
TimestampTz not_after_now(TimestampTz mark, TimestampTz now) {
    return mark > now ? now : mark;
}

bool notify_due() {
    TimestampTz now = GetCurrentTimestamp();
    last_notify = not_after_now(last_notify, now);
    return pg_atomic_read_u32(&worker_shared->notify_pending) != 0 &&
           TimestampDifferenceExceeds(last_notify, now, notify_interval_ms);
}

void drain_woken();

// Whether the extension was there at the last look: without it there is
// nothing to drain (a pass would fail on every wake-up).
bool extension_installed = false;

template <typename Fn> bool in_transaction(const char *what, Fn fn, ErrorData **error) {
    drain_woken();
    MemoryContext context = CurrentMemoryContext;
    volatile bool ok = true;
    volatile bool notifying = false;
    PG_TRY();
    {
        SetCurrentStatementStartTimestamp();
        StartTransactionCommand();
        SPI_connect();
        PushActiveSnapshot(GetTransactionSnapshot());
        pgstat_report_activity(STATE_RUNNING, what);
        if (hold_extension())
            fn();
        else
            extension_installed = false;
        SPI_finish();
        PopActiveSnapshot();
        if (notify_due() && pg_atomic_exchange_u32(&worker_shared->notify_pending, 0) != 0) {
            notifying = true;
            last_notify = GetCurrentTimestamp();
            Async_Notify(consumer_channel, "");
        }
        CommitTransactionCommand();
    }
    PG_CATCH();
    {
        pg::forget_abandoned_frames();
        if (notifying)
            pg_atomic_write_u32(&worker_shared->notify_pending, 1); // the next one sends it
        HOLD_INTERRUPTS();
        MemoryContextSwitchTo(context);
        ErrorData *edata = CopyErrorData();
        FlushErrorState();
        AbortOutOfAnyTransaction();
        RESUME_INTERRUPTS();
        MemoryContextSwitchTo(context);
        if (error != nullptr) {
            *error = edata;
        } else {
            report_error(what, edata);
            FreeErrorData(edata);
        }
        ok = false;
    }
    PG_END_TRY();
    MemoryContextSwitchTo(context);
    pgstat_report_activity(STATE_IDLE, nullptr);
    return ok;
}

// Set while a pass is under way: no other starts meanwhile.
bool draining = false;
// worker_claims_ended() when the last pass that woke consumers for it began.
uint32 claims_ended_seen = 0;

// One pass over the due shards of the local silo(s) (delivery/drain_pass.hpp),
// one transaction per batch, over the partitions scope says.  Returns the
// outbox rows of the batches; *delivered counts messages handed to
// handlers.
int64 drain_pass(bool cell, bool control, PassScope scope, int64 *delivered) {
    draining = true;
    uint32 claims_ended = worker_claims_ended();
    DrainPass *pass = drain_pass_begin(cell, control, nullptr, 0, nullptr, false, scope);
    int64 scheduled = 0;
    for (bool more = true; more;) {
        CHECK_FOR_INTERRUPTS();
        DrainStats stats = {0, 0, 0, 0};
        in_transaction(
            "pg_outbox: draining a batch",
            [&] {
                DrainBatch *batch = drain_pass_next(pass, drain_batch_size, drain_max_shards);
                if (batch == nullptr) {
                    more = false;
                    return;
                }
                drain_batch(batch, &stats);
                drain_pass_batch_done(pass);
                scheduled += batch->nrows;
            },
            nullptr);
        *delivered += stats.messages;
        SpinLockAcquire(&worker_shared->mutex);
        worker_shared->shards_drained += stats.shards;
        worker_shared->messages_delivered += stats.messages;
        SpinLockRelease(&worker_shared->mutex);
    }
    drain_pass_end(pass);
    draining = false;
    // Consumers' claims ended before the pass: it read their partitions
    // (claim_ended_at_commit), so their claimers' turns may be back, and
    // consumers are woken to claim again.
    if (claims_ended != claims_ended_seen) {
        claims_ended_seen = claims_ended;
        if (notify_consumers)
            pg_atomic_write_u32(&worker_shared->notify_pending, 1);
    }
    return scheduled;
}

// Passes woken by commits (outbox.wake_on_commit).  At most one starts
// every woken_pass_ms, and a pass waits after the last one at least as long
// as that one took: a stream of commits is drained in passes of a few
// milliseconds' commits each, not one per commit, and a stream faster than
// the worker's passes makes them longer and fewer, each batch holding more
// (a transaction's cost is then shared by more rows), and leaves the
// writers at least half the worker's core.  They drain the silos the last
// cycle drained (before the first, those of outbox.silo_mode), and what
// they schedule counts against the backfill's budget at the next cycle.
constexpr long woken_pass_ms = 5;
TimestampTz woken_pass_at = 0; // when the next may start
bool cycle_cell = false, cycle_control = false;
bool cycle_links = false; // the last cycle had links to send over
// Set while links send: a woken pass between their rounds sends none.
bool sending_links = false;
int64 send_links(int ntargets, LinkTarget *targets);
int64 scheduled_between = 0;

bool look_for_extension() {
    in_transaction(
        "pg_outbox: checking the extension", [] { extension_installed = true; }, nullptr);
    return extension_installed;
}

// Milliseconds until a woken pass may start; -1: none is asked for.
long woken_pass_wait(TimestampTz now) {
    if (!wake_on_commit || !worker_enabled || !partition_watch_written(cycle_cell, cycle_control))
        return -1;
    // A clock stepped back: a mark more than a pause ahead counts as now.
    if (woken_pass_at > now && TimestampDifferenceExceeds(now, woken_pass_at, naptime_ms))
        woken_pass_at = now;
    long secs;
    int usecs;
    TimestampDifference(now, woken_pass_at, &secs, &usecs);
    return secs * 1000 + (usecs + 999) / 1000;
}

void drain_woken() {
    if (draining || IsTransactionState())
        return;
    TimestampTz now = GetCurrentTimestamp();
    if (woken_pass_wait(now) != 0)
        return;
    // A commit that set a bit had the extension: created since the last
    // look, or dropped since that commit (the bits then mean nothing).
    draining = true; // look_for_extension's transaction starts no pass
    bool installed = extension_installed || look_for_extension();
    draining = false;
    if (!installed) {
        pg_atomic_write_u64(&worker_shared->written[0], 0);
        pg_atomic_write_u64(&worker_shared->written[1], 0);
        return;
    }
    int64 delivered = 0;
    int64 scheduled = drain_pass(cycle_cell, cycle_control, PassScope::Woken, &delivered);
    // Then the links, when the last cycle had any: a commit's rows for
    // another cluster go out now, not at the next cycle (a naptime later).
    if (cycle_links && !sending_links) {
        MemoryContext context = AllocSetContextCreate(CurrentMemoryContext, "pg_outbox woken links",
                                                      ALLOCSET_SMALL_SIZES);
        LinkTarget *targets = nullptr;
        int ntargets = 0;
        bool receives_cell, receives_control;
        // The rounds' transactions start no woken pass meanwhile: the
        // handlers' next one waits for these rounds (one pass, and a second
        // at most, of each link), as the links wait for the handlers'.
        draining = true;
        in_transaction(
            "pg_outbox: reading links",
            [&] { ntargets = link_targets(context, &targets, &receives_cell, &receives_control); },
            nullptr);
        delivered += send_links(ntargets, targets);
        draining = false;
        MemoryContextDelete(context);
    }
    TimestampTz end = GetCurrentTimestamp();
    woken_pass_at = Max(TimestampTzPlusMilliseconds(now, woken_pass_ms), end + (end - now));
    scheduled_between += scheduled;
    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->rows_scheduled += scheduled;
    SpinLockRelease(&worker_shared->mutex);
}

// Compacts the partitions of the local silo(s) that are due (delivery/
// compaction.hpp), each in a transaction of its own: its lock is held to
// the commit, so capture into the other partitions never waits for it.
void compact(bool cell, bool control) {
    if (compact_min_size_kb <= 0)
        return;
    Oid partitions[2 * 64];
    int n = 0;
    in_transaction(
        "pg_outbox: finding partitions to compact",
        [&] {
            const Registry *registry = registry_get();
            for (int silo = 0; silo < 2; silo++) {
                if (!(silo == 0 ? cell : control))
                    continue;
                const OutboxTable *table =
                    silo == 0 ? &registry->cell_outbox : &registry->control_outbox;
                for (int r = 0; r < table->nremainders && n < (int)lengthof(partitions); r++)
                    if (compaction_due(table->by_remainder[r].relid, false))
                        partitions[n++] = table->by_remainder[r].relid;
            }
        },
        nullptr);
    for (int i = 0; i < n; i++) {
        CHECK_FOR_INTERRUPTS();
        in_transaction(
            "pg_outbox: compacting a partition", [&] { (void)compact_partition(partitions[i]); },
            nullptr);
    }
}

// A table whose batch failed for a reason of its own (a bad cursor value, a
// dropped column, an owner's hostile index predicate) is skipped for a
// growing pause; the other tables go on.  Only a failing cursor store (a
// connection error: Redis down) pauses the whole backfill.  A re-sync job
// whose batch failed waits the same way, in a table of its own.
struct Pause {
    int64 key; // hash key: a table's OID, or a re-sync job's id
    TimestampTz retry_at;
    int pause_ms;
};
HTAB *table_pauses = nullptr;
HTAB *job_pauses = nullptr;

Pause *find_pause(HTAB **pauses, int64 key, bool create) {
    if (*pauses == nullptr)
        *pauses = pg::blob_hash("pg_outbox paused work", 16, sizeof(int64), sizeof(Pause),
                                TopMemoryContext);
    bool found;
    auto *pause = (Pause *)hash_search(*pauses, &key, create ? HASH_ENTER : HASH_FIND, &found);
    if (create && !found) {
        pause->retry_at = 0;
        pause->pause_ms = 0;
    }
    return pause;
}

Pause *table_pause(Oid relid, bool create) {
    return find_pause(&table_pauses, relid, create);
}

int next_pause(int pause_ms) {
    return Min(Max(pause_ms * 2, 1000), 60000);
}

// Marks a table's job ("backfill" or "cascade") as failing, or not, for
// outbox._tables_failing().
void set_failing(const char *job, Oid relid, bool failing) {
    SpinLockAcquire(&worker_shared->mutex);
    int at = -1;
    for (int i = 0; i < worker_shared->nfailing && at < 0; i++)
        if (worker_shared->failing[i] == relid && worker_shared->failing_job[i] == job[0])
            at = i;
    if (failing && at < 0 && worker_shared->nfailing < (int)lengthof(worker_shared->failing)) {
        worker_shared->failing[worker_shared->nfailing] = relid;
        worker_shared->failing_job[worker_shared->nfailing++] = job[0];
    } else if (!failing && at >= 0) {
        int last = --worker_shared->nfailing;
        worker_shared->failing[at] = worker_shared->failing[last];
        worker_shared->failing_job[at] = worker_shared->failing_job[last];
    }
    SpinLockRelease(&worker_shared->mutex);
}

// job: "backfill" or "cascade"; the table's other job goes on.
void table_failed(const char *job, Oid relid, const char *name, const ErrorData *error) {
    set_failing(job, relid, true);
    Pause *pause = table_pause(relid, true);
    pause->pause_ms = next_pause(pause->pause_ms);
    pause->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), pause->pause_ms);
    ereport(LOG, (errmsg("pg_outbox worker: %s of %s failed: %s", job, name, error->message),
                  errdetail("Its %s is retried in %d s; other tables go on.", job,
                            pause->pause_ms / 1000)));
    char what[128];
    snprintf(what, sizeof what, "%s of %s", job, name);
    record_error(what, error->message);
}

void store_failed(const ErrorData *error) {
    if (!backfill_paused)
        ereport(LOG, (errmsg("pg_outbox worker: backfill paused: %s", error->message),
                      errdetail("Retried with a growing pause; logged once per outage.")));
    record_error("backfill paused", error->message);
    backfill_paused = true;
    backfill_pause_ms = next_pause(backfill_pause_ms);
    backfill_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), backfill_pause_ms);
}

// Marks a table's backfill as waiting for a shard to drain, or not.
void set_throttled(Oid relid, bool throttled) {
    SpinLockAcquire(&worker_shared->mutex);
    int at = -1;
    for (int i = 0; i < worker_shared->nthrottled && at < 0; i++)
        if (worker_shared->throttled[i] == relid)
            at = i;
    if (throttled && at < 0 && worker_shared->nthrottled < (int)lengthof(worker_shared->throttled))
        worker_shared->throttled[worker_shared->nthrottled++] = relid;
    else if (!throttled && at >= 0)
        worker_shared->throttled[at] = worker_shared->throttled[--worker_shared->nthrottled];
    SpinLockRelease(&worker_shared->mutex);
}

// The budgeted walk (backfill/backfill_walk.hpp), one transaction per batch.
// With outbox.backfill_max_shard_depth, a batch is at most that many ids,
// so that a shard goes at most one batch past the bound, and a batch that
// would add rows to a shard at the bound waits (backfill_batch).
// A reload the postmaster signalled: the new settings hold from here on.
// Between transactions: at the top of the loop, and before each backfill
// step (an operator's new outbox.backfill_max_shard_depth is in force for
// the next batch, not a cycle later, after a slow handler).
void reload_settings() {
    if (ConfigReloadPending) {
        ConfigReloadPending = false;
        ProcessConfigFile(PGC_SIGHUP);
    }
    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->backfill_max_shard_depth = backfill_max_shard_depth;
    SpinLockRelease(&worker_shared->mutex);
}

// A re-sync job's batch (resync/resync.hpp) that failed for a reason of
// its own: the job waits a growing pause, its last_error says why.
void job_failed(int64 job, const ErrorData *error) {
    Pause *pause = find_pause(&job_pauses, job, true);
    pause->pause_ms = next_pause(pause->pause_ms);
    pause->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), pause->pause_ms);
    ereport(LOG, (errmsg("pg_outbox worker: re-sync job " INT64_FORMAT " failed: %s", job,
                         error->message),
                  errdetail("It is retried in %d s; other work goes on.", pause->pause_ms / 1000)));
    char what[64];
    snprintf(what, sizeof what, "re-sync job " INT64_FORMAT, job);
    record_error(what, error->message);
    in_transaction(
        "pg_outbox: recording a re-sync's error", [&] { resync_record_error(job, error->message); },
        nullptr);
}

// One batch of re-sync job `job`, in a transaction of its own, with the
// hot-shard guard; as a backfill table's batch in the walk.
BatchOutcome resync_step(int64 job, int32 batch_size, TimestampTz now, int64 *rows,
                         int64 *written) {
    Pause *pause = find_pause(&job_pauses, job, false);
    if (pause != nullptr && now < pause->retry_at)
        return BatchOutcome::Nothing;
    int32 max_depth = backfill_max_shard_depth;
    if (max_depth > 0)
        batch_size = Min(batch_size, max_depth);
    ResyncBatch batch = {0, 0, false, false};
    bool ran = false;
    ErrorData *error = nullptr;
    bool ok = in_transaction(
        "pg_outbox: re-syncing", [&] { ran = resync_batch(job, batch_size, max_depth, &batch); },
        &error);
    if (!ok) {
        bool store_down = ERRCODE_TO_CATEGORY(error->sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION;
        if (store_down)
            store_failed(error);
        else
            job_failed(job, error);
        FreeErrorData(error);
        return store_down ? BatchOutcome::Stop : BatchOutcome::Nothing;
    }
    if (pause != nullptr) {
        int64 key = job;
        (void)hash_search(job_pauses, &key, HASH_REMOVE, nullptr);
    }
    if (!ran || batch.throttled)
        return BatchOutcome::Nothing;
    *rows = batch.rows;
    *written = batch.written;
    return BatchOutcome::Ran;
}

// The backfill's tables, then the running re-sync jobs, oldest first, in
// one walk: a job gets what the tables left of the budget.
void backfill(int64 budget) {
    TimestampTz now = GetCurrentTimestamp();
    if (backfill_paused && now < backfill_retry_at)
        return;
    Oid *tables = nullptr;
    char **names = nullptr;
    int ntables = 0;
    int64 *jobs = nullptr;
    int njobs = 0;
    in_transaction(
        "pg_outbox: listing tables",
        [&] {
            ntables = local_tables(silo_mode, cycle_context, &tables, &names);
            njobs = running_resyncs(cycle_context, &jobs);
        },
        nullptr);
    auto batch = [&](int i, int32 batch_size, int64 *ids, int64 *written) {
        CHECK_FOR_INTERRUPTS();
        reload_settings();
        if (i >= ntables)
            return resync_step(jobs[i - ntables], batch_size, now, ids, written);
        Pause *pause = table_pause(tables[i], false);
        if (pause != nullptr && now < pause->retry_at)
            return BatchOutcome::Nothing;
        bool ran = false;
        bool throttled = false;
        int32 max_depth = backfill_max_shard_depth;
        if (max_depth > 0)
            batch_size = Min(batch_size, max_depth);
        ErrorData *error = nullptr;
        TimestampTz started = GetCurrentTimestamp();
        bool ok = in_transaction(
            "pg_outbox: backfilling",
            [&] {
                BatchPlan plan;
                ran = backfill_batch(tables[i], batch_size, self_hosted, max_depth, &plan, written,
                                     &throttled);
                *ids = ran ? plan.count : 0;
            },
            &error);
        set_throttled(tables[i], ok && throttled);
        if (ok && ran && *ids > 0) {
            long secs;
            int usecs;
            TimestampDifference(started, GetCurrentTimestamp(), &secs, &usecs);
            SpinLockAcquire(&worker_shared->mutex);
            worker_shared->backfill_ids_timed =
                saturating_add(worker_shared->backfill_ids_timed, *ids);
            worker_shared->backfill_usecs += (int64)secs * USECS_PER_SEC + usecs;
            SpinLockRelease(&worker_shared->mutex);
        }
        if (!ok) {
            bool store_down =
                ERRCODE_TO_CATEGORY(error->sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION;
            if (store_down)
                store_failed(error);
            else
                table_failed("backfill", tables[i], names[i], error);
            FreeErrorData(error);
            return store_down ? BatchOutcome::Stop : BatchOutcome::Nothing;
        }
        if (pause != nullptr) {
            int64 key = pause->key;
            (void)hash_search(table_pauses, &key, HASH_REMOVE, nullptr);
        }
        set_failing("backfill", tables[i], false);
        if (backfill_paused)
            ereport(LOG, (errmsg("pg_outbox worker: backfill resumed")));
        backfill_paused = false;
        backfill_pause_ms = 0;
        return ran ? BatchOutcome::Ran : BatchOutcome::Nothing;
    };
    WalkTotals totals = backfill_walk(ntables + njobs, budget, batch);
    window_used = saturating_add(window_used, totals.ids);
    window_backfilled = saturating_add(window_backfilled, totals.ids);
    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->rows_backfilled = saturating_add(worker_shared->rows_backfilled, totals.ids);
    SpinLockRelease(&worker_shared->mutex);
}

// The cross-silo cascade (cascade/): a step (one transaction) of each
// registered reference in turn, until none has more or budget ids are
// covered.  Returns the ids covered: steps without work cost nothing.
// A failing cursor store pauses it with the backfill; a failing reference
// (a hostile trigger, a dropped index) pauses its table's cascade.
uint32 cascade_turn = 0;

// A cycle's cascade stops after this long even with budget left (a high
// outbox.backfill_rate_per_minute, steps that cover few ids): the drain,
// the links and the backfill come round at least this often.  The next
// cycle then starts at once.
constexpr long cascade_slice_ms = 1000;
bool cascade_cut_short = false;

int64 cascade(int64 budget) {
    TimestampTz now = GetCurrentTimestamp();
    if (budget <= 0 || (backfill_paused && now < backfill_retry_at))
        return 0;
    Oid *tables = nullptr;
    char **columns = nullptr;
    char **names = nullptr;
    int n = 0;
    in_transaction(
        "pg_outbox: listing foreign keys",
        [&] { n = registered_foreign_keys(cycle_context, &tables, &columns, &names); }, nullptr);
    // Round-robin, a step of each reference in turn, from a reference that
    // moves on every call: one busy table cannot take the whole budget
    // while the others' tombstones wait.
    int64 used = 0;
    auto *done = (bool *)palloc0(sizeof(bool) * Max(n, 1));
    int first = n > 0 ? (int)(cascade_turn++ % (uint32)n) : 0;
    TimestampTz slice_end = TimestampTzPlusMilliseconds(now, cascade_slice_ms);
    for (bool going = true; going && used < budget;) {
        going = false;
        if (GetCurrentTimestamp() >= slice_end) {
            cascade_cut_short = true;
            break;
        }
        for (int k = 0; k < n && used < budget; k++) {
            int i = (first + k) % n;
            Pause *pause = table_pause(tables[i], false);
            if (done[i] || (pause != nullptr && now < pause->retry_at))
                continue;
            CHECK_FOR_INTERRUPTS();
            int64 ids = 0;
            bool more = false;
            ErrorData *error = nullptr;
            bool ok = in_transaction(
                "pg_outbox: cascading",
                [&] { more = cascade_step(tables[i], columns[i], cascade_batch_size, &ids); },
                &error);
            if (!ok) {
                if (ERRCODE_TO_CATEGORY(error->sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION) {
                    store_failed(error);
                    FreeErrorData(error);
                    return used;
                }
                table_failed("cascade", tables[i], names[i], error);
                FreeErrorData(error);
                done[i] = true;
                continue;
            }
            set_failing("cascade", tables[i], false);
            used = saturating_add(used, ids);
            done[i] = !more;
            going = going || more;
        }
    }
    return used;
}

// The tombstone checks that failed when their messages were delivered
// (delivery/tombstones.hpp), asked again at most every 5 s, each table in a
// transaction of its own: a table whose check fails again is reported and
// waits for the next try; the others go on.
// A failure doubles the pause, up to a minute; a round without one resets it.
TimestampTz checks_retried_at = 0;
int checks_retry_ms = 5000;

void retry_checks(TimestampTz now) {
    checks_retried_at = not_after_now(checks_retried_at, now);
    if (!TimestampDifferenceExceeds(checks_retried_at, now, checks_retry_ms))
        return;
    checks_retried_at = now;
    bool all_ok = true;
    char **keys = nullptr;
    bool *control = nullptr;
    int n = 0;
    in_transaction(
        "pg_outbox: listing tombstone checks",
        [&] { n = tables_with_checks(cycle_context, &keys, &control); }, nullptr);
    for (int i = 0; i < n; i++) {
        CHECK_FOR_INTERRUPTS();
        char *error = nullptr;
        bool ok = true;
        (void)in_transaction(
            "pg_outbox: checking tombstones again",
            [&] {
                ok = retry_tombstone_checks(keys[i], control[i], &error);
                if (!ok) // it outlives the transaction
                    error = MemoryContextStrdup(cycle_context, error);
            },
            nullptr);
        if (!ok) {
            char what[128];
            snprintf(what, sizeof what, "tombstone check of %s", keys[i]);
            record_error(what, error);
            all_ok = false;
        }
    }
    checks_retry_ms = all_ok ? 5000 : Min(checks_retry_ms * 2, 60000);
}

// Hands each linked destination's due messages over (link/link.hpp), a
// pass over its rows each, one transaction per round: batches for every
// destination in turn, sent without waiting for answers, so that the other
// databases take them while this one claims the next; then every round's
// answers.  A destination drops out when its pass is over (it may start one
// more, below) or its round fails.  Returns the messages handed over.
int64 send_links(int ntargets, LinkTarget *targets) {
    if (ntargets == 0)
        return 0;
    int64 sent = 0;
    sending_links = true;
    // Arrays of pointers, one per destination: sizeof a pointer is meant.
    // NOLINTNEXTLINE(bugprone-sizeof-expression)
    auto **passes = (DrainPass **)palloc0(sizeof(DrainPass *) * Max(ntargets, 1));
    // NOLINTNEXTLINE(bugprone-sizeof-expression)
    auto **rounds = (LinkRound **)palloc0(sizeof(LinkRound *) * Max(ntargets, 1));
    auto *over = (bool *)palloc0(sizeof(bool) * Max(ntargets, 1));
    // A pass reads the partitions one after the other: rows committed while
    // it read the first ones wait for the next pass.  A destination whose
    // pass ends while another's goes on starts a second one, once (or rows
    // of a fill that committed as the cycle began waited for the slowest
    // link: bench/cells).
    auto *again = (bool *)palloc0(sizeof(bool) * Max(ntargets, 1));
    int going = ntargets;
    for (int t = 0; t < ntargets; t++)
        passes[t] = link_pass_begin(&targets[t]);
    auto end_pass = [&](int t) {
        drain_pass_end(passes[t]);
        passes[t] = nullptr;
        going--;
    };
    while (going > 0) {
        CHECK_FOR_INTERRUPTS();
        bool ok = in_transaction(
            "pg_outbox: sending link batches",
            [&] {
                for (int t = 0; t < ntargets; t++)
                    rounds[t] = passes[t] != nullptr ? link_round_begin(&targets[t]) : nullptr;
                for (bool more = true; more;) {
                    more = false;
                    for (int t = 0; t < ntargets; t++) {
                        if (rounds[t] == nullptr)
                            continue;
                        LinkSend s = link_round_send(rounds[t], passes[t]);
                        more = more || s == LinkSend::Sent;
                        over[t] = s == LinkSend::PassOver;
                    }
                }
                for (int t = 0; t < ntargets; t++) {
                    if (rounds[t] == nullptr)
                        continue;
                    char error[512] = "";
                    int n = link_round_finish(rounds[t], error, sizeof error);
                    rounds[t] = nullptr;
                    if (n < 0)
                        record_error("link", error);
                    else
                        sent += n;
                    if (n < 0 || over[t])
                        end_pass(t);
                    over[t] = over[t] && n >= 0; // a failed link backs off
                }
                for (int t = 0; t < ntargets; t++)
                    if (passes[t] == nullptr && over[t] && !again[t] && going > 0) {
                        again[t] = true;
                        passes[t] = link_pass_begin(&targets[t]);
                        going++;
                    }
            },
            nullptr);
        link_rounds_ended(ok);
        if (!ok)
            break;
    }
    for (int t = 0; t < ntargets; t++)
        if (passes[t] != nullptr)
            drain_pass_end(passes[t]);
    sending_links = false;
    return sent;
}

// Returns whether it has more to do at once: its cascade was cut short, or (outbox.wake_on_commit
// off) it delivered anything, since rows may have come meanwhile.  Then the next cycle starts at
// once. requested: by outbox.wake_worker(), which reads every partition.
bool cycle(bool requested) {
    MemoryContextReset(cycle_context);
    MemoryContext old = MemoryContextSwitchTo(cycle_context);
    TimestampTz start = GetCurrentTimestamp();
    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->last_cycle_start = start;
    SpinLockRelease(&worker_shared->mutex);

    int64 scheduled = 0;
    int64 delivered = 0;
    // Linked to other clusters, this database also receives the other
    // silo's messages, for its own handlers.
    LinkTarget *targets = nullptr;
    int ntargets = 0;
    bool receives_cell = false, receives_control = false;
    in_transaction(
        "pg_outbox: reading links",
        [&] {
            ntargets = link_targets(cycle_context, &targets, &receives_cell, &receives_control);
        },
        nullptr);
    cascade_cut_short = false;
    bool cell = silo_mode != SILO_MODE_CONTROL || receives_cell;
    bool control = silo_mode != SILO_MODE_CELL || receives_control;
    cycle_cell = cell;
    cycle_control = control;
    cycle_links = ntargets > 0;
    scheduled += drain_pass(cell, control, requested ? PassScope::All : PassScope::Due, &delivered);
    delivered += send_links(ntargets, targets);
    retry_checks(start);
    // What other clusters handed over, kept for outbox.inbox_retention;
    // looked at once a minute (received rows: only when linked).
    if ((receives_cell || receives_control) &&
        TimestampDifferenceExceeds(inbox_pruned_at, start, 60000)) {
        inbox_pruned_at = start;
        in_transaction(
            "pg_outbox: pruning the inbox", [] { (void)link_prune_inbox(); }, nullptr);
    }
    compact(cell, control);
    in_transaction(
        "pg_outbox: forgetting ended claims", [] { (void)turns_forget_ended(); }, nullptr);

    // The budget is per minute: what the drain scheduled and what was
    // backfilled in this minute both count against it.
    if (window_start == 0 || window_start > start ||
        TimestampDifferenceExceeds(window_start, start, 60000)) {
        window_start = start;
        window_used = 0;
        window_backfilled = 0;
    }
    window_used += scheduled + scheduled_between;
    scheduled_between = 0;
    // The cascade and the backfill share what is left: when both have work,
    // the cascade takes at most half, the backfill the rest, and the cascade
    // what the backfill did not use.
    int64 budget = (int64)backfill_rate_per_minute - window_used;
    if (budget > 0)
        window_used = saturating_add(window_used, cascade((budget + 1) / 2));
    // The floor (outbox.backfill_min_rate_per_minute, at most the rate) is
    // the backfill's whatever live traffic and the cascade used: Sentry's
    // "rate minus what the drain scheduled" alone starves a backfill for as
    // long as the outbox is busy.
    budget =
        Max((int64)backfill_rate_per_minute - window_used,
            (int64)Min(backfill_min_rate_per_minute, backfill_rate_per_minute) - window_backfilled);
    if (budget > 0)
        backfill(budget);
    budget = (int64)backfill_rate_per_minute - window_used;
    if (budget > 0)
        window_used = saturating_add(window_used, cascade(budget));

    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->last_cycle_end = GetCurrentTimestamp();
    worker_shared->rows_scheduled += scheduled;
    worker_shared->backfill_budget_left = Max((int64)backfill_rate_per_minute - window_used, 0);
    worker_shared->backfill_paused = backfill_paused;
    SpinLockRelease(&worker_shared->mutex);
    MemoryContextSwitchTo(old);
    return (delivered > 0 && !wake_on_commit) || cascade_cut_short;
}

// The worker is gone: outbox.worker_status shows it stopped.
void forget_pid(int, Datum) {
    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->pid = 0;
    worker_shared->latch = nullptr;
    SpinLockRelease(&worker_shared->mutex);
}

} // namespace

bool hold_extension() {
    Oid extension = get_extension_oid("pg_outbox", true);
    if (!OidIsValid(extension))
        return false;
    LockDatabaseObject(ExtensionRelationId, extension, 0, AccessShareLock);
    // The lock taken, invalidations are read: a DROP that committed
    // meanwhile shows.
    return get_extension_oid("pg_outbox", true) == extension;
}

void register_workers() {
    // The worker, and the mover (mover.cpp) beside it.
    const char *workers[2][2] = {{"pg_outbox worker", "outbox_worker_main"},
                                 {"pg_outbox mover", "outbox_mover_main"}};
    for (auto &w : workers) {
        BackgroundWorker worker;
        memset(&worker, 0, sizeof worker);
        worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
        worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
        worker.bgw_restart_time = 1;
        strlcpy(worker.bgw_library_name, "pg_outbox", BGW_MAXLEN);
        strlcpy(worker.bgw_function_name, w[1], BGW_MAXLEN);
        strlcpy(worker.bgw_name, w[0], BGW_MAXLEN);
        strlcpy(worker.bgw_type, w[0], BGW_MAXLEN);
        // When max_worker_processes is too small, PostgreSQL logs "too many
        // background workers" with a hint to raise it.
        RegisterBackgroundWorker(&worker);
    }
}

} // namespace pgoutbox

using namespace pgoutbox;

void outbox_worker_main(Datum) {
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(database_name, nullptr, 0);
    // A shard's transaction commits its deletions; losing that commit in a
    // crash only delivers the messages again (handlers are idempotent), so
    // the worker does not wait for its WAL to reach disk.
    SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
    // Its transactions are READ COMMITTED whatever the cluster's default
    // (some set repeatable read or serializable for everyone): a drain
    // batch finds rows as they are now, compaction copies back what the
    // latest snapshot sees, and neither must fail on a serialization error.
    SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
    // Its own SQL resolves every name and operator in pg_catalog first and
    // in no schema a user can create in (SPEC section 9), whatever the
    // database's default; its handlers keep that default.
    handler_search_path = MemoryContextStrdup(TopMemoryContext, namespace_search_path);
    SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);

    SpinLockAcquire(&worker_shared->mutex);
    worker_shared->pid = MyProcPid;
    worker_shared->enabled = worker_enabled;
    worker_shared->latch = MyLatch;
    worker_shared->nthrottled = 0; // a worker before this one may have left some
    worker_shared->nfailing = 0;
    worker_shared->backfill_max_shard_depth = backfill_max_shard_depth;
    SpinLockRelease(&worker_shared->mutex);
    before_shmem_exit(forget_pid, 0);

    cycle_context =
        AllocSetContextCreate(TopMemoryContext, "pg_outbox worker cycle", ALLOCSET_DEFAULT_SIZES);
    // Whatever the loop allocates outside a cycle (reports of failed checks,
    // say) goes here and is freed at the next turn.
    MemoryContext loop_context =
        AllocSetContextCreate(TopMemoryContext, "pg_outbox worker loop", ALLOCSET_SMALL_SIZES);
    ereport(LOG, (errmsg("pg_outbox worker started on database \"%s\"", database_name)));
    // The first cycle at once: it learns which silos to drain (and reads
    // every partition), and commits can wake passes from then on.
    bool busy = false;
    TimestampTz next_cycle = GetCurrentTimestamp();
    cycle_cell = silo_mode != SILO_MODE_CONTROL;
    cycle_control = silo_mode != SILO_MODE_CELL;
    for (;;) {
        MemoryContextSwitchTo(loop_context);
        MemoryContextReset(loop_context);
        long wait_ms = 0;
        if (!busy) {
            long secs;
            int usecs;
            TimestampDifference(GetCurrentTimestamp(), next_cycle, &secs, &usecs);
            wait_ms = Min(secs * 1000 + usecs / 1000, (long)naptime_ms);
            if (pg_atomic_read_u32(&worker_shared->notify_pending) != 0)
                wait_ms = Min(wait_ms, (long)notify_interval_ms);
            long woken = woken_pass_wait(GetCurrentTimestamp());
            if (woken >= 0)
                wait_ms = Min(wait_ms, woken);
        }
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, wait_ms,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
        // A reload starts a cycle: a new naptime, or the worker just enabled.
        bool requested = ConfigReloadPending;
        reload_settings();
        // Woken by a commit that wrote outbox rows: consumers learn of it
        // now; the cycle keeps its own pace.
        if (notify_due())
            in_transaction(
                "pg_outbox: waking consumers", [] {}, nullptr);
        TimestampTz now = GetCurrentTimestamp();
        // More than a naptime ahead: the clock was stepped back.
        if (TimestampDifferenceExceeds(now, next_cycle, naptime_ms))
            next_cycle = now;
        requested = pg_atomic_exchange_u32(&worker_shared->cycle_requested, 0) != 0 || requested;
        if (!busy && !requested && now < next_cycle) {
            drain_woken();
            (void)pgstat_report_stat(false);
            continue;
        }
        next_cycle = TimestampTzPlusMilliseconds(now, naptime_ms);
        busy = false;
        SpinLockAcquire(&worker_shared->mutex);
        worker_shared->enabled = worker_enabled;
        SpinLockRelease(&worker_shared->mutex);
        if (!worker_enabled)
            continue;
        // No extension in this database yet: nothing to do until it is.
        if (look_for_extension())
            busy = cycle(requested);
        // A background worker reports its table statistics itself (a
        // backend does when idle): without this, autovacuum and compaction
        // would never learn of the rows the drain deleted.  At most once a
        // second, outside any transaction.
        (void)pgstat_report_stat(false);
    }
}
