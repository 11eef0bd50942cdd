#include "capture/outbox_writer.hpp"

namespace pgoutbox {

// Column order of outbox.cell_outbox; control_outbox appends cell_name.
enum OutboxColumn {
    COL_ID,
    COL_SHARD_SCOPE,
    COL_SHARD_IDENTIFIER,
    COL_CATEGORY,
    COL_OBJECT_IDENTIFIER,
    COL_PAYLOAD,
    COL_SCHEDULED_FROM,
    COL_SCHEDULED_FOR,
    COL_DATE_ADDED,
    COL_CELL_NAME,
    COL_COUNT
};

void outbox_write(const Registry *registry, Silo silo, const OutboxRow *row) {
    const OutboxTable *table =
        silo == Silo::Cell ? &registry->cell_outbox : &registry->control_outbox;
    Datum values[COL_COUNT];
    bool nulls[COL_COUNT] = {false};
    TimestampTz now = GetCurrentTransactionStartTimestamp();

    values[COL_ID] = Int64GetDatum(nextval_internal(table->sequence, false));
    values[COL_SHARD_SCOPE] = Int32GetDatum(row->shard_scope);
    values[COL_SHARD_IDENTIFIER] = Int64GetDatum(row->shard_identifier);
    values[COL_CATEGORY] = Int32GetDatum(row->category);
    values[COL_OBJECT_IDENTIFIER] = Int64GetDatum(row->object_identifier);
    values[COL_PAYLOAD] = row->payload;
    nulls[COL_PAYLOAD] = row->payload == (Datum)0;
    values[COL_SCHEDULED_FROM] = TimestampTzGetDatum(now);
    values[COL_SCHEDULED_FOR] = TimestampTzGetDatum(now);
    values[COL_DATE_ADDED] = TimestampTzGetDatum(now);
    if (silo == Silo::Control)
        values[COL_CELL_NAME] = CStringGetTextDatum(row->cell_name);

    // Route to the hash partition of shard_identifier, as PostgreSQL would.
    bool key_null = false;
    uint64 hash = compute_partition_hash_value(1, const_cast<FmgrInfo *>(&table->hash_function),
                                               const_cast<Oid *>(&table->hash_collation),
                                               &values[COL_SHARD_IDENTIFIER], &key_null);
    const OutboxPartition *partition = &table->by_remainder[hash % table->nremainders];

    Relation rel = table_open(partition->relid, RowExclusiveLock);
    HeapTuple tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
    simple_heap_insert(rel, tuple);

    for (int i = 0; i < partition->nindexes; i++) {
        const OutboxIndex *index = &partition->indexes[i];
        IndexInfo *info = index->info;
        Datum key_values[INDEX_MAX_KEYS];
        bool key_nulls[INDEX_MAX_KEYS];
        for (int k = 0; k < info->ii_NumIndexAttrs; k++) {
            int column = info->ii_IndexAttrNumbers[k] - 1;
            key_values[k] = values[column];
            key_nulls[k] = nulls[column];
        }
        Relation index_rel = index_open(index->oid, RowExclusiveLock);
        index_insert(index_rel, key_values, key_nulls, &tuple->t_self, rel,
                     info->ii_Unique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO, false, info);
        index_close(index_rel, NoLock);
    }
    table_close(rel, NoLock);
    heap_freetuple(tuple);
}

} // namespace pgoutbox
