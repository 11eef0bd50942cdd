#!/usr/bin/env bash
# A hostile cell for a minute (issue 46): control and two cells
# (test/harness/cells.sh); cell eu is compromised.  Its link role on control
# sends arbitrary well-formed batches (test/integration/hostile_peer.py),
# and its outbox.received() answers control's worker with random batches
# (random tokens, row ids among control's own, receipts, message counts),
# while us and control go about their business.  Control's and us's data
# must end exactly as without the hostile peer, and nothing crashes.
#   HOSTILE_SEED=N HOSTILE_SECONDS=S bash test/integration/hostile_peer.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cells.sh"
trap cells_stop EXIT
source "$root/test/harness/check.sh"
cells_start || exit 1
cells_setup || { echo "setup failed"; exit 1; }
cells_place us 1 40
cells_place eu 1001 1040
on us -c "INSERT INTO organization SELECT g, 'us org ' || g FROM generate_series(1, 40) g"
on eu -c "INSERT INTO organization SELECT g, 'eu org ' || g FROM generate_series(1001, 1040) g"
check "the cells' organizations reach control" wait_on control 30 \
    "SELECT count(DISTINCT object) FROM applied WHERE category = 0" 80
# eu's answers to control's recovery: a few random batches, with row ids of
# control's outbox (us's rows among them) and random receipts.
on eu >/dev/null <<'SQL'
CREATE OR REPLACE FUNCTION outbox.received(protocol int, session bigint)
    RETURNS TABLE (batch bigint, row_ids bigint[], messages int, receipt text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO outbox.inbox_sessions AS s (origin, session) VALUES ('control', session)
        ON CONFLICT (origin) DO UPDATE SET session = excluded.session;
    RETURN QUERY
    SELECT (random() * 1e9)::bigint,
           ARRAY(SELECT (random() * 20000)::bigint FROM generate_series(1, 1 + (random() * 50)::int + g * 0)),
           (random() * 100)::int, md5(random()::text) || md5(random()::text)
      FROM generate_series(1, (random() * 3)::int) g;
END $$;
SQL
# Control's worker asks eu's recovery again and again: its connection drops.
on control -c "ALTER SYSTEM SET outbox.link_timeout = '2s'" -c "SELECT pg_reload_conf()" >/dev/null
dsn() { echo "host=${CELL_DIR[$1]} port=${CELL_PORT[$1]} dbname=postgres user=${2:-postgres}"; }
CONTROL=$(dsn control) US=$(dsn us) EU=$(dsn eu) HOSTILE=$(dsn control outbox_link_eu) \
    SEED=${HOSTILE_SEED:-46} SECONDS=${HOSTILE_SECONDS:-60} \
    /usr/bin/python3 "$root/test/integration/hostile_peer.py" # Debian's, with python3-psycopg2
rc=$?
check "the hostile peer's checks pass" [ $rc = 0 ]
check "no backend crashed" \
    [ "$(cat "${CELL_DIR[control]}/server.log" "${CELL_DIR[us]}/server.log" "${CELL_DIR[eu]}/server.log" | grep -c 'terminated by signal\|PANIC')" = 0 ]
checks_done hostile_peer
