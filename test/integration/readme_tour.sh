#!/usr/bin/env bash
# README's five-minute tour, exactly as written: its SQL block is taken from
# README.md and run in order, as a superuser, against a server that preloads
# pg_outbox with outbox.database_name set and the worker running, then what
# the tour promises is checked: capture wrote one outbox row per row, the
# handler replicated them, and the backfill behind the opened gate finishes.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
redis_start
cluster_start "outbox.database_name = postgres" "outbox.naptime = 100"
source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }

tour=$(awk '/^## A five-minute tour/ {in_tour = 1} in_tour && /^```sql/ {sql = 1; next}
            sql && /^```/ {exit} sql {print}' "$root/README.md")
check "README has the tour's SQL" [ "$(echo "$tour" | grep -c 'outbox\.')" -gt 5 ]
out=$(q <<<"$tour")
check "the tour runs without an error" bash -c '! grep -q ERROR <<<"$1"' _ "$out" ||
    echo "$out" | grep ERROR >&2
check "capture wrote the 6 members' outbox rows, which the tour shows" \
    grep -Eq '^1\|[0-9]+\|\{"email": "user[0-9]@example.com"\}$' <<<"$out"
check "the handler replicated every member" wait_for 30 "SELECT count(*) FROM replica" 6
check "the backfill behind the opened gate completes" wait_for 60 \
    "SELECT state FROM outbox.backfill_status WHERE table_key = 'organization_member'" complete
check "and the outbox drains" wait_for 30 "SELECT count(*) FROM outbox.cell_outbox" 0 || {
    # What held them: for the next time this fails (it has, rarely, in CI).
    q -c "SELECT id, shard_identifier, object_identifier, scheduled_for - now() AS due_in FROM outbox.cell_outbox" >&2
    q -c "SELECT * FROM outbox.shard_errors" -c "SELECT * FROM outbox.worker_status" >&2
    grep -v ' LOG: ' "$CLUSTER_DIR/server.log" | tail -20 >&2
}

checks_done readme_tour.sh
