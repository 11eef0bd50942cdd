// The turns of consumers' claims (turns.hpp).
#include "consumers/turns.hpp"

#include "pg/hash.hpp"
#include "pg/spi.hpp"
#include "registry/table_meta.hpp"
#include "settings.hpp"
#include "worker_state/worker_state.hpp"

extern "C" {
#include "commands/dbcommands.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/timestamp.h"
}

namespace pgoutbox {

namespace {

// A shard's key in this session's memory of its claims; a hash collision
// only leaves one more shard for a pass (the statement's check decides).
struct TurnKey {
    int64 identifier;
    int32 scope;
    uint32 silo_cell; // the silo in the top bit, the cell's hash below
};

struct TurnEntry {
    TurnKey key;
    Oid role;
    TimestampTz ended; // or when its lease ends
};

// The claims this session made or ended, kept for outbox.max_lease: a
// consumer mostly completes its own claims, so that its next claims leave
// its shards without a query.
HTAB *session_turns = nullptr;
constexpr long session_turns_kept = 4096; // then older entries go

TurnKey turn_key(const ShardKey *shard) {
    uint32 hash = shard->cell_name ? hash_bytes((const unsigned char *)shard->cell_name,
                                                (int)strlen(shard->cell_name))
                                   : 0;
    return TurnKey{shard->shard_identifier, shard->shard_scope,
                   (hash & 0x7FFFFFFFu) | (shard->silo == Silo::Cell ? 0x80000000u : 0u)};
}

int shard_remainder(const ShardKey *shard) {
    const Registry *registry = registry_get();
    return outbox_remainder(shard->silo == Silo::Cell ? &registry->cell_outbox
                                                      : &registry->control_outbox,
                            shard->shard_identifier);
}

bool worker_drains_here() {
    return worker_enabled && database_name != nullptr &&
           strcmp(database_name, get_database_name(MyDatabaseId)) == 0;
}

void remember(const ShardKey *shard, Oid role, TimestampTz ended) {
    if (session_turns == nullptr)
        session_turns = pg::blob_hash("pg_outbox session turns", 256, sizeof(TurnKey),
                                      sizeof(TurnEntry), TopMemoryContext);
    if (hash_get_num_entries(session_turns) >= session_turns_kept) {
        TimestampTz old = GetCurrentTimestamp() - (int64)max_lease_s * USECS_PER_SEC;
        HASH_SEQ_STATUS scan;
        hash_seq_init(&scan, session_turns);
        for (auto *entry = (TurnEntry *)hash_seq_search(&scan); entry != nullptr;
             entry = (TurnEntry *)hash_seq_search(&scan))
            if (entry->ended < old)
                (void)hash_search(session_turns, &entry->key, HASH_REMOVE, nullptr);
    }
    TurnKey key = turn_key(shard);
    auto *entry = (TurnEntry *)hash_search(session_turns, &key, HASH_ENTER, nullptr);
    entry->role = role;
    entry->ended = ended;
}

// Before when the role's last claim of the shard must have ended for the
// shard to be the role's again.
TimestampTz turn_before(const Turns *turns, const ShardKey *shard) {
    if (!turns->others)
        return DT_NOEND;
    TimestampTz at_most = turns->now - (int64)max_lease_s * USECS_PER_SEC;
    TimestampTz since;
    if (turns->handlers && turns->worker_here &&
        worker_offered_at(shard->silo == Silo::Cell ? 0 : 1, shard_remainder(shard), &since))
        return Max(since, at_most);
    return Max(turns->now - (int64)naptime_ms * 1000, at_most);
}

} // namespace

Turns turns_begin(Oid role) {
    Turns turns = {role, false, false, worker_drains_here(), GetCurrentTimestamp()};
    Oid types[1] = {OIDOID};
    Datum args[1] = {ObjectIdGetDatum(role)};
    static SPIPlanPtr plan = nullptr;
    pg::spi_run_kept(&plan, "looking for others that deliver",
                     "SELECT EXISTS (SELECT FROM outbox.handlers), EXISTS (SELECT FROM"
                     " outbox.category_grants g WHERE g.privilege = 'CONSUME'"
                     " AND NOT pg_catalog.pg_has_role($1, g.role, 'USAGE'))",
                     1, types, args, nullptr, true, SPI_OK_SELECT);
    bool isnull;
    HeapTuple tuple = SPI_tuptable->vals[0];
    turns.handlers = DatumGetBool(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 1, &isnull));
    turns.others =
        turns.handlers || DatumGetBool(SPI_getbinval(tuple, SPI_tuptable->tupdesc, 2, &isnull));
    return turns;
}

TimestampTz *turns_leave(const Turns *turns, DrainBatch *batch) {
    auto *before = (TimestampTz *)palloc(sizeof(TimestampTz) * Max(batch->nsegments, 1));
    for (int s = 0; s < batch->nsegments; s++) {
        DrainSegment *segment = &batch->segments[s];
        before[s] = turn_before(turns, &segment->shard);
        if (session_turns == nullptr || before[s] == DT_NOEND ||
            segment->action != SegmentAction::Deliver)
            continue;
        TurnKey key = turn_key(&segment->shard);
        auto *entry = (TurnEntry *)hash_search(session_turns, &key, HASH_FIND, nullptr);
        if (entry != nullptr && entry->role == turns->role && entry->ended <= turns->now &&
            entry->ended >= before[s])
            segment->action = SegmentAction::Leave;
    }
    return before;
}

void turns_claimed(const ShardKey *shard, Oid role, TimestampTz lease_until) {
    remember(shard, role, lease_until);
}

bool turns_claim_ended(const ShardKey *shard, Oid claimer) {
    int silo = shard->silo == Silo::Cell ? 0 : 1;
    TimestampTz since;
    if (worker_drains_here() && worker_offered_at(silo, shard_remainder(shard), &since) &&
        since == DT_NOEND)
        return false; // the worker wants nothing there
    claim_ended_at_commit(silo, shard_remainder(shard));
    remember(shard, claimer, GetCurrentTimestamp());
    return true;
}

int64 turns_forget_ended() {
    static SPIPlanPtr plan = nullptr;
    Oid types[1] = {INT4OID};
    Datum args[1] = {Int32GetDatum(max_lease_s)};
    return (int64)pg::spi_run_kept(
        &plan, "forgetting ended claims",
        "DELETE FROM outbox.consumer_claims WHERE lease_until < pg_catalog.now()"
        " - pg_catalog.make_interval(secs => $1)",
        1, types, args, nullptr, false, SPI_OK_DELETE);
}

} // namespace pgoutbox
