#!/usr/bin/env bash
# Two databases on one Redis with the same outbox.redis_key_prefix and
# outbox.redis_db would share every backfill cursor and cascade watermark
# (the soak of issue 34 found a cell's tombstone watermark taken past its own
# tombstones by the other cell, leaving orphans).  The first database to
# connect claims the prefix; any other is refused with an error naming both,
# before it reads or writes a key.  Cases: a second database of the same
# cluster (another OID), a second cluster whose database has the same OID
# (another system identifier), a prefix of its own, another redis_db, the
# claim released by deleting its key, and the claim surviving a Redis restart
# that lost it (taken again by whoever connects first).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap 'cluster_stop; [[ -n ${second_dir:-} ]] && { CLUSTER_DIR=$second_dir; REDIS_PID=; cluster_stop; }' EXIT
redis_start
source "$root/test/harness/check.sh"
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }

# The second cluster first (cluster_start exports one cluster's variables).
# No worker: it would connect on its own and claim when the checks expect
# a given database to (seen under the sanitizers, after the Redis restart).
cluster_start "outbox.worker_enabled = off"
second_dir=$CLUSTER_DIR second_port=$PGPORT
cluster_start "outbox.worker_enabled = off"
first_dir=$CLUSTER_DIR first_port=$PGPORT
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
setup='CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope($$S$$, 0);
SELECT outbox.register_category($$C$$, $$S$$, 0);
CREATE TABLE orgs (id bigint PRIMARY KEY, name text);
INSERT INTO orgs SELECT g, $$o$$ || g FROM generate_series(1, 10) g;
SELECT outbox.register_table($$orgs$$, $$C$$);'
q -c "CREATE DATABASE other" >/dev/null
q <<<"$setup" >/dev/null
q -d other <<<"$setup" >/dev/null
q -h "$second_dir" -p "$second_port" <<<"$setup" >/dev/null
cursor='SELECT lower_bound || $$,$$ || version FROM outbox.get_processing_state($$orgs$$)'
identity() { # the claim a database writes: <system identifier>:<database oid>
    q "$@" -c "SELECT system_identifier || ':' || (SELECT oid FROM pg_database WHERE datname = current_database()) FROM pg_control_system()"
}
first_id=$(identity) other_id=$(identity -d other) second_id=$(identity -h "$second_dir" -p "$second_port")

check "the first database reads its cursor" [ "$(q -c "$cursor")" = "0,1" ]
check "and claims the prefix for itself" [ "$(rcli GET outbox_database)" = "$first_id" ]

out=$(q -d other -c "$cursor")
check "another database of the cluster is refused (${out//$'\n'/ })" \
    grep -q "Redis at 127.0.0.1:$REDIS_PORT db 0, key prefix \"\": these keys belong to another database ($first_id); this database is $other_id" <<<"$out"
check "the refusal says what to do" grep -q 'HINT:.*outbox.redis_key_prefix' <<<"$out"
out=$(q -d other -c "SELECT * FROM outbox.process_backfill_batch('orgs', 5, true)")
check "a backfill batch there is refused and writes nothing" \
    bash -c "grep -q 'belong to another database' <<<'$out' && [ \"\$(redis-cli -p $REDIS_PORT GET outbox_backfill.orgs)\" = '[0, 1]' ] && [ \"\$(psql -X -tA -d other -c 'SELECT count(*) FROM outbox.cell_outbox')\" = 0 ]"
out=$(q -h "$second_dir" -p "$second_port" -c "$cursor")
check "a database of another cluster with the same OID is refused" \
    grep -q "these keys belong to another database ($first_id); this database is $second_id" <<<"$out"

# What the operator does about it: a prefix or a Redis database of its own.
check "with a prefix of its own it works" \
    [ "$(q -d other -c "SET outbox.redis_key_prefix = 'other:'" -c "$cursor")" = "0,1" ]
check "and claims that prefix" [ "$(rcli GET other:outbox_database)" = "$other_id" ]
q -h "$second_dir" -p "$second_port" -c "ALTER SYSTEM SET outbox.redis_db = 3" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.3
check "with another redis_db it works" [ "$(q -h "$second_dir" -p "$second_port" -c "$cursor")" = "0,1" ]
check "and claims it there" [ "$(rcli -n 3 GET outbox_database)" = "$second_id" ]
# A session that changes its prefix meets the claim of the new one.
out=$(q -d other -c "SET outbox.redis_key_prefix = 'other:'" -c "$cursor" -c "SET outbox.redis_key_prefix = ''" -c "$cursor")
check "a session whose prefix changes is checked again" grep -q 'belong to another database' <<<"$out"

# The first database, in new sessions and after a Redis restart that lost its
# keys, keeps working; whoever connects first after such a loss claims.
check "the owner, in another session, still works" [ "$(q -c "$cursor")" = "0,1" ]
kill "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
REDIS_PID=$!
for _ in $(seq 50); do rcli PING >/dev/null 2>&1 && break; sleep 0.1; done
check "after a Redis restart that lost everything, the other database claims first" \
    [ "$(q -d other -c "$cursor")" = "0,1" ]
out=$(q -c "$cursor")
check "and the first is refused now" grep -q "belong to another database ($other_id); this database is $first_id" <<<"$out"
# Deleting the claim (the hint's advice once the other database is gone).
rcli DEL outbox_database >/dev/null
check "after DEL of the claim the first claims again" [ "$(q -c "$cursor")" = "0,1" ]
check "its claim is back" [ "$(rcli GET outbox_database)" = "$first_id" ]

check "no backend crashed" bash -c "! grep -q 'terminated by signal' '$first_dir/server.log' '$second_dir/server.log'"
CLUSTER_DIR=$second_dir PGPORT=$second_port
REDIS_PID_KEEP=$REDIS_PID
REDIS_PID=
cluster_stop
second_dir=
REDIS_PID=$REDIS_PID_KEEP
CLUSTER_DIR=$first_dir PGPORT=$first_port
checks_done redis_sharing
