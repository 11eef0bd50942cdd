#!/usr/bin/env bash
# A registered table on a logical replication subscriber is captured: the
# initial copy (the table sync worker's COPY fires statement triggers) and
# then every applied change (the apply worker fires row triggers only), each
# exactly once.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/test/harness/check.sh"
trap cluster_stop EXIT
redis_start
cluster_start "wal_level = logical" "max_replication_slots = 4" "max_wal_senders = 4"
q() { psql -X -q -tA "$@" 2>&1; }
wait_for() {
    local deadline=$((SECONDS + $1)) got
    while ((SECONDS < deadline)); do
        got=$(q -d sub -c "$2")
        [[ $got == "$3" ]] && return 0
        sleep 0.2
    done
    echo "  waited $1 s for '$3', last saw '$got'" >&2
    return 1
}

q -c "CREATE DATABASE pub" -c "CREATE DATABASE sub" >/dev/null
q -d pub >/dev/null <<'SQL'
CREATE TABLE member (id int PRIMARY KEY, org int NOT NULL, email text);
INSERT INTO member SELECT g, g % 3, 'm' || g FROM generate_series(1, 10) g;
CREATE PUBLICATION p FOR TABLE member;
SELECT pg_create_logical_replication_slot('s', 'pgoutput');
SQL
q -d sub >/dev/null <<SQL
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 0);
CREATE TABLE member (id int PRIMARY KEY, org int NOT NULL, email text);
SELECT outbox.register_table('member', 'C', shard_column => 'org', payload_columns => '{email}');
CREATE SUBSCRIPTION s CONNECTION 'dbname=pub host=$PGHOST port=$PGPORT user=postgres'
    PUBLICATION p WITH (create_slot = false, slot_name = 's');
SQL
check "the initial copy is captured once per row" wait_for 30 \
    "SELECT count(*) || '/' || count(DISTINCT object_identifier) FROM outbox.cell_outbox" "10/10"
q -d pub -c "INSERT INTO member VALUES (11, 1, 'new')" -c "UPDATE member SET email = 'changed' WHERE id = 2" \
  -c "UPDATE member SET org = 7 WHERE id = 3" -c "DELETE FROM member WHERE id = 4" >/dev/null
# insert 1 + update 1 + shard move 2 + delete 1
check "applied changes are captured once each" wait_for 30 "SELECT count(*) FROM outbox.cell_outbox" 15
check "with the subscriber's view of each row" [ "$(q -d sub -c "SELECT string_agg(object_identifier || ':' || shard_identifier || ':' || coalesce(payload->>'email', ''), ',' ORDER BY id) FROM outbox.cell_outbox WHERE id > (SELECT min(id) + 9 FROM outbox.cell_outbox)")" = "11:1:new,2:2:changed,3:0:m3,3:7:m3,4:1:m4" ]
q -d sub -c "DROP SUBSCRIPTION s" >/dev/null
checks_done logical_replication
