#!/usr/bin/env bash
# Separate clusters, the demo: builds and installs pg_outbox, starts one
# control and two cells ("us", "eu") as three throwaway PostgreSQL clusters
# on this machine, linked through postgres_fdw servers (test/harness/cells.sh shows
# the whole setup); then a control table's change reaches both cells, a
# cell's change reaches control, a deleted user cascades into both cells
# through tombstones, and the monitoring views show the traffic.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/test/harness/cells.sh"
trap cells_stop EXIT
echo "== building and installing pg_outbox"
install_extension "$root"
cells_start
cells_setup
for name in "${CELL_NAMES[@]}"; do
    echo "== $name: PostgreSQL on port ${CELL_PORT[$name]} ($(on "$name" -c 'SHOW outbox.silo_mode'))"
done
run() { # NAME SQL: runs the statement, shows it
    echo "-- on $1:"
    echo "$2"
    on "$1" -c "$2" >/dev/null
}
view() { psql -X -h "${CELL_DIR[$1]}" -p "${CELL_PORT[$1]}" -U postgres -d postgres -c "$2"; }

echo
echo "== How control reaches the cells, and a cell reaches control"
view control "SELECT name AS cell, server FROM outbox.cells"
view control "SELECT srvname, srvoptions FROM pg_foreign_server"
view us "SELECT * FROM outbox.control_link"

echo "== A control table's change reaches the right cells"
run control "INSERT INTO auth_user VALUES (1, 'ada'), (2, 'grace'), (3, 'linus')"
run control "UPDATE auth_user SET name = 'ada lovelace' WHERE id = 1"
sleep 2
view us "SELECT category, object AS user_id, payload, cell FROM applied ORDER BY n"
view eu "SELECT category, object AS user_id, payload, cell FROM applied ORDER BY n"

echo "== A cell's change reaches control"
# Control takes a cell's message only for an organization it places there.
run control "SELECT outbox.set_organization_cell(10, 'us'), outbox.set_organization_cell(20, 'eu')"
run us "INSERT INTO organization VALUES (10, 'acme (us)')"
run eu "INSERT INTO organization VALUES (20, 'globex (eu)')"
sleep 2
view control "SELECT category, object AS organization_id, payload FROM applied ORDER BY n"

echo "== A deleted user cascades into both cells through tombstones"
run us "INSERT INTO member VALUES (100, 2, 10), (101, 3, 10)"
run eu "INSERT INTO member VALUES (200, 2, 20), (201, 1, 20)"
run control "DELETE FROM auth_user WHERE id = 2"
for _ in $(seq 50); do
    [[ $(on us -c "SELECT count(*) FROM member WHERE user_id = 2") == 0 &&
        $(on eu -c "SELECT count(*) FROM member WHERE user_id = 2") == 0 ]] && break
    sleep 0.2
done
view us "SELECT table_name, object_identifier FROM outbox.cell_tombstone"
view us "SELECT * FROM member ORDER BY id"
view eu "SELECT * FROM member ORDER BY id"

echo "== The traffic, as the monitoring views show it"
view control "SELECT destination, server, messages_sent, recovered, failures, last_sent_at FROM outbox.link_status ORDER BY 1"
view us "SELECT origin, count(*) AS unacknowledged_batches, sum(messages) AS messages, max(received_at) FROM outbox.inbox GROUP BY 1"
view us "SELECT destination, messages_sent, failures FROM outbox.link_status"
view us "SELECT category_name, delivered, processed, lag_p50 FROM outbox.stats WHERE delivered > 0"
echo "== A cell that is down: its messages wait, visibly; the other cell goes on"
cell_stop eu
run control "INSERT INTO auth_user VALUES (4, 'barbara')"
sleep 3
view control "SELECT cell_name, depth, state FROM outbox.shard_depth"
view control "SELECT destination, failures, left(last_error, 60) AS last_error, next_attempt_at > now() AS backing_off FROM outbox.link_status ORDER BY 1"
cell_start eu
for _ in $(seq 100); do
    [[ $(on eu -c "SELECT count(*) FROM applied WHERE object = 4") == 1 ]] && break
    sleep 0.2
done
view eu "SELECT category, object AS user_id, payload FROM applied WHERE object = 4"
echo "== done: stopping the three clusters"
