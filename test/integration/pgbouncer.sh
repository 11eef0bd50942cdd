#!/usr/bin/env bash
# pg_outbox through a real PgBouncer (Debian's) in transaction pooling
# mode: 3 server connections per pool, handed out round robin, so that a
# client's transactions land on different server backends.
#   1. four clients write through PgBouncer (INSERT, UPDATE, DELETE, COPY,
#      transactions of several statements, rollbacks): every write is
#      captured on whichever backend ran it, nothing of a rollback;
#   2. the shipped consumer with --no-listen, through PgBouncer, picks up a
#      change written while it idles within its poll interval (5 s) and
#      never sends LISTEN;
#   3. two consumers through PgBouncer and one connected directly deliver
#      the same stream: every change, in order, none twice; claims land on
#      several backends and end (complete, fail) on others; a failure backs
#      the shard off, the second one moves the message to the dead letters;
#   4. a session's SET stays on its server connection, SET LOCAL does not.
# Which backend ran a claim and its end is the server's view: a trigger the
# test puts on outbox.consumer_claims records pg_backend_pid() when claim()
# writes the row and when complete() or fail() deletes it, in their own
# transactions, without touching the consumer.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
pids=()
BOUNCER_DIR=
bouncer_stop() {
    [[ -n $BOUNCER_DIR ]] || return 0
    local pid
    pid=$(cat "$BOUNCER_DIR/pgbouncer.pid" 2>/dev/null)
    if [[ -n $pid ]]; then
        kill "$pid" 2>/dev/null
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    [[ -n ${KEEP_CLUSTER:-} ]] || rm -rf "$BOUNCER_DIR"
    BOUNCER_DIR=
}
logs=$(mktemp -d)
chmod 777 "$logs"
trap 'kill -9 "${pids[@]}" 2>/dev/null; bouncer_stop; cluster_stop; [[ -n ${KEEP_CLUSTER:-} ]] || rm -rf "$logs"' EXIT
redis_start
cluster_start "outbox.naptime = 100" "outbox.database_name = postgres" \
    "log_line_prefix = '%m [%p] %a: '"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
PYTHON=/usr/bin/python3 # Debian's, with python3-psycopg2

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_scope('OrgDirect', 1);
SELECT outbox.register_category('item_update', 'Org', 0);
SELECT outbox.register_category('org_update', 'Org', 1);
SELECT outbox.register_category('org_direct', 'OrgDirect', 2);
-- writer: the backend that ran the write, in the payload.
CREATE TABLE items (id bigint PRIMARY KEY, shard bigint NOT NULL, seq int NOT NULL DEFAULT 0,
                    writer int NOT NULL DEFAULT pg_backend_pid());
SELECT outbox.register_table('items', 'item_update', 'cell', shard_column => 'shard',
                             payload_columns => '{seq,writer}');
CREATE TABLE orgs (id bigint PRIMARY KEY, seq int NOT NULL DEFAULT 0,
                   written_at timestamptz NOT NULL DEFAULT clock_timestamp());
SELECT outbox.register_table('orgs', 'org_update', 'cell', shard_column => 'id',
                             payload_columns => '{seq,written_at}');
-- The same organisations again, for the consumer connected directly (a
-- scope of their own: a claimed shard holds every category in it).
CREATE TABLE orgs_direct (LIKE orgs INCLUDING ALL);
SELECT outbox.register_table('orgs_direct', 'org_direct', 'cell', shard_column => 'id',
                             payload_columns => '{seq,written_at}');
CREATE TABLE delivered (n bigserial, consumer text, shard bigint, object bigint, seq int,
                        written_at timestamptz, started timestamptz, finished timestamptz,
                        at timestamptz DEFAULT clock_timestamp());
CREATE ROLE consumer LOGIN;
CREATE ROLE direct LOGIN;
SELECT outbox.grant_category('org_update', 'consumer', 'CONSUME');
SELECT outbox.grant_category('org_direct', 'direct', 'CONSUME');
-- Every statement of the consumers in the server log, with its backend and
-- application_name (PgBouncer passes it on to the server connection).
ALTER ROLE consumer SET log_statement = 'all';
CREATE TABLE claim_backends (n bigserial, op text, claim bigint, consumer text,
                             shard bigint, pid int, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION record_claim_backend() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$
BEGIN
    -- A released row (a shard's turn, docs/consumers.md) is no claim.
    IF TG_OP = 'DELETE' THEN
        IF NOT OLD.released THEN
            INSERT INTO public.claim_backends (op, claim, consumer, shard, pid)
            VALUES ('end', OLD.claim, OLD.consumer::text, OLD.shard_identifier, pg_backend_pid());
        END IF;
    ELSIF NOT NEW.released THEN
        INSERT INTO public.claim_backends (op, claim, consumer, shard, pid)
        VALUES ('claim', NEW.claim, NEW.consumer::text, NEW.shard_identifier, pg_backend_pid());
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER record_claim_backend AFTER INSERT OR UPDATE OR DELETE ON outbox.consumer_claims
    FOR EACH ROW EXECUTE FUNCTION record_claim_backend();
SQL

# PgBouncer on 127.0.0.1, as the cluster's OS user.  server_round_robin
# hands out the server connection idle longest (LIFO by default would give
# a lone client the same one every time); min_pool_size opens three while
# a client is connected.
BOUNCER_DIR=$(mktemp -d /tmp/pg_outbox_bouncer.XXXXXX)
BOUNCER_PORT=$(_free_port)
cat >"$BOUNCER_DIR/pgbouncer.ini" <<INI
[databases]
postgres = host=127.0.0.1 port=$PGPORT dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir = $BOUNCER_DIR
pidfile = $BOUNCER_DIR/pgbouncer.pid
logfile = $BOUNCER_DIR/pgbouncer.log
auth_type = trust
auth_file = $BOUNCER_DIR/userlist.txt
pool_mode = transaction
default_pool_size = 3
min_pool_size = 3
server_round_robin = 1
max_client_conn = 100
INI
printf '"%s" ""\n' postgres consumer >"$BOUNCER_DIR/userlist.txt"
[[ $(id -u) == 0 ]] && chown -R postgres: "$BOUNCER_DIR"
_as_db_user /usr/sbin/pgbouncer -d "$BOUNCER_DIR/pgbouncer.ini" || {
    cat "$BOUNCER_DIR/pgbouncer.log"
    exit 1
}
b() { q -h 127.0.0.1 -p "$BOUNCER_PORT" "$@"; } # psql through PgBouncer
pooled_dsn() { echo "host=127.0.0.1 port=$BOUNCER_PORT dbname=postgres user=$1 application_name=$2"; }
direct_dsn() { echo "host=$PGHOST port=$PGPORT dbname=postgres user=$1 application_name=$2"; }
bouncer_answers() {
    local deadline=$((SECONDS + 10))
    while ((SECONDS < deadline)); do
        [[ $(b -c "SELECT 1") == 1 ]] && return 0
        sleep 0.2
    done
    cat "$BOUNCER_DIR/pgbouncer.log" >&2
    return 1
}
check "PgBouncer answers" bouncer_answers

# 1. Four clients, each one psql session through PgBouncer, each statement
# its own transaction but for the explicit ones.  A round of a client
# writes 16 outbox rows: 5 inserts, 5 updates, 2 deletes, 2 inserts in one
# transaction, 2 by COPY; an insert and an update rolled back write none.
client_script() { # client
    local c=$1 r base
    for r in 1 2 3 4 5; do
        base=$((c * 1000 + r * 10))
        cat <<SQL
INSERT INTO items (id, shard) SELECT $base + g, $c FROM generate_series(0, 4) g;
UPDATE items SET seq = $r, writer = pg_backend_pid() WHERE id BETWEEN $base AND $base + 4;
DELETE FROM items WHERE id IN ($base + 3, $base + 4);
BEGIN;
INSERT INTO items (id, shard) VALUES ($base + 9, $c);
UPDATE items SET seq = -1 WHERE id = $base;
ROLLBACK;
BEGIN;
INSERT INTO items (id, shard, seq) VALUES ($base + 5, $c, $r);
INSERT INTO items (id, shard, seq) VALUES ($base + 6, $c, $r);
COMMIT;
COPY items (id, shard, seq) FROM STDIN;
$((base + 7))	$c	$r
$((base + 8))	$c	$r
\.
SQL
    done
}
writers=()
for c in 1 2 3 4; do
    client_script $c | b >"$logs/writer$c.out" &
    writers+=($!)
done
status=0
for w in "${writers[@]}"; do wait "$w" || status=1; done
check "four clients wrote through PgBouncer without an error" \
    [ "$status$(cat "$logs"/writer*.out)" = 0 ]
check "every write is captured: 320 outbox rows" \
    [ "$(q -c "SELECT count(*) FROM outbox.cell_outbox WHERE category = 0")" = 320 ]
check "one outbox row per write of each object (rows:objects 1:80 2:60 3:40)" \
    [ "$(q -c "SELECT string_agg(k || ':' || n, ' ' ORDER BY k) FROM (SELECT k, count(*) n
               FROM (SELECT count(*) k FROM outbox.cell_outbox WHERE category = 0
                     GROUP BY object_identifier) o GROUP BY k) s")" = "1:80 2:60 3:40" ]
check "nothing of the rolled-back transactions" \
    [ "$(q -c "SELECT count(*) FROM outbox.cell_outbox WHERE category = 0
               AND (object_identifier % 10 = 9 OR payload->>'seq' = '-1')")" = 0 ]
check "the newest outbox row of each of the 140 items carries its values" \
    [ "$(q -c "SELECT count(*) FROM items i JOIN LATERAL (SELECT payload FROM outbox.cell_outbox o
               WHERE o.category = 0 AND o.object_identifier = i.id ORDER BY o.id DESC LIMIT 1) o
               ON o.payload->>'seq' = i.seq::text AND o.payload->>'writer' = i.writer::text")" = 140 ]
writer_backends=$(q -c "SELECT count(DISTINCT payload->>'writer') FROM outbox.cell_outbox WHERE category = 0")
check "the writes ran on $writer_backends server backends" [ "$writer_backends" -ge 2 ]

# 2. The shipped consumer, --no-listen, through PgBouncer: idle, it claims
# every 5 s (its default poll); a change written meanwhile waits for the
# next claim.  Three changes, 0.5, 2.5 and 4.5 s after the last delivery
# (after which it claims once more and sleeps), so that each falls at
# another point of the poll cycle.
OUTBOX_DSN="$(pooled_dsn consumer poller)" "$PYTHON" "$root/consumer/outbox_consumer.py" \
    --no-listen org_update >"$logs/poller.out" 2>"$logs/poller.err" &
poller=$!
pids+=("$poller")
server_log=$CLUSTER_DIR/server.log
wait_log() { # SECONDS COMMAND...: until COMMAND succeeds
    local deadline=$((SECONDS + $1))
    shift
    while ((SECONDS < deadline)); do
        "$@" && return 0
        sleep 0.05
    done
    return 1
}
check "the poller claims" wait_log 10 grep -q "poller: LOG:  statement: SELECT outbox.claim_json" "$server_log"
latencies=() slowest=0 poller_started=$SECONDS
for i in 1 2 3; do
    sleep $((i * 2 - 2)).5
    start=$EPOCHREALTIME
    b -c "INSERT INTO orgs (id, seq) VALUES (500 + $i, 1)" >/dev/null
    if wait_log 10 grep -q "\"object_identifier\": $((500 + i))," "$logs/poller.out"; then
        ms=$(((${EPOCHREALTIME/./} - ${start/./}) / 1000))
    else
        ms=99999
    fi
    latencies+=("$ms ms")
    ((ms > slowest)) && slowest=$ms
done
poller_claims=$(grep -c "poller: LOG:  statement: SELECT outbox.claim_json" "$server_log")
# Once every poll while idle, and once more after each delivery.
most_claims=$(((SECONDS - poller_started) / 5 + 2 + 2 * 3))
check "each change written while it idled is delivered within 5 s + 1 s: ${latencies[*]}" \
    [ "$slowest" -le 6000 ]
check "it claimed at the pace of its poll: $poller_claims claims in $((SECONDS - poller_started)) s" \
    [ "$poller_claims" -le "$most_claims" ]
check "it never sent LISTEN" [ "$(grep -c "poller: LOG:  statement: LISTEN" "$server_log")" = 0 ]
poller_backends=$(grep "poller: LOG:  statement: SELECT outbox.claim_json" "$server_log" |
    sed -E 's/.*\[([0-9]+)\].*/\1/' | sort -u | wc -l)
check "its claims ran on $poller_backends server backends" [ "$poller_backends" -ge 2 ]
kill -TERM $poller
wait $poller 2>/dev/null
check "SIGTERM: it stops cleanly" [ "$(cat "$logs/poller.err")" = "" ]
pids=()

# 3. Two consumers through PgBouncer on org_update, one connected directly
# on org_direct; a writer through PgBouncer changes 40 organisations 15
# times, orgs and orgs_direct in one transaction.
consumer() { # name dsn [VAR=value ...]: starts consumer_process.py, its pid in $!
    local name=$1 dsn=$2
    shift 2
    env NAME="$name" OUTBOX_DSN="$dsn" RECORD_DSN="$(direct_dsn postgres recorder)" "$@" \
        "$PYTHON" "$root/test/harness/consumer_process.py" >"$logs/$name.out" 2>"$logs/$name.err" &
    pids+=($!)
}
consumer one "$(pooled_dsn consumer one)" CATEGORIES=org_update DELAY=0.005 BATCH=20 POLL=0.5
consumer two "$(pooled_dsn consumer two)" CATEGORIES=org_update DELAY=0.005 BATCH=20 POLL=0.5
consumer direct "$(direct_dsn direct direct)" CATEGORIES=org_direct DELAY=0.005 BATCH=20 POLL=0.5
# Both pooled consumers must be claiming before the writer starts: one that
# is still starting (Python's imports take seconds on a loaded machine) would
# find the other had taken every change (CI on PostgreSQL 17 saw that once).
for _ in $(seq 1 300); do
    grep -q "one: LOG:  statement: SELECT outbox.claim_json" "$server_log" &&
        grep -q "two: LOG:  statement: SELECT outbox.claim_json" "$server_log" && break
    sleep 0.1
done
for seq in $(seq 1 15); do
    b >/dev/null <<SQL
BEGIN;
INSERT INTO orgs (id, seq) SELECT g, $seq FROM generate_series(1, 40) g
    ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, written_at = clock_timestamp();
INSERT INTO orgs_direct (id, seq) SELECT g, $seq FROM generate_series(1, 40) g
    ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, written_at = clock_timestamp();
COMMIT;
SQL
    sleep 0.1
done
pooled="consumer IN ('one', 'two') AND shard BETWEEN 1 AND 40"
check "through PgBouncer, every organisation's last change is delivered" wait_for 60 \
    "SELECT count(*) FROM (SELECT shard FROM delivered WHERE $pooled GROUP BY shard HAVING max(seq) = 15) s" 40
check "directly, too" wait_for 60 \
    "SELECT count(*) FROM (SELECT shard FROM delivered WHERE consumer = 'direct' GROUP BY shard HAVING max(seq) = 15) s" 40
check "the outbox of both categories is drained" wait_for 30 \
    "SELECT count(*) FROM outbox.cell_outbox WHERE category IN (1, 2)" 0
check "both consumers through PgBouncer delivered" \
    [ "$(q -c "SELECT string_agg(DISTINCT consumer, ',' ORDER BY consumer) FROM delivered WHERE $pooled")" = "one,two" ]
check "through PgBouncer, per shard in order, none twice" \
    [ "$(q -c "SELECT count(*) FROM (SELECT seq <= lag(seq) OVER (PARTITION BY shard ORDER BY n) AS bad
               FROM delivered WHERE $pooled) s WHERE bad")" = 0 ]
check "no shard was handled by both at once" \
    [ "$(q -c "SELECT count(*) FROM delivered a JOIN delivered b ON a.shard = b.shard AND a.n < b.n
               AND a.consumer <> b.consumer AND b.started < a.finished AND a.started < b.finished
               WHERE a.consumer IN ('one', 'two') AND b.consumer IN ('one', 'two')")" = 0 ]
messages=$(q -c "SELECT count(*) FILTER (WHERE $pooled) || ' messages through PgBouncer, '
                        || count(*) FILTER (WHERE consumer = 'direct') || ' directly' FROM delivered")
check "the same last change of each organisation both ways, as in the tables ($messages)" \
    [ "$(q -c "SELECT count(*) FROM orgs o JOIN orgs_direct d USING (id)
               JOIN (SELECT shard, max(seq) s FROM delivered WHERE $pooled GROUP BY shard) p ON p.shard = o.id
               JOIN (SELECT shard, max(seq) s FROM delivered WHERE consumer = 'direct' GROUP BY shard) x
                 ON x.shard = o.id
               WHERE o.seq = p.s AND d.seq = x.s AND p.s = x.s")" = 40 ]
claim_backends=$(q -c "SELECT count(DISTINCT pid) FROM claim_backends WHERE op = 'claim' AND consumer = 'consumer'")
check "claims through PgBouncer ran on $claim_backends server backends" [ "$claim_backends" -ge 2 ]
elsewhere=$(q -c "SELECT count(*) FILTER (WHERE c.pid <> e.pid) || ' of ' || count(*)
                  FROM claim_backends c JOIN claim_backends e ON e.claim = c.claim AND e.op = 'end'
                  WHERE c.op = 'claim' AND c.consumer = 'consumer' AND c.shard BETWEEN 1 AND 40")
check "claims completed on another backend than the claim's: $elsewhere" \
    [ "${elsewhere%% *}" -ge 1 ]
check "every claim ended, none left" \
    [ "$(q -c "SELECT count(*) + (SELECT count(*) FROM outbox.consumer_claims WHERE NOT released)
               FROM claim_backends c
               WHERE c.op = 'claim' AND NOT EXISTS
               (SELECT FROM claim_backends e WHERE e.claim = c.claim AND e.op = 'end')")" = 0 ]
check "the direct consumer's claims all ended on their own backend" \
    [ "$(q -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE c.pid = e.pid)
               FROM claim_backends c JOIN claim_backends e ON e.claim = c.claim AND e.op = 'end'
               WHERE c.op = 'claim' AND c.consumer = 'direct'" | awk '{print ($1 > 0 && $1 == $2)}')" = 1 ]
check "the consumers through PgBouncer sent LISTEN (consumer_process.py's default)" \
    grep -q "one: LOG:  statement: LISTEN pg_outbox" "$server_log"
kill -TERM "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
check "SIGTERM: all three stop cleanly" [ "$(cat "$logs/one.err" "$logs/two.err" "$logs/direct.err")" = "" ]
pids=()

# Failures through PgBouncer: the shard backs off (2 s), the second failure
# moves the message to the dead letters (max_attempts 2), and the message
# behind it in the shard is delivered.  Shard 3002, claimed in the same
# batch, is completed at once (0.9.0's consumer completed the failed claim
# again with it, which refused the whole completion: 3002 waited for its
# lease, 30 s, and was delivered twice).
q -c "SELECT outbox.set_max_attempts('org_update', 2)" >/dev/null
consumer failing "$(pooled_dsn consumer failing)" CATEGORIES=org_update FAIL_OBJECTS=3000 POLL=0.2
b >/dev/null <<'SQL'
BEGIN;
INSERT INTO orgs (id, seq) VALUES (3000, 1), (3002, 1);
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 3000, 1, 3001, '{"seq": 1}');
COMMIT;
SQL
check "the failure backs the shard off, with the error in shard_depth" wait_for 10 \
    "SELECT state || ' ' || object_identifier || ' ' || last_error FROM outbox.shard_depth WHERE shard_identifier = 3000" \
    "backed_off 3000 RuntimeError('receiver refused object 3000')"
check "the message behind it waits" \
    [ "$(q -c "SELECT count(*) FROM delivered WHERE object = 3001")" = 0 ]
check "the other shard of the batch is completed at once" wait_for 5 \
    "SELECT count(*) FROM outbox.cell_outbox WHERE shard_identifier = 3002" 0
check "the second failure moves it to the dead letters" wait_for 30 \
    "SELECT object_identifier || ' ' || attempts FROM outbox.dead_letters" "3000 2"
check "and the shard goes on" wait_for 30 "SELECT count(*) FROM delivered WHERE object = 3001" 1
backoff=$(q -c "SELECT round(extract(epoch FROM (SELECT min(at) FROM claim_backends
                       WHERE shard = 3000 AND op = 'claim' AND at > f.at) - f.at)::numeric, 2)
                FROM (SELECT min(at) AS at FROM claim_backends WHERE shard = 3000 AND op = 'end') f")
check "the second attempt waited for the backoff (${backoff} s after the first failure)" \
    [ "$(q -c "SELECT coalesce($backoff >= 1.5, false)")" = t ]
kill -TERM "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
check "SIGTERM: it stops cleanly, no completion was refused" [ "$(cat "$logs/failing.err")" = "" ]
pids=()

# 4. Session state belongs to the server connection: a client's SET is
# seen by other clients' transactions there (and not by its own on other
# connections); SET LOCAL ends with its transaction.
setting="SELECT current_setting('outbox.metrics_top_shards')"
# Three server connections open first: min_pool_size opens them in
# PgBouncer's own time, and with one open all six clients saw the SET.
sleepers=()
for _ in 1 2 3; do
    b -c "SELECT pg_sleep(0.5)" >/dev/null &
    sleepers+=($!)
done
wait "${sleepers[@]}"
b -c "SET outbox.metrics_top_shards = 7" >/dev/null
seen=$(for _ in 1 2 3 4 5 6; do b -c "$setting"; done)
check "a client's SET shows up in $(grep -c '^7$' <<<"$seen") of 6 other clients' transactions, not all" \
    [ "$(sort -u <<<"$seen" | tr '\n' ' ')" = "20 7 " ]
check "SET LOCAL holds for its transaction" \
    [ "$(printf '%s\n' 'BEGIN;' 'SET LOCAL outbox.metrics_top_shards = 9;' "$setting;" 'COMMIT;' | b)" = 9 ]
check "and is gone after it" \
    [ "$(for _ in 1 2 3 4 5 6; do b -c "$setting"; done | grep -c '^9$')" = 0 ]

checks_done pgbouncer
