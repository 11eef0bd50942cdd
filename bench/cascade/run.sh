#!/usr/bin/env bash
# Cascade benchmark: rows/s of the cross-silo cascade deleting CHILDREN child
# rows that refer to PARENTS deleted parents, run by the background worker
# with the budget lifted, side by side with a plain DELETE ... WHERE user_id =
# ANY (...) of the same rows from an identical table, in the same run.  The
# row walk has caught up with the child table first, as in production; the
# tombstones are recorded at once, so that the cascade alone is timed.
#
#   bash bench/cascade/run.sh        # CHILDREN=1000000 PARENTS=1000 RUNS=3
#   SMOKE=1 bash bench/cascade/run.sh  # seconds: the plumbing, not the figures
# Prints a Markdown table and writes it to bench/cascade/results.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
CHILDREN=${CHILDREN:-1000000}
PARENTS=${PARENTS:-1000}
RUNS=${RUNS:-3}
if [[ -n ${SMOKE:-} ]]; then CHILDREN=5000 PARENTS=50 RUNS=1; fi
trap 'cluster_stop' EXIT

install_extension "$root"
redis_start
cluster_start "shared_buffers = 1GB" "max_wal_size = 8GB" "checkpoint_timeout = 30min" \
    "autovacuum = off" "outbox.database_name = postgres" "outbox.naptime = 100" \
    "outbox.backfill_rate_per_minute = 2000000000" ${CHUNK:+"outbox.cascade_chunk_size = $CHUNK"}
q() { psql -X -q -tA -v ON_ERROR_STOP=1 -v PARENTS="$PARENTS" "$@"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

q >/dev/null <<SQL
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('User', 0);
SELECT outbox.register_category('user_update', 'User', 0);
SELECT outbox.register_cell('us');
CREATE TABLE auth_user (id bigint PRIMARY KEY);
SELECT outbox.register_table('auth_user', 'user_update', 'control', shard_column => 'id');
CREATE TABLE member (id bigint PRIMARY KEY, user_id bigint NOT NULL, name text NOT NULL);
CREATE INDEX ON member (user_id);
CREATE TABLE member_plain (LIKE member INCLUDING ALL);
SELECT outbox.register_foreign_key('member', 'user_id', 'auth_user', 'CASCADE');
SQL

plain=() cascade=()
for run in $(seq "$RUNS"); do
    q >/dev/null <<SQL
TRUNCATE member, member_plain, outbox.cell_tombstone;
INSERT INTO member SELECT g, g % $PARENTS + 1, 'member ' || g FROM generate_series(1, $CHILDREN) g;
INSERT INTO member_plain SELECT * FROM member;
VACUUM ANALYZE member, member_plain;
CHECKPOINT;
SQL
    redis-cli -p "$REDIS_PORT" DEL row.member.user_id tombstone.member.user_id >/dev/null
    # Steady state first: the row walk has caught up with the child table
    # (as it has in production, where it walks only new rows).
    q -c "SELECT outbox.wake_worker()" >/dev/null
    deadline=$((SECONDS + 300))
    until [[ $(q -c "SELECT row_delta = 0 AND row_watermark IS NOT NULL FROM outbox.foreign_keys") == t ]]; do
        ((SECONDS < deadline)) || bench_fail "the row walk has not caught up with member after 300 s"
        sleep 0.1
    done
    # The plain DELETE of the same rows, timed by the server.
    ms=$(q <<'SQL'
SELECT pg_catalog.clock_timestamp() AS start \gset
DELETE FROM member_plain WHERE user_id = ANY (ARRAY(SELECT generate_series(1, :PARENTS)::bigint));
SELECT round(extract(epoch FROM pg_catalog.clock_timestamp() - :'start') * 1000);
SQL
) || bench_fail "the plain DELETE failed"
    plain+=("$ms")
    # The cascade: tombstones for every parent, then the worker's steps,
    # timed by the server from before the tombstones are recorded until the
    # tombstone watermark has passed the last tombstone (the tombstone walk
    # only runs once the row walk has caught up), polled every 10 ms with a
    # Redis GET: outbox.foreign_keys would read the child table, whose dead
    # rows a poll would wade through.  At most 300 s.
    ms=$(q <<'SQL'
SELECT pg_catalog.clock_timestamp() AS start \gset
SELECT outbox.record_tombstone('cell', 'auth_user', g) FROM generate_series(1, :PARENTS) g \g /dev/null
SELECT outbox.wake_worker() \g /dev/null
DO $$ DECLARE
    deadline constant timestamptz := pg_catalog.clock_timestamp() + interval '300 s';
BEGIN
    WHILE coalesce((SELECT w.low FROM outbox._watermark_peek('tombstone.member.user_id') w), 0)
          < (SELECT pg_catalog.max(t.id) FROM outbox.cell_tombstone t) LOOP
        IF pg_catalog.clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'the tombstone watermark has not passed the last tombstone after 300 s';
        END IF;
        PERFORM pg_catalog.pg_sleep(0.01);
    END LOOP;
END $$;
SELECT round(extract(epoch FROM pg_catalog.clock_timestamp() - :'start') * 1000);
SQL
) || bench_fail "the cascade failed"
    cascade+=("$ms")
    left=$(q -c "SELECT count(*) FROM member")
    [[ $left == 0 ]] || bench_fail "the cascade left $left rows"
    echo "run $run: plain ${plain[-1]} ms, cascade ${cascade[-1]} ms" >&2
done

plain_ms=$(printf '%s\n' "${plain[@]}" | median)
cascade_ms=$(printf '%s\n' "${cascade[@]}" | median)
ratio=$(awk -v p="$plain_ms" -v c="$cascade_ms" 'BEGIN {printf "%.2f", p / c}')
rows_per_s() { awk -v n="$CHILDREN" -v ms="$1" 'BEGIN {printf "%d", n * 1000 / ms}'; }
version=$(q -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'")
report=$(cat <<MD
# pg_outbox cascade benchmark

$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(awk '/MemTotal/ {printf "%d GiB", $2/1048576}' /proc/meminfo) | $(q -c "SHOW server_version") | pg_outbox $version | \`bash bench/cascade/run.sh\` CHILDREN=$CHILDREN PARENTS=$PARENTS RUNS=$RUNS

$CHILDREN child rows referring to $PARENTS parents (one index on the column), all parents deleted; medians of $RUNS runs, both in every run.

| what | ms | rows/s | vs plain DELETE |
|---|---:|---:|---:|
| plain \`DELETE FROM member WHERE user_id = ANY (...)\`, one statement | $plain_ms | $(rows_per_s "$plain_ms") | 1.00 |
| the cascade through the worker: tombstones recorded, batches of 500 tombstones, steps of about 10,000 rows, one transaction each, Redis watermarks | $cascade_ms | $(rows_per_s "$cascade_ms") | $ratio |

Both times are taken by the server's clock.  The cascade's runs from before the tombstones are recorded until the tombstone watermark has passed the last of them (polled every 10 ms); then no child row is left.
MD
)
echo "$report"
echo "$report" >"$(bench_results "$root/bench/cascade/results.md")"
