// Compaction (compaction.hpp).  Plain C-style code: PostgreSQL errors
// unwind through it.
#include "delivery/compaction.hpp"

#include "pg/compat.hpp"
#include "pg/run_as.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/snapmgr.h"
#include "utils/array.h"
}

namespace pgoutbox {

int compact_min_size_kb = 1024;

namespace {

// Live rows a compaction copies at most (an array of them in memory).
constexpr int max_live_rows = 10000;
// The size a live row is assumed to take on disk, to tell from the
// statistics whether a partition is mostly dead.
constexpr int64 live_row_bytes = 200;

} // namespace

bool compaction_due(Oid partition, bool force) {
    Relation rel = table_open(partition, AccessShareLock);
    int64 bytes = (int64)RelationGetNumberOfBlocks(rel) * BLCKSZ;
    table_close(rel, AccessShareLock);
    if (bytes == 0)
        return false;
    if (force)
        return true;
    if (compact_min_size_kb <= 0 || bytes < (int64)compact_min_size_kb * 1024)
        return false;
    PgStat_StatTabEntry *stats = pgstat_fetch_stat_tabentry(partition);
    int64 live = stats != nullptr ? Max(pg::live_rows(stats), 0) : 0;
    return live <= max_live_rows && live * live_row_bytes * 4 <= bytes;
}

bool compact_partition(Oid partition) {
    if (!ConditionalLockRelationOid(partition, AccessExclusiveLock))
        return false;
    // Locked: every writer has committed or rolled back, and the latest
    // snapshot sees all that is there.  Read with that one, not the
    // transaction's: under REPEATABLE READ (a caller's transaction, or a
    // cluster's default) that is older than the lock, and the rows
    // committed in between would not be copied back.
    pg::RunAs scope;
    pg::run_as_extension_owner(&scope);
    char *name = pg::qualified_name(partition);
    Oid types[1] = {INT4OID};
    Datum args[1] = {Int32GetDatum(max_live_rows + 1)};
    PushActiveSnapshot(GetLatestSnapshot());
    pg::spi_run(
        "reading a partition to compact",
        psprintf("SELECT pg_catalog.array_agg(x.o) FROM (SELECT o FROM %s o LIMIT $1) x", name), 1,
        types, args, nullptr, true, 0, SPI_OK_SELECT);
    PopActiveSnapshot();
    bool isnull;
    Datum rows = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (!isnull) {
        ArrayType *array = DatumGetArrayTypePCopy(rows);
        if (ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array)) > max_live_rows) {
            pg::run_as_end(&scope);
            return false;
        }
        rows = PointerGetDatum(array);
    }
    pg::spi_run("truncating a partition", psprintf("TRUNCATE %s", name), 0, nullptr, nullptr,
                nullptr, false, 0, SPI_OK_UTILITY);
    if (!isnull) {
        Oid array_type[1] = {get_array_type(get_rel_type_id(partition))};
        Datum array_arg[1] = {rows};
        pg::spi_run("writing a compacted partition back",
                    psprintf("INSERT INTO %s SELECT * FROM pg_catalog.unnest($1)", name), 1,
                    array_type, array_arg, nullptr, false, 0, SPI_OK_INSERT);
    }
    pg::run_as_end(&scope);
    return true;
}

} // namespace pgoutbox
