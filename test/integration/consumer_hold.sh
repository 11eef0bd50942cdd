#!/usr/bin/env bash
# How long a consumer's claims may keep a shard from the others (issue 47):
# a CONSUME role that claims again the moment its lease ends, or gives each
# claim back and claims again at once, while the same shard holds messages
# of another category that the worker's handler takes.  Each of those must
# reach the handler within outbox.max_lease plus one drain pass (here 3 s
# plus a naptime of 200 ms: checked against 5 s), and the claimer must still
# get its shard back (it is not starved either).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/consumer_cluster.sh" "outbox.naptime = 200" "outbox.database_name = postgres" \
    "outbox.max_lease = 3"

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
SELECT outbox.register_category('user_update', 'Org', 1);
CREATE TABLE orgs (id bigint PRIMARY KEY, seq int NOT NULL DEFAULT 0);
SELECT outbox.register_table('orgs', 'org_update', 'cell', shard_column => 'id');
CREATE TABLE users (id bigint PRIMARY KEY, org_id bigint NOT NULL,
                    written_at timestamptz NOT NULL DEFAULT clock_timestamp());
SELECT outbox.register_table('users', 'user_update', 'cell', shard_column => 'org_id');
CREATE TABLE delivered (object bigint, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION by_worker(m outbox.message) RETURNS void LANGUAGE sql AS
  'INSERT INTO delivered (object) VALUES (m.object_identifier)';
SELECT outbox.register_handler('user_update', 'by_worker(outbox.message)');
CREATE ROLE holder LOGIN;
SELECT outbox.grant_category('org_update', 'holder', 'CONSUME');
SQL

# The claimer: claims in a loop for SECONDS, one transaction a call; with
# giveback, gives each claim back at once (complete with through 0), with
# keep, 2.5 s into its 3-second lease.  Prints how many of its calls came
# back with messages.
claimer() { # mode seconds
    "$PYTHON" - "$1" "$2" "$(dsn holder)" <<'PY'
import sys, time, psycopg2
mode, seconds, dsn = sys.argv[1], float(sys.argv[2]), sys.argv[3]
conn = psycopg2.connect(dsn)
conn.autocommit = True
cur = conn.cursor()
end, held = time.time() + seconds, 0
while time.time() < end:
    cur.execute("SELECT claim FROM outbox.claim(100, '3 s')")
    tokens = sorted({r[0] for r in cur.fetchall()})
    if tokens:
        held += 1
        if mode in ("giveback", "keep"):
            if mode == "keep":
                time.sleep(2.5)
            cur.execute("SELECT outbox.complete(%s::bigint[], %s::int[])",
                        (tokens, [0] * len(tokens)))
    time.sleep(0.001)
print(held)
PY
}

# One round: the claimer holds organisation 1's shard (its org_update
# message is never completed, so it is always due), and every 2 s a user of
# organisation 1 changes; each change must reach by_worker within 5 s, and
# the claimer must get its shard again at least MIN_CLAIMS times.
round() { # mode base min_claims description
    local mode=$1 base=$2
    q -c "INSERT INTO orgs VALUES (1) ON CONFLICT (id) DO UPDATE SET seq = orgs.seq + 1" >/dev/null
    claimer "$mode" 16 >"$CLUSTER_DIR/claims.$mode" &
    pids+=($!)
    local claimer_pid=$!
    sleep 1
    for i in 1 2 3 4 5 6; do
        q -c "INSERT INTO users (id, org_id) VALUES ($base + $i, 1)" >/dev/null
        sleep 2
    done
    wait "$claimer_pid"
    sleep 6 # the last change's bound, with the claimer gone
    local waits delivered longest claims
    waits=$(q -c "SELECT count(d.object) || ' ' || coalesce(round(extract(epoch FROM
                         max(d.at - u.written_at))::numeric, 2), -1)
                  FROM users u LEFT JOIN delivered d ON d.object = u.id WHERE u.id > $base")
    delivered=${waits%% *} longest=${waits##* } claims=$(cat "$CLUSTER_DIR/claims.$mode")
    echo "  $mode: $delivered of 6 changes delivered, the longest wait $longest s;" \
        "the claimer held the shard $claims times"
    check "$4: each of the 6 handler messages in its shard is delivered" test "$delivered" = 6
    check "... within max_lease (3 s) and a drain pass (bound checked: 5 s)" \
        awk -v w="$longest" 'BEGIN { exit !(w >= 0 && w < 5) }'
    check "... and the claimer got its shard again ($3 times or more in 16 s)" \
        test "$claims" -ge "$3"
}

round lapse 0 3 "a claimer that claims again as its lease ends"
round giveback 100 10 "a claimer that gives each claim back and claims again at once"
round keep 200 3 "a claimer that keeps each claim 2.5 s, gives it back and claims again at once"

# A claim that ended is forgotten by the worker once max_lease has passed
# since its end: one of 1 s, left to lapse.
q -c "INSERT INTO orgs VALUES (1) ON CONFLICT (id) DO UPDATE SET seq = orgs.seq + 1" >/dev/null
q -c "SET ROLE holder" -c "SELECT count(*) FROM outbox.claim(100, '1 s')" >/dev/null
sleep 1.5
check "a lapsed claim's row stays for max_lease (3 s)" \
    test "$(q -c "SELECT count(*) FROM outbox.consumer_claims WHERE lease_until < now()")" = 1
check "... then the worker forgets it" wait_for 15 "SELECT count(*) FROM outbox.consumer_claims" 0

# When a claim the role gave back is the role's again (docs/consumers.md,
# "Turns"), where the worker cannot take its turn: claims organisation 1's
# shard (once it may), gives it back, and claims every 5 ms until it has it
# again.
# Prints the tries it took and the seconds since the give-back.
reclaim() {
    "$PYTHON" - "$(dsn holder)" <<'PY'
import sys, time, psycopg2
conn = psycopg2.connect(sys.argv[1])
conn.autocommit = True
cur = conn.cursor()
def claim():
    cur.execute("SELECT DISTINCT claim FROM outbox.claim(100, '3 s') WHERE shard_identifier = 1")
    return [r[0] for r in cur.fetchall()]
def give_back(tokens):
    cur.execute("SELECT outbox.complete(%s::bigint[], %s::int[])", (tokens, [0] * len(tokens)))
deadline = time.time() + 10  # the turn of the round before may not be back yet
tokens = claim()
while not tokens and time.time() < deadline:
    time.sleep(0.05)
    tokens = claim()
if not tokens:
    sys.exit("organisation 1's shard is not due")
give_back(tokens)
ended, tries = time.time(), 0
while time.time() < ended + 10:
    tries += 1
    tokens = claim()
    if tokens:
        give_back(tokens)
        print(tries, round(time.time() - ended, 2))
        sys.exit()
    time.sleep(0.005)
print(0, -1)
PY
}
set_worker() { # setting value: set, and seen by new sessions
    q -c "ALTER SYSTEM SET $1 = $2" -c "SELECT pg_reload_conf()" >/dev/null
    wait_for 10 "SELECT setting FROM pg_settings WHERE name = '$1'" "$2" >/dev/null
}
set_worker outbox.worker_enabled off
read -r tries took < <(reclaim)
check "no worker here: the same role has its shard again a naptime (0.2 s) after giving it back, not before ($took s)" \
    awk -v t="$took" 'BEGIN { exit !(t >= 0.15 && t < 2) }'
set_worker outbox.naptime 60000
read -r tries took < <(reclaim)
check "... and at most outbox.max_lease (3 s) after, however long the naptime ($took s)" \
    awk -v t="$took" 'BEGIN { exit !(t >= 2.9 && t < 5) }'
q -c "SELECT outbox.unregister_handler('user_update')" >/dev/null
read -r tries took < <(reclaim)
check "nobody else to deliver anything (no handler, no other CONSUME role): at once ($tries tries, $took s)" \
    test "$tries" = 1
checks_done consumer_hold
