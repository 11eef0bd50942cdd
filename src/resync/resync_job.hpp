// A targeted re-sync job (extension/tables/99_resyncs.sql): what it sends,
// read from outbox.resync_jobs, and the SQL that selects its rows.  Used by
// its start (resync_start.cpp: how many rows, which shards, an
// organization's rows) and its batches (resync_batch.cpp).
#pragma once

#include "pg/postgres.hpp"
#include "registry/table_meta.hpp"

namespace pgoutbox {

enum class ResyncTarget { Ids, Range, Shard, Organization };

struct ResyncJob {
    int64 id;
    ResyncTarget target;
    Oid relid; // InvalidOid for an organization job
    int64 low, up;
    int64 shard_identifier;
    int64 organization;
    int64 rows_total;
    int64 rows_done;
    bool running;
};

// Ids and organization jobs walk their rows in outbox.resync_rows by
// position; range and shard jobs walk the table by id.
inline bool resync_by_position(const ResyncJob &job) {
    return job.target == ResyncTarget::Ids || job.target == ResyncTarget::Organization;
}

// The job's row, locked FOR UPDATE; an ERROR (42704) when there is none.
// Inside SPI, as the extension's owner.
void load_resync_job(int64 id, ResyncJob *job);

// A range or shard job's rows of rel (alias t) with ids in [$1, $2], $3 the
// shard identifier (int8; unused by a range job); *low and *up the bounds
// of the whole job.
const char *resync_span_condition(Relation rel, const TableMeta *meta, const ResyncJob &job,
                                  int64 *low, int64 *up);

// Whether relid is still a registered table.  Inside SPI, as the extension's
// owner.
bool resync_table_registered(Oid relid);

} // namespace pgoutbox
