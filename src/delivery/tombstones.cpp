#include "delivery/tombstones.hpp"

#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "pg/subtransaction.hpp"

namespace pgoutbox {

namespace {

// Errors that are not the table's: the caller's work fails and is retried.
bool raised_through(const ErrorData *error) {
    switch (error->sqlerrcode) {
    case ERRCODE_QUERY_CANCELED:
        return !pg::owner_bound_passed(error);
    case ERRCODE_T_R_DEADLOCK_DETECTED:
    case ERRCODE_T_R_SERIALIZATION_FAILURE:
    case ERRCODE_OUT_OF_MEMORY:
        return true;
    default:
        return ERRCODE_TO_CATEGORY(error->sqlerrcode) == ERRCODE_OPERATOR_INTERVENTION ||
               ERRCODE_TO_CATEGORY(error->sqlerrcode) == ERRCODE_INSUFFICIENT_RESOURCES;
    }
}

Datum find_gone(Relation rel, const int64 *ids, int n) {
    MemoryContext caller = CurrentMemoryContext;
    Oid types[1] = {INT8ARRAYOID};
    Datum args[1] = {pg::int8_array(ids, n)};
    Datum gone = (Datum)0;
    // The latest snapshot: a read-only statement runs with the active
    // one, which the caller may have taken before the deletion whose
    // message was just delivered committed (a worker's batch transaction
    // starts before the pass reads the next partition).
    PushActiveSnapshot(GetLatestSnapshot());
    pg::spi_run_as(
        pg::table_owner_role(rel), "finding deleted rows",
        psprintf("SELECT pg_catalog.array_agg(x) FROM pg_catalog.unnest($1) x"
                 " WHERE NOT EXISTS (SELECT FROM %s t WHERE t.id OPERATOR(pg_catalog.=) x)",
                 pg::qualified_name(rel)),
        1, types, args, nullptr, true, 1, SPI_OK_SELECT, [&](uint64) {
            bool isnull;
            Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
            if (isnull)
                return;
            MemoryContext old = MemoryContextSwitchTo(caller);
            gone = PointerGetDatum(DatumGetArrayTypePCopy(value));
            MemoryContextSwitchTo(old);
        });
    PopActiveSnapshot();
    return gone;
}

void insert_tombstones(const SoleTable *table, Datum gone) {
    Oid types[2] = {TEXTOID, INT8ARRAYOID};
    Datum args[2] = {CStringGetTextDatum(table->table_key), gone};
    pg::spi_run_as(pg::extension_owner_role, "recording tombstones",
                   psprintf("INSERT INTO outbox.%s (table_name, object_identifier)"
                            " SELECT $1, pg_catalog.unnest($2) ON CONFLICT DO NOTHING",
                            table->control ? "cell_tombstone" : "control_tombstone"),
                   2, types, args, nullptr, false, 0, SPI_OK_INSERT);
}

// Removes the tombstones of those of the checked ids that are not in gone
// (an int8[], or 0): their row is back (deleted, then written again with
// the same id), and a tombstone left for it would have the cascade take the
// new row's children.
void forget_returned(const SoleTable *table, const int64 *checked, int n, Datum gone) {
    if (n == 0)
        return;
    Oid types[3] = {TEXTOID, INT8ARRAYOID, INT8ARRAYOID};
    Datum args[3] = {CStringGetTextDatum(table->table_key), pg::int8_array(checked, n),
                     gone != (Datum)0 ? gone : pg::int8_array(nullptr, 0)};
    pg::spi_run_as(pg::extension_owner_role, "removing tombstones of returned rows",
                   psprintf("DELETE FROM outbox.%s t WHERE t.table_name = $1"
                            " AND t.object_identifier = ANY ($2)"
                            " AND t.object_identifier <> ALL ($3)",
                            table->control ? "cell_tombstone" : "control_tombstone"),
                   3, types, args, nullptr, false, 0, SPI_OK_DELETE);
}

void keep_checks(const char *table_key, bool control, const int64 *ids, int n, const char *error) {
    Oid types[4] = {TEXTOID, BOOLOID, INT8ARRAYOID, TEXTOID};
    Datum args[4] = {CStringGetTextDatum(table_key), BoolGetDatum(control), pg::int8_array(ids, n),
                     CStringGetTextDatum(error)};
    pg::spi_run_as(pg::extension_owner_role, "keeping tombstone checks",
                   "INSERT INTO outbox.tombstone_checks AS c"
                   " (table_key, control, object_identifier, error)"
                   " SELECT $1, $2, pg_catalog.unnest($3), $4"
                   " ON CONFLICT (table_key, control, object_identifier) DO UPDATE"
                   " SET error = excluded.error, attempts = c.attempts + 1",
                   4, types, args, nullptr, false, 0, SPI_OK_INSERT);
}

const SoleTable *sole_table(const char *table_key, bool control) {
    const Registry *registry = registry_get();
    for (int t = 0; t < registry->nsole_tables; t++) {
        const SoleTable *table = &registry->sole_tables[t];
        if (table->control == control && strcmp(table->table_key, table_key) == 0)
            return table;
    }
    return nullptr;
}

} // namespace

bool gone_ids(const SoleTable *table, const int64 *ids, int n, Datum *gone, char **error,
              bool *told) {
    *gone = (Datum)0;
    *told = false;
    if (n == 0)
        return true;
    // In a subtransaction of its own, which also covers the lock: only this
    // table's check fails, and the batch that delivers everyone's messages
    // goes on.  It writes nothing, so it takes no subtransaction XID.
    ErrorData *failure = pg::in_subtransaction(
        [&] {
            Relation rel = pg::open_user_table(table->relid, AccessShareLock);
            if (rel == nullptr)
                return;
            // Its owner's read could not tell a hidden row from a deleted
            // one: the table's failure, kept visibly, never a guess.
            if (rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity)
                ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                                errmsg("table %s forces row security on its owner, whose read "
                                       "cannot tell a hidden row from a deleted one",
                                       RelationGetRelationName(rel))));
            *gone = find_gone(rel, ids, n);
            *told = true;
            relation_close(rel, NoLock);
        },
        [](const ErrorData *caught) { return !raised_through(caught); });
    if (failure == nullptr)
        return true;
    *error = pstrdup(failure->message ? failure->message : "the read failed");
    FreeErrorData(failure);
    *gone = (Datum)0;
    *told = false;
    return false;
}

void record_tombstones(const SoleTable *table, const int64 *ids, int n) {
    Datum gone;
    char *error;
    bool told;
    if (!gone_ids(table, ids, n, &gone, &error, &told)) {
        ereport(WARNING,
                (errmsg("pg_outbox: tombstone check of %s failed: %s", table->table_key, error),
                 errdetail("Its %d objects wait in outbox.tombstone_checks and are "
                           "checked again.",
                           n)));
        keep_checks(table->table_key, table->control, ids, n, error);
        return;
    }
    if (gone != (Datum)0)
        insert_tombstones(table, gone);
    if (told)
        forget_returned(table, ids, n, gone);
}

int tables_with_checks(MemoryContext context, char ***table_keys, bool **control) {
    int n = (int)pg::spi_run_as(
        pg::extension_owner_role, "listing tombstone checks",
        "SELECT DISTINCT c.table_key, c.control FROM outbox.tombstone_checks c ORDER BY 1, 2", 0,
        nullptr, nullptr, nullptr, true, 0, SPI_OK_SELECT, [&](uint64 rows) {
            MemoryContext old = MemoryContextSwitchTo(context);
            *table_keys = (char **)palloc(sizeof(char *) * Max(rows, 1));
            *control = (bool *)palloc(sizeof(bool) * Max(rows, 1));
            for (uint64 i = 0; i < rows; i++) {
                bool isnull;
                HeapTuple row = SPI_tuptable->vals[i];
                (*table_keys)[i] = SPI_getvalue(row, SPI_tuptable->tupdesc, 1);
                (*control)[i] = DatumGetBool(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
            }
            MemoryContextSwitchTo(old);
        });
    return n;
}

bool retry_tombstone_checks(const char *table_key, bool control, char **error) {
    MemoryContext caller = CurrentMemoryContext;
    Oid types[2] = {TEXTOID, BOOLOID};
    Datum args[2] = {CStringGetTextDatum(table_key), BoolGetDatum(control)};
    int64 *ids = nullptr;
    int n = 0;
    // Locked, so that two workers (or a worker and outbox.retry_tombstone_checks
    // in a session) never ask for the same ids at once.
    pg::spi_run_as(pg::extension_owner_role, "reading tombstone checks",
                   "SELECT c.object_identifier FROM outbox.tombstone_checks c"
                   " WHERE c.table_key = $1 AND c.control = $2 FOR UPDATE SKIP LOCKED",
                   2, types, args, nullptr, false, 0, SPI_OK_SELECT, [&](uint64 rows) {
                       MemoryContext old = MemoryContextSwitchTo(caller);
                       ids = (int64 *)palloc(sizeof(int64) * Max(rows, 1));
                       MemoryContextSwitchTo(old);
                       for (uint64 i = 0; i < rows; i++) {
                           bool isnull;
                           ids[n++] = DatumGetInt64(SPI_getbinval(
                               SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
                       }
                   });
    if (n == 0)
        return true;
    const SoleTable *table = sole_table(table_key, control);
    Datum gone = (Datum)0;
    bool told = false;
    if (table == nullptr) {
        ereport(WARNING, (errmsg("pg_outbox: %d tombstone checks of %s forgotten", n, table_key),
                          errdetail("The table is no longer the only one registered under its "
                                    "category: its rows' messages say nothing of deletions.")));
    } else if (!gone_ids(table, ids, n, &gone, error, &told)) {
        keep_checks(table_key, control, ids, n, *error);
        return false;
    }
    if (gone != (Datum)0)
        insert_tombstones(table, gone);
    if (told)
        forget_returned(table, ids, n, gone);
    Datum delete_args[3] = {args[0], args[1], pg::int8_array(ids, n)};
    Oid delete_types[3] = {TEXTOID, BOOLOID, INT8ARRAYOID};
    pg::spi_run_as(pg::extension_owner_role, "forgetting tombstone checks",
                   "DELETE FROM outbox.tombstone_checks c WHERE c.table_key = $1"
                   " AND c.control = $2 AND c.object_identifier = ANY ($3)",
                   3, delete_types, delete_args, nullptr, false, 0, SPI_OK_DELETE);
    return true;
}

Datum tombstones_still_gone(const char *table_key, bool control, Datum ids) {
    const SoleTable *table = sole_table(table_key, control);
    if (table == nullptr || ids == (Datum)0)
        return ids;
    Datum *items;
    bool *nulls;
    int n;
    deconstruct_array(DatumGetArrayTypeP(ids), INT8OID, 8, true, TYPALIGN_DOUBLE, &items, &nulls,
                      &n);
    auto *checked = (int64 *)palloc(sizeof(int64) * Max(n, 1));
    for (int i = 0; i < n; i++)
        checked[i] = DatumGetInt64(items[i]);
    Datum gone;
    char *error;
    bool told;
    if (!gone_ids(table, checked, n, &gone, &error, &told))
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("pg_outbox: could not check whether the tombstoned rows of %s "
                               "are back: %s",
                               table_key, error),
                        errdetail("Its cascade waits and is tried again.")));
    if (!told)
        return ids; // a table dropped meanwhile: as they are
    forget_returned(table, checked, n, gone);
    return gone;
}

// Those of each category that has one registered table in its silo, handed
// to record_tombstones: those whose row is gone leave a tombstone.
void tombstones_of_delivered(int n, const int32 *categories, const int64 *objects,
                             const bool *control) {
    const Registry *registry = registry_get();
    if (registry->nsole_tables == 0 || n == 0)
        return;
    auto *ids = (int64 *)palloc(sizeof(int64) * n);
    for (int t = 0; t < registry->nsole_tables; t++) {
        const SoleTable *table = &registry->sole_tables[t];
        int found = 0;
        for (int m = 0; m < n; m++)
            if (categories[m] == table->category && control[m] == table->control)
                ids[found++] = objects[m];
        record_tombstones(table, ids, found);
    }
    pfree(ids);
}

void tombstones_of_messages(const DrainBatch *batch, const Message *messages, int nmessages,
                            const bool *delivered) {
    if (registry_get()->nsole_tables == 0 || nmessages == 0)
        return;
    auto *categories = (int32 *)palloc(sizeof(int32) * nmessages);
    auto *objects = (int64 *)palloc(sizeof(int64) * nmessages);
    auto *control = (bool *)palloc(sizeof(bool) * nmessages);
    int n = 0;
    for (int m = 0; m < nmessages; m++) {
        if (!delivered[m])
            continue;
        categories[n] = messages[m].category;
        objects[n] = messages[m].object_identifier;
        control[n] = batch->segments[messages[m].segment].shard.silo == Silo::Control;
        n++;
    }
    tombstones_of_delivered(n, categories, objects, control);
}

} // namespace pgoutbox
