// outbox.stats: counters per (database, category) in shared memory, like
// pg_stat_statements: they outlive sessions (not a server restart), and
// every backend and the worker add to them.  Only with pg_outbox in
// shared_preload_libraries; without it the counting calls do nothing.
//
// What happened inside a transaction counts only if it commits: rows saved
// by capture, rows and batches of backfill, and rows processed (deleted after
// delivery) are kept per subtransaction and added at commit, so a rollback
// (or a rolled-back savepoint) takes its counts with it; a prepared
// transaction counts when it is prepared.  Handing a message
// to a handler is not undone by a rollback, so deliveries, their lag and
// handler errors count at once.
#pragma once

#include "pg/postgres.hpp"

namespace pgoutbox {

// From the shmem hooks of pg_outbox.cpp (the startup one holds
// AddinShmemInitLock).
void stats_shmem_request();
void stats_shmem_startup();

// Whether the counters exist (pg_outbox was preloaded).
bool stats_available();

// Transactional: counted when the transaction commits.
void stats_count_saved(int32 category, int64 rows);
void stats_count_backfill(int32 category, int64 rows);
void stats_count_processed(int32 category, int64 rows);

// At once.  lag: from the oldest outbox row of the message to delivery.
void stats_count_delivered(int32 category, TimestampTz oldest_added, TimestampTz delivered_at);
void stats_count_handler_error(int32 category);

} // namespace pgoutbox

namespace pgoutbox {

// One category's counters, as read for outbox.stats.  Lags in microseconds,
// -1 when nothing was delivered.
struct CategoryStats {
    int32 category;
    int64 saved;
    int64 backfilled;
    int64 backfill_batches;
    int64 delivered;
    int64 processed;
    int64 handler_errors;
    int64 lag_p50;
    int64 lag_p99;
    int64 lag_max;
    TimestampTz last_delivery_at; // 0: never
    TimestampTz since;            // counting began (first count or reset)
};

// The counters of this database's categories, palloc'd; returns how many.
int stats_read(CategoryStats **rows);

// Zeroes this database's counters of the categories in keep (sorted in
// place) and forgets the others (categories dropped since they were counted).
void stats_reset(int32 *keep, int nkeep);

// Counts dropped because every slot was taken (stats_slots categories, all
// databases together).
int64 stats_untracked();

} // namespace pgoutbox
