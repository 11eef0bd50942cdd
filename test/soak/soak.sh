#!/usr/bin/env bash
# The whole system under random faults (issue 34), then an invariant check:
#   bash test/soak/soak.sh                       # 20 minutes, a random seed
#   SOAK_MINUTES=3 SOAK_SEED=42 bash test/soak/soak.sh
# Three clusters (control, us, eu: test/harness/move_cells.sh) and a Redis;
# test/soak/soak.py writes, moves organizations, pauses shards and injects
# faults on a schedule drawn from the seed, then lets everything drain and
# checks the invariants (its header says which).  The seed is printed
# first: the same seed gives the same schedule.  Ends with
# "N passed, M failed"; exits non-zero on a broken invariant.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
MOVE_ROOT=$root
source "$root/test/harness/move_cells.sh"
seed=${SOAK_SEED:-$((RANDOM * 32768 + RANDOM))}
minutes=${SOAK_MINUTES:-20}
echo "soak: seed $seed, $minutes minutes (SOAK_SEED=$seed SOAK_MINUTES=$minutes bash test/soak/soak.sh)"
# KEEP_CLUSTER=1 keeps the clusters' directories and logs.
trap move_cells_stop EXIT
redis_port=$(_free_port)
# The links' batches are kept a day (the check reads what each inbox took);
# the cells keep their backfill cursors in Redis, which the faults restart.
move_cells_setup "outbox.inbox_retention = '1d'" || exit 1
# One Redis, a key prefix per database: with the same prefix, the cells
# would share each cursor and watermark, and one cell's walk skip the
# other's tombstones (found by the soak, docs/guide.md).
for cell in us eu; do
    on "$cell" >/dev/null <<SQL || exit 1
ALTER SYSTEM SET outbox.cursor_store = 'redis';
ALTER SYSTEM SET outbox.redis_port = $redis_port;
ALTER SYSTEM SET outbox.redis_key_prefix = '$cell:';
SELECT pg_reload_conf();
SQL
done
# The handlers record each message's ids (applied's columns from cells.sh).
for name in control us eu; do
    on "$name" >/dev/null <<'SQL' || exit 1
ALTER TABLE applied ADD first_id bigint, ADD last_id bigint, ADD coalesced int;
CREATE OR REPLACE FUNCTION apply(m outbox.message) RETURNS void LANGUAGE sql AS $$
    INSERT INTO applied (category, object, payload, cell, first_id, last_id, coalesced)
    VALUES (m.category, m.object_identifier, m.payload, m.cell_name, m.first_id, m.last_id,
            m.coalesced) $$;
SELECT outbox.register_category('TEAM_UPDATE', 'Organization', 6);
SELECT outbox.register_category('EVENT_UPDATE', 'Organization', 8);
SELECT outbox.register_category('LABEL_UPDATE', 'Organization', 9);
SQL
done
for cell in us eu; do
    on "$cell" >/dev/null <<'SQL' || exit 1
SELECT outbox.register_table('team', 'TEAM_UPDATE', 'cell', shard_column => 'organization_id',
                             payload_columns => '{name}');
-- Events are sharded by their organization (control takes a cell's
-- message only for an organization that lives there: it knows which by the
-- shard, issue 46), filled in from the project as they are written.
ALTER TABLE event ADD COLUMN organization_id bigint;
CREATE FUNCTION event_organization() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.organization_id := (SELECT p.organization_id FROM public.project p WHERE p.id = NEW.project_id);
    RETURN NEW;
END $$;
CREATE TRIGGER event_organization BEFORE INSERT OR UPDATE OF project_id ON event
    FOR EACH ROW EXECUTE FUNCTION event_organization();
UPDATE event e SET organization_id = p.organization_id FROM project p WHERE p.id = e.project_id;
ALTER TABLE event ALTER organization_id SET NOT NULL;
SELECT outbox.register_table('event', 'EVENT_UPDATE', 'cell', shard_column => 'organization_id',
                             payload_columns => '{message}');
CREATE INDEX ON member (user_id);
SELECT outbox.register_foreign_key('member', 'user_id', 'auth_user', 'CASCADE');
-- Labels: written by COPY, upserts, updates, deletions and now and then a
-- TRUNCATE (soak.py's label writer); their consumer reads each label again
-- from the cells, as Sentry's handlers read the object a message names.
CREATE TABLE label (id bigserial PRIMARY KEY,
                    organization_id bigint NOT NULL REFERENCES organization, name text);
CREATE INDEX ON label (organization_id);
SELECT outbox.set_relocation_scope('label', '{Organization}');
SELECT outbox.register_table('label', 'LABEL_UPDATE', 'cell', shard_column => 'organization_id',
                             payload_columns => '{name}');
CREATE ROLE soak_reader LOGIN;
GRANT SELECT ON label TO soak_reader;
SQL
done
on control >/dev/null <<'SQL' || exit 1
-- Teams and events go to consumers outside (test/soak/consumer.py).
CREATE TABLE consumed (n bigserial, consumer text, category text, object bigint, payload jsonb,
                       cell text, first_id bigint, last_id bigint, claim bigint,
                       lease_until timestamptz, at timestamptz DEFAULT clock_timestamp());
CREATE ROLE soak_consumer LOGIN;
SELECT outbox.grant_category('TEAM_UPDATE', 'soak_consumer', 'CONSUME');
SELECT outbox.grant_category('EVENT_UPDATE', 'soak_consumer', 'CONSUME');
SELECT outbox.grant_category('LABEL_UPDATE', 'soak_consumer', 'CONSUME');
CREATE TABLE label_replica (id bigint PRIMARY KEY, organization_id bigint, name text);
SELECT outbox.register_handler('PROJECT_UPDATE', 'apply(outbox.message)')
 WHERE NOT EXISTS (SELECT FROM outbox.handlers WHERE category = 5);
INSERT INTO auth_user SELECT i, 'u' || i || '-v0' FROM generate_series(1, 200) i;
SQL
# A move keeps primary keys: each cell's labels from a range of its own.
on us -c "SELECT setval('label_id_seq', 1000000)" >/dev/null || exit 1
on eu -c "SELECT setval('label_id_seq', 6000000)" >/dev/null || exit 1
# Members of users 1 to 200 (the soak deletes odd users only, and adds
# members of even ones: a member written after its user's deletion was
# cascaded would be the application's orphan, not pg_outbox's).  No alert
# rule refers to a member: the cascade could not delete it (it fails,
# visibly, as the schema asks).
on us -c "UPDATE member SET user_id = 1 + id % 200" -c "UPDATE alert_rule SET owner_id = NULL" >/dev/null || exit 1
cat >>"$work/env" <<EOF
SOAK_SEED=$seed
SOAK_MINUTES=$minutes
REDIS_PORT=$redis_port
PG_BIN=$PG_BIN
WORK=$work
ROOT=$root
EOF
for name in control us eu; do
    echo "DIR_$name=${CELL_DIR[$name]}" >>"$work/env"
    echo "PORT_$name=${CELL_PORT[$name]}" >>"$work/env"
done
chmod 777 "$work"
(set -a; source "$work/env"; exec "$PYTHON" "$root/test/soak/soak.py")
