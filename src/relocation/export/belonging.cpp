// The rows that belong to roots of a scope (belonging.hpp).
//
// Written without C++ objects that own resources: errors unwind through it
// freely.
#include "relocation/export/belonging.hpp"

#include "pg/hash.hpp"

#include <algorithm>

namespace pgoutbox::relocation {

namespace {

void add_id(Ids *ids, int64 id, MemoryContext context) {
    if (ids->pending_count == ids->pending_capacity) {
        ids->pending_capacity = Max(64, ids->pending_capacity * 2);
        ids->pending =
            ids->pending == nullptr
                ? (int64 *)MemoryContextAllocHuge(context, sizeof(int64) * ids->pending_capacity)
                : (int64 *)repalloc_huge(ids->pending, sizeof(int64) * ids->pending_capacity);
    }
    ids->pending[ids->pending_count++] = id;
}

// Moves the pending ids not found before into found; they stay pending,
// sorted and distinct, to be followed.
void absorb(Ids *ids, MemoryContext context) {
    int64 *pending = ids->pending;
    pg::sort_ids(pending, ids->pending_count);
    long fresh = 0;
    const int64 *found = ids->found, *found_end = ids->found + ids->found_count;
    for (long i = 0; i < ids->pending_count; i++) {
        if (fresh > 0 && pending[fresh - 1] == pending[i])
            continue;
        found = std::lower_bound(found, found_end, pending[i]);
        if (found == found_end || *found != pending[i])
            pending[fresh++] = pending[i];
    }
    ids->pending_count = fresh;
    if (fresh == 0)
        return;
    auto *merged =
        (int64 *)MemoryContextAllocHuge(context, sizeof(int64) * (ids->found_count + fresh));
    std::merge(ids->found, ids->found + ids->found_count, pending, pending + fresh, merged);
    if (ids->found != nullptr)
        pfree(ids->found);
    ids->found = merged;
    ids->found_count += fresh;
}

// Records a row read by the walk: its id (column 1) and, when the walk
// reads one, the value of its also column (column 2; NULL counts as 0).
void add_row(Ids *ids, TupleTableSlot *slot, MemoryContext context) {
    bool isnull;
    add_id(ids, DatumGetInt64(slot_getattr(slot, 1, &isnull)), context);
    if (ids->also != nullptr) {
        Datum datum = slot_getattr(slot, 2, &isnull);
        int64 value = isnull ? 0 : DatumGetInt64(datum);
        if (ids->also_any && value == ids->also_last)
            return;
        (void)hash_search(ids->also, &value, HASH_ENTER, nullptr);
        ids->also_any = true;
        ids->also_last = value;
    }
}

// ", t.column::bigint" for a table the walk reads a second column of.
const char *also_select(const char *column) {
    return column == nullptr ? "" : psprintf(", t.%s::bigint", column);
}

// " AND fn(t) = 'Scope'" for a table whose rows decide their scope.
const char *scope_filter(const Model *t, int scope) {
    return t->function == nullptr
               ? ""
               : psprintf(" AND %s(t) = %s", t->function, quote_literal_cstr(scope_name(scope)));
}

// Leaves out of member the tables that are not wanted and lead to none
// that is: a table is kept when it is wanted, or when a kept member refers
// to it (every table on a path from the root to a wanted one).
void keep_wanted(const Models *models, int root, Wanted wanted, void *arg, bool *member) {
    int n = models->count;
    bool *kept = (bool *)palloc0(sizeof(bool) * (n + 1));
    for (int i = 0; i < n; i++)
        kept[i] = member[i] && (i == root || wanted(arg, models->tables[i].relid));
    for (bool grew = true; grew;) {
        grew = false;
        for (int e = 0; e < models->edge_count; e++) {
            int p = models->edges[e].parent, c = models->edges[e].child;
            if (member[p] && kept[c] && !kept[p]) {
                kept[p] = true;
                grew = true;
            }
        }
    }
    memcpy(member, kept, sizeof(bool) * n);
    pfree(kept);
}

void refuse(const Model *t, int scope, const char *problem, const char *hint) {
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("cannot export scope %s: table %s %s", scope_name(scope), t->key, problem),
             errhint("%s", hint), errdetail("outbox.check_models() lists every finding.")));
}

} // namespace

int64 *sorted_ids(Ids *ids, long *count) {
    *count = ids->found_count;
    return ids->found;
}

void find_belonging(int scope, const char *argument, const int64 *roots, int root_count,
                    Belonging *out, AlsoRead also, Wanted wanted, void *arg) {
    Models *models = load_models(false);
    int n = models->count;
    int root = root_of(models, scope);
    if (root < 0)
        ereport(ERROR,
                (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                 errmsg("scope %s has no relocation root", scope_name(scope)),
                 errhint("SELECT outbox.set_relocation_root('%s', <table>);", scope_name(scope))));
    bool *member = (bool *)palloc0(sizeof(bool) * (n + 1));
    for (int i = 0; i < n; i++)
        member[i] = (models->tables[i].scopes & scope) != 0;
    if (wanted != nullptr)
        keep_wanted(models, root, wanted, arg, member);
    for (int i = 0; i < n; i++) {
        const Model *t = &models->tables[i];
        if (!member[i])
            continue;
        if (t->pk == nullptr)
            refuse(t, scope, "has no primary key of one integer column",
                   "An export names each row by its primary key.");
        if (t->scope_count > 1 && ((t->scopes & Excluded) || t->function == nullptr))
            refuse(t, scope, "has a set of scopes without Excluded and with a scope_function",
                   "Set it again with outbox.set_relocation_scope.");
        if (t->forced_row_security)
            refuse(t, scope, "forces row-level security on its owner, as whom it is read",
                   "ALTER TABLE ... NO FORCE ROW LEVEL SECURITY, or the export would miss rows.");
    }
    if (!member[root])
        refuse(&models->tables[root], scope, "is the scope's root but not in the scope",
               "Set its scope with outbox.set_relocation_scope.");
    int *order = (int *)palloc(sizeof(int) * (n + 1));
    int order_count = 0;
    bool *deferred = (bool *)palloc0(sizeof(bool) * (models->edge_count + 1));
    int stuck = plan_export_order(n, models->edges, models->edge_count, member, order, &order_count,
                                  deferred);
    if (stuck >= 0)
        refuse(&models->tables[stuck], scope, "is on a cycle of NOT NULL references",
               "Make one column of the cycle nullable: the import sets it in a later step.");

    MemoryContext context = CurrentMemoryContext;
    Relation *rels = (Relation *)palloc0(sizeof(Relation) * (n + 1));
    Ids *ids = (Ids *)palloc0(sizeof(Ids) * (n + 1));
    const char **also_columns = (const char **)palloc0(sizeof(char *) * (n + 1));
    for (int i = 0; i < n; i++) {
        if (!member[i])
            continue;
        rels[i] = pg::open_user_table(models->tables[i].relid, AccessShareLock);
        if (rels[i] == nullptr)
            ereport(ERROR,
                    (errcode(ERRCODE_UNDEFINED_TABLE),
                     errmsg("table %s was dropped during the export", models->tables[i].key)));
        also_columns[i] = also == nullptr ? nullptr : also(arg, rels[i]);
        if (also_columns[i] != nullptr)
            ids[i].also =
                pg::blob_hash("pg_outbox export also", 64, sizeof(int64), sizeof(int64), context);
    }

    // The roots, which must exist.
    const Model *root_table = &models->tables[root];
    read_chunks(rels[root], "reading the export's roots",
                psprintf("SELECT t.%s::bigint%s FROM %s%s t WHERE ",
                         quote_identifier(root_table->pk), also_select(also_columns[root]),
                         root_table->relkind == 'r' ? "ONLY " : "", root_table->qualified),
                psprintf("t.%s", quote_identifier(root_table->pk)), scope_filter(root_table, scope),
                roots, root_count, [&](uint64 rows) {
                    TupleTableSlot *slot =
                        MakeSingleTupleTableSlot(SPI_tuptable->tupdesc, &TTSOpsHeapTuple);
                    for (uint64 r = 0; r < rows; r++) {
                        ExecStoreHeapTuple(SPI_tuptable->vals[r], slot, false);
                        add_row(&ids[root], slot, context);
                    }
                    ExecDropSingleTupleTableSlot(slot);
                });
    // Read once each (distinct roots, by primary key); followed below.
    long got = ids[root].pending_count;
    int64 *existing = (int64 *)palloc(sizeof(int64) * (got + 1));
    if (got > 0)
        memcpy(existing, ids[root].pending, sizeof(int64) * got);
    pg::sort_ids(existing, got);
    if (got < root_count)
        for (int i = 0; i < root_count; i++)
            if (!std::binary_search(existing, existing + got, roots[i]))
                ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                                errmsg("%s: " INT64_FORMAT " is not a row of %s", argument,
                                       roots[i], root_table->key)));

    // Breadth first from the roots, until no table has ids left to follow.
    for (bool more = true; more;) {
        more = false;
        for (int p = 0; p < n; p++) {
            if (!member[p] || ids[p].pending_count == 0)
                continue;
            absorb(&ids[p], context);
            long count = ids[p].pending_count;
            if (count == 0)
                continue;
            more = true;
            // Sorted and distinct: a chunk's first and last bound its read
            // (pg::ids_condition).
            int64 *followed = (int64 *)palloc(sizeof(int64) * count);
            memcpy(followed, ids[p].pending, sizeof(int64) * count);
            ids[p].pending_count = 0;
            for (int e = 0; e < models->edge_count; e++) {
                int c = models->edges[e].child;
                if (models->edges[e].parent != p || !member[c])
                    continue;
                const Model *child = &models->tables[c];
                const Reference *ref = &models->references[models->edge_reference[e]];
                const char *column = psprintf("t.%s", quote_identifier(ref->column));
                for (long at = 0; at < count; at += ids_per_read) {
                    pg::IdsCondition read;
                    pg::ids_condition(column, followed + at,
                                      int(Min((long)ids_per_read, count - at)), &read);
                    pg::spi_each_as(relocation_owner_role(rels[c]),
                                    "finding the rows that belong to the export",
                                    psprintf("SELECT t.%s::bigint%s FROM %s%s t WHERE %s%s",
                                             quote_identifier(child->pk),
                                             also_select(also_columns[c]),
                                             child->relkind == 'r' ? "ONLY " : "", child->qualified,
                                             read.sql, scope_filter(child, scope)),
                                    3, read.types, read.args,
                                    [&](TupleTableSlot *slot) { add_row(&ids[c], slot, context); });
                }
            }
            pfree(followed);
        }
    }

    out->models = models;
    out->root = root;
    out->member = member;
    out->order = order;
    out->order_count = order_count;
    out->deferred = deferred;
    out->rels = rels;
    out->ids = ids;
}

} // namespace pgoutbox::relocation
