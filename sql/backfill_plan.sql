-- outbox.plan_backfill (issue 16): the plan of a backfill before its gate
-- opens, checked against what the backfill then writes: exactly with the
-- exact method; within 15% with a sample of half the pages.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SET outbox.cursor_store = 'table';
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('member_update', 'Org', 0);
SELECT outbox.register_category('user_update', 'Org', 1);
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('eu');
-- A hot organisation: 3,000 of 10,000 members in org 7, the rest spread
-- over 100 orgs.
CREATE TABLE member (id bigint PRIMARY KEY, org_id bigint NOT NULL, name text);
INSERT INTO member SELECT g, CASE WHEN g % 10 < 3 THEN 7 ELSE 100 + g % 100 END, 'm' || g
  FROM generate_series(1, 10000) g;
SELECT outbox.register_table('member', 'member_update', 'cell', shard_column => 'org_id',
                             replication_version => 2);
SELECT * FROM outbox.plan_backfill('member');
-- At 999 ids a minute (batches of 1,000 ids), 10 batches, 10 minutes; and
-- outbox.backfill_status counts down the same way once the gate is open.
ALTER SYSTEM SET outbox.backfill_rate_per_minute = 999;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SELECT batches, eta_at_budget FROM outbox.plan_backfill('member');
-- The backfill, run to the end: the same rows, shards and hottest shards.
SELECT outbox.set_option('outbox_replication.member.replication_version', '2');
SELECT state, eta_at_budget FROM outbox.backfill_status WHERE table_key = 'member';
SELECT count FROM outbox.process_backfill_batch('member', 999, false);
SELECT state, eta_at_budget FROM outbox.backfill_status WHERE table_key = 'member';
ALTER SYSTEM RESET outbox.backfill_rate_per_minute;
SELECT pg_reload_conf();
DO $$ BEGIN
    WHILE (outbox.process_backfill_batch('member', 1000, false)).has_more LOOP END LOOP;
END $$;
WITH plan AS (SELECT * FROM outbox.plan_backfill('member')),
     written AS (SELECT shard_identifier, count(*) AS n FROM outbox.cell_outbox GROUP BY 1)
SELECT plan.rows = (SELECT sum(n) FROM written) AS rows_match,
       plan.shards = (SELECT count(*) FROM written) AS shards_match,
       plan.hottest_shards = (SELECT jsonb_agg(jsonb_build_object('shard_identifier', h.shard_identifier, 'rows', h.n)
                                               ORDER BY h.n DESC, h.shard_identifier)
                                FROM (SELECT * FROM written ORDER BY n DESC, shard_identifier LIMIT 10) h)
           AS hottest_match
  FROM plan;
SELECT state, eta_at_budget FROM outbox.backfill_status WHERE table_key = 'member';
-- A sample of half the pages: within 15% of the exact figures.
SELECT method, abs(rows - 10000) <= 1500 AS rows_within_15_percent,
       abs((hottest_shards->0->>'rows')::bigint - 3000) <= 450 AS hottest_within_15_percent,
       (hottest_shards->0->>'shard_identifier')::bigint AS hottest_shard
  FROM outbox.plan_backfill('member', 50);

-- A control table without a cell column: each row for each target cell.
CREATE TABLE app_user (id bigint PRIMARY KEY);
INSERT INTO app_user SELECT generate_series(1, 50);
SELECT outbox.register_table('app_user', 'user_update', 'control');
SELECT method, rows, shards, hottest_shards->0 AS hottest, id_span
  FROM outbox.plan_backfill('app_user');
SELECT outbox.set_option('outbox_replication.app_user.backfill.target_cells', '["eu"]');
SELECT rows, shards FROM outbox.plan_backfill('app_user');

-- An empty table, bad arguments.
CREATE TABLE empty_org (id bigint PRIMARY KEY);
SELECT outbox.register_table('empty_org', 'member_update');
SELECT * FROM outbox.plan_backfill('empty_org');
SELECT * FROM outbox.plan_backfill(NULL);
SELECT * FROM outbox.plan_backfill('member', 0);
SELECT * FROM outbox.plan_backfill('member', 101);
CREATE TABLE unregistered (id bigint PRIMARY KEY);
SELECT * FROM outbox.plan_backfill('unregistered');

-- It reads the table as its owner, and only the extension's owner calls it.
CREATE ROLE plan_owner;
CREATE TABLE owned (id bigint PRIMARY KEY);
ALTER TABLE owned OWNER TO plan_owner;
SELECT outbox.register_table('owned', 'member_update');
REVOKE SELECT ON owned FROM plan_owner;
SELECT * FROM outbox.plan_backfill('owned');
SET ROLE plan_owner;
SELECT * FROM outbox.plan_backfill('owned');
RESET ROLE;
SELECT outbox.unregister_table('owned');
DROP TABLE owned;
DROP ROLE plan_owner;
SELECT outbox.unregister_table(t) FROM unnest('{member,app_user,empty_org}'::regclass[]) t;
DROP TABLE member, app_user, empty_org, unregistered;
