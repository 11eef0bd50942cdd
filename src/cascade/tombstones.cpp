#include "cascade/tombstones.hpp"

#include "pg/guard.hpp"
#include "pg/spi.hpp"

namespace pgoutbox {

Datum gone_ids(const SoleTable *table, const int64 *ids, int n) {
    if (n == 0)
        return (Datum)0;
    Relation rel = try_relation_open(table->relid, AccessShareLock);
    if (rel == nullptr)
        return (Datum)0;
    if (rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity) {
        relation_close(rel, AccessShareLock);
        return (Datum)0;
    }
    auto *items = (Datum *)palloc(sizeof(Datum) * n);
    for (int i = 0; i < n; i++)
        items[i] = Int64GetDatum(ids[i]);
    Oid types[1] = {INT8ARRAYOID};
    Datum args[1] = {PointerGetDatum(construct_array(items, n, INT8OID, 8, true, TYPALIGN_DOUBLE))};
    // The read runs the owner's code as the owner, and the owner may have
    // made it fail (no SELECT for itself, a failing index expression): in a
    // subtransaction of its own, so that only this table's tombstones are
    // lost, with a WARNING, and the batch that delivers everyone's messages
    // goes on.  It writes nothing, so it takes no subtransaction XID.
    MemoryContext caller = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    volatile Datum gone = (Datum)0;
    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(caller);
    PG_TRY();
    {
        // The latest snapshot: a read-only statement runs with the active
        // one, which the caller may have taken before the deletion whose
        // message was just delivered committed (a worker's batch
        // transaction starts before the pass reads the next partition).
        PushActiveSnapshot(GetLatestSnapshot());
        pg::spi_run_as(
            pg::table_owner_role(rel), "finding deleted rows",
            psprintf("SELECT pg_catalog.array_agg(x) FROM pg_catalog.unnest($1) x"
                     " WHERE NOT EXISTS (SELECT FROM %s t WHERE t.id OPERATOR(pg_catalog.=) x)",
                     pg::qualified_name(rel)),
            1, types, args, nullptr, true, 1, SPI_OK_SELECT, [&](uint64) {
                bool isnull;
                Datum value =
                    SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
                if (isnull)
                    return;
                MemoryContext old = MemoryContextSwitchTo(caller);
                gone = PointerGetDatum(DatumGetArrayTypePCopy(value));
                MemoryContextSwitchTo(old);
            });
        PopActiveSnapshot();
        ReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(caller);
        CurrentResourceOwner = owner;
    }
    PG_CATCH();
    {
        pg::forget_abandoned_frames();
        MemoryContextSwitchTo(caller);
        ErrorData *error = CopyErrorData();
        FlushErrorState();
        RollbackAndReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(caller);
        CurrentResourceOwner = owner;
        ereport(WARNING, (errmsg("pg_outbox: no tombstones recorded for %s: %s", table->table_key,
                                 error->message),
                          errdetail("Its rows could not be read as its owner.")));
        FreeErrorData(error);
        gone = (Datum)0;
    }
    PG_END_TRY();
    relation_close(rel, NoLock);
    return gone;
}

void record_tombstones(const SoleTable *table, const int64 *ids, int n) {
    Datum gone = gone_ids(table, ids, n);
    if (gone == (Datum)0)
        return;
    Oid insert_types[2] = {TEXTOID, INT8ARRAYOID};
    Datum insert_args[2] = {CStringGetTextDatum(table->table_key), gone};
    pg::spi_run_as(pg::extension_owner_role, "recording tombstones",
                   psprintf("INSERT INTO outbox.%s (table_name, object_identifier)"
                            " SELECT $1, pg_catalog.unnest($2) ON CONFLICT DO NOTHING",
                            table->control ? "cell_tombstone" : "control_tombstone"),
                   2, insert_types, insert_args, nullptr, false, 0, SPI_OK_INSERT);
}

} // namespace pgoutbox
