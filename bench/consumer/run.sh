#!/usr/bin/env bash
# Consumer benchmark: messages per second through the Python consumer of
# consumer/outbox_consumer.py (claims of 1,000, three made ahead, a no-op handler, its own
# process over a Unix socket) and through the background worker with a
# no-op PL/pgSQL handler, side by side on the same fills:
#   A. 1,000 shards x 100 rows, 10 objects per shard (10,000 messages);
#   B. 200,000 rows of distinct objects over 1,000 shards (200,000 messages);
# then commit-to-consumer lag p50/p99 under 1,000 writes/s (pgbench) with
# the consumer woken by LISTEN/NOTIFY.
#
# and what the wake-ups cost capture: single-row insert transactions per
# second with outbox.notify_consumers off and on, in turn.
#
# The worker serves MEMBER_UPDATE through its handler; the consumer,
# MEMBER_CONSUMED, a category without a handler (a claim without categories
# takes only those: docs/consumers.md).
#
#   bash bench/consumer/run.sh        # RUNS=3 LAG_SECONDS=20 CAPTURE_SECONDS=10
#   SMOKE=1 bash bench/consumer/run.sh  # seconds: the plumbing, not the figures
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/bench/smoke.sh"
RUNS=${RUNS:-3}
LAG_SECONDS=${LAG_SECONDS:-20}
CAPTURE_SECONDS=${CAPTURE_SECONDS:-10}
SHARDS=1000
if [[ -n ${SMOKE:-} ]]; then
    RUNS=1 LAG_SECONDS=2 CAPTURE_SECONDS=1 SHARDS=20
fi
PYTHON=${PYTHON:-/usr/bin/python3} # Debian's, with python3-psycopg2
work=$(mktemp -d)
chmod 777 "$work"
trap '[[ -z $consumer ]] || kill $consumer 2>/dev/null || true; cluster_stop; rm -rf "$work"' EXIT
consumer=
install_extension "$root"
redis_start
cluster_start "shared_buffers = 1GB" "max_wal_size = 8GB" "autovacuum = off" \
    "outbox.worker_enabled = off" "outbox.database_name = postgres"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
export OUTBOX_DSN="host=$PGHOST port=$PGPORT dbname=postgres user=consumer"

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 1);
SELECT outbox.register_category('MEMBER_CONSUMED', 'ORGANIZATION_SCOPE', 2);
CREATE FUNCTION noop(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END $$;
SELECT outbox.register_handler('MEMBER_UPDATE', 'noop(outbox.message)');
CREATE ROLE consumer LOGIN;
SELECT outbox.grant_category('MEMBER_CONSUMED', 'consumer', 'CONSUME');
SQL

fill() { # category shards rows_per_shard objects_per_shard
    q -c "TRUNCATE outbox.cell_outbox" -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
          SELECT 0, s, $1, s * 100000 + r % $4, jsonb_build_object('r', r)
            FROM generate_series(1, $2) s, generate_series(1, $3) r ORDER BY r, s" -c "VACUUM ANALYZE outbox.cell_outbox" >/dev/null
}
clock() { # who category rows pid statement...: ms from the statements to the rows processed
    local who=$1
    shift
    "$PYTHON" "$root/bench/consumer/clock.py" "$@" || bench_fail "the $who did not finish (above)"
}
left_empty() { # who
    local left
    left=$(q -c "SELECT count(*) FROM outbox.cell_outbox")
    [[ $left == 0 ]] || bench_fail "the $1 left $left rows undelivered"
}
per_message() { # messages ms cpu_ms: "messages/s CPU-ns/message"
    echo "$(($1 * 1000 / $2)) $(($3 * 1000000 / $1))"
}
drain_worker() { # messages/s and CPU ns a message with the worker (one transaction per batch); fill's arguments
    local ms cpu
    fill "$@"
    read -r ms cpu < <(clock worker "$1" $(($2 * $3)) 0 "ALTER SYSTEM SET outbox.worker_enabled = on" \
        "ALTER SYSTEM SET outbox.naptime = 10" "SELECT pg_reload_conf()") || exit 1
    [[ -n $cpu ]] || bench_fail "the worker's clock printed nothing"
    q -c "ALTER SYSTEM SET outbox.worker_enabled = off" -c "SELECT pg_reload_conf()" >/dev/null
    left_empty worker
    sleep 0.3
    per_message $(($2 * $4)) "$ms" "$cpu"
}
drain_consumer() { # messages/s and CPU ns a message with the Python consumer, from its wake-up; fill's arguments
    local ms cpu rows
    # Started on the empty outbox: it claims at once when it starts, so one
    # started after the fill worked before the clock did (on a fast machine,
    # most of workload B: 2.6 million messages/s).
    "$PYTHON" "$root/bench/consumer/consume.py" noop &
    consumer=$!
    sleep 1 # connected and listening, idle
    fill "$@"
    rows=$(q -c "SELECT count(*) FROM outbox.cell_outbox")
    [[ $rows == $(($2 * $3)) ]] || bench_fail "the consumer took $(($2 * $3 - rows)) rows before its wake-up"
    read -r ms cpu < <(clock consumer "$1" "$rows" "$consumer" "NOTIFY pg_outbox") || exit 1
    [[ -n $cpu ]] || bench_fail "the consumer's clock printed nothing"
    left_empty consumer
    kill -TERM $consumer
    wait $consumer || bench_fail "the consumer failed (status $?)"
    consumer=
    per_message $(($2 * $4)) "$ms" "$cpu"
}

declare -A rate cpu
measure() { # key drain fill's arguments: adds a run to rate[key] and cpu[key]
    local key=$1 r c
    shift
    read -r r c < <("$@") || exit 1
    [[ -n $c ]] || exit 1
    rate[$key]+="$r "
    cpu[$key]+="$c "
}
for run in $(seq "$RUNS"); do
    measure a_worker drain_worker 1 $SHARDS 100 10
    measure a_consumer drain_consumer 2 $SHARDS 100 10
    measure b_worker drain_worker 1 $SHARDS 200 200
    measure b_consumer drain_consumer 2 $SHARDS 200 200
    echo "run $run: A ${rate[a_worker]}| ${rate[a_consumer]}| B ${rate[b_worker]}| ${rate[b_consumer]}; CPU ns a message: B ${cpu[b_worker]}| ${cpu[b_consumer]}" >&2
done
# Every outbox row handled once, by each: 100 + 200 rows a shard a run.
for category in 1 2; do
    processed=$(q -c "SELECT processed FROM outbox.stats WHERE category = $category")
    [[ $processed == $((RUNS * SHARDS * 300)) ]] ||
        bench_fail "category $category: $processed rows processed, not $((RUNS * SHARDS * 300))"
done

# Lag: 1,000 single-row inserts a second into a registered table for
# LAG_SECONDS, consumed by the Python consumer; the handler measures from
# the row's written_at (clock_timestamp() at insert) to its call.
q >/dev/null <<'SQL'
CREATE TABLE member (id bigserial PRIMARY KEY, organization_id bigint NOT NULL,
                     written_at timestamptz NOT NULL DEFAULT clock_timestamp());
SELECT outbox.register_table('member', 'MEMBER_CONSUMED', shard_column => 'organization_id',
                             payload_columns => '{written_at}');
ALTER SYSTEM SET outbox.worker_enabled = on;
ALTER SYSTEM RESET outbox.naptime;
SELECT pg_reload_conf();
SQL
"$PYTHON" "$root/bench/consumer/consume.py" lag >"$work/lag.out" &
consumer=$!
sleep 1
echo 'INSERT INTO member (organization_id) VALUES (1 + (random() * 999)::int);' >"$work/insert.sql"
"$PG_BIN/pgbench" -n -c 2 -j 2 -R 1000 -T "$LAG_SECONDS" -f "$work/insert.sql" >"$work/pgbench.log" 2>&1 ||
    bench_fail "pgbench failed: $(tail -3 "$work/pgbench.log")"
sleep 2
kill -TERM $consumer
wait $consumer || bench_fail "the lag consumer failed (status $?)"
consumer=
read -r p50 p99 pmax nlag <"$work/lag.out" || bench_fail "the lag consumer reported nothing"
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.log" | head -1)

# What the wake-ups cost capture: single-row inserts as fast as two
# clients go, outbox.notify_consumers off and on in turn.
for run in $(seq "$RUNS"); do
    for mode in off on; do
        q -c "ALTER SYSTEM SET outbox.notify_consumers = $mode" -c "SELECT pg_reload_conf()" >/dev/null
        sleep 0.5
        "$PG_BIN/pgbench" -n -c 2 -j 2 -T "$CAPTURE_SECONDS" -f "$work/insert.sql" >"$work/capture.log" 2>&1 ||
            bench_fail "pgbench failed: $(tail -3 "$work/capture.log")"
        rate[capture_$mode]+="$(sed -n 's/^tps = \([0-9]*\).*/\1/p' "$work/capture.log" | head -1) "
    done
done

med() { echo ${rate[$1]} | tr ' ' '\n' | median; }
ratio() { awk -v a="$(med "$1")" -v b="$(med "$2")" 'BEGIN{printf "%.2f", a/b}'; }
cpu_med() { echo ${cpu[$1]} | tr ' ' '\n' | median | awk '{printf "%.1f", $1 / 1000}'; } # µs
cpu_ratio() { awk -v a="$(cpu_med "$1")" -v b="$(cpu_med "$2")" 'BEGIN{printf "%.2f", a/b}'; }
{
echo "# pg_outbox consumer benchmark"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $(free -g | awk '/Mem:/ {print $2}') GiB | $(q -c 'SELECT version()' | cut -d' ' -f1-2) | \`bash bench/consumer/run.sh\` RUNS=$RUNS"
echo
echo "Medians of $RUNS runs, all in one run of the script.  The worker calls a no-op PL/pgSQL handler"
echo "inside the database; the Python consumer (consumer/outbox_consumer.py, psycopg2, outbox.claim_json, claims of 1,000, three made ahead,"
echo "a no-op handler) runs in its own process over a Unix socket, timed from its NOTIFY wake-up."
echo
echo "| workload | worker, messages/s | Python consumer, messages/s | consumer / worker |"
echo "|---|---:|---:|---:|"
echo "| A: 1,000 shards x 100 rows, 10 objects each (10,000 messages) | $(med a_worker) | $(med a_consumer) | $(ratio a_consumer a_worker) |"
echo "| B: 200,000 rows, distinct objects, 1,000 shards (200,000 messages) | $(med b_worker) | $(med b_consumer) | $(ratio b_consumer b_worker) |"
echo
echo "CPU a message, every process of the server and the consumer's (clock.py; the figure that moves least on a shared machine), medians in µs:"
echo "A: worker $(cpu_med a_worker), consumer $(cpu_med a_consumer) (worker / consumer $(cpu_ratio a_worker a_consumer));"
echo "B: worker $(cpu_med b_worker), consumer $(cpu_med b_consumer) (worker / consumer $(cpu_ratio b_worker b_consumer); runs in ns: worker ${cpu[b_worker]}, consumer ${cpu[b_consumer]})."
echo
echo "Capture with wake-ups: $(med capture_on) single-row insert transactions/s with \`outbox.notify_consumers = on\`, $(med capture_off) with off ($(ratio capture_on capture_off); 2 pgbench clients, ${CAPTURE_SECONDS} s each, runs: on ${rate[capture_on]}, off ${rate[capture_off]})."
echo
echo "Lag, commit to the Python consumer's handler, under ${tps%.*} tx/s of single-row inserts for ${LAG_SECONDS} s (LISTEN/NOTIFY wake-ups through the worker): p50 ${p50} ms, p99 ${p99} ms, max ${pmax} ms over $nlag messages."
} | tee "$(bench_results "$root/bench/consumer/results.md")"
