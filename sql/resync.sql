-- Targeted re-sync (issue 49, first step): a table's rows by ids or by an
-- id range sent again as ordinary messages, without a version bump, a
-- batch at a time through outbox.process_resync_batch.
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SET outbox.cursor_store = 'table';
SELECT set_config('outbox.redis_key_prefix', 'regress:' || txid_current() || ':', false) <> '' AS prefixed;
CREATE SCHEMA resync;
SET search_path = resync, public;
\set SHOW_CONTEXT never
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 10);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 11);
CREATE TABLE org (id bigint PRIMARY KEY, slug text NOT NULL);
CREATE TABLE member (id int PRIMARY KEY, organization_id bigint NOT NULL, name text);
SELECT outbox.register_table('org', 'ORGANIZATION_UPDATE', payload_columns => '{slug}');
SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id',
                             payload_columns => '{name}');
INSERT INTO org SELECT g, 'org-' || g FROM generate_series(1, 10) g;
INSERT INTO member SELECT g, g % 3, 'm' || g FROM generate_series(1, 20) g;
UPDATE org SET slug = 'renamed' WHERE id = 4;
TRUNCATE outbox.cell_outbox;
CREATE VIEW cell_rows AS
SELECT shard_identifier AS shard, category AS cat, object_identifier AS object, payload
  FROM outbox.cell_outbox ORDER BY id;

-- Ids: each row among them that exists, once, with its current payload
-- (99 does not exist; 4 is named twice).
SELECT outbox.resync('org', '{7, 4, 99, 4, 2}') AS job \gset
SELECT target, filter, state, rows_total, rows_done, rows_left, shards, outbox_rows
  FROM outbox.resyncs WHERE job = :job;
SELECT outbox.process_resync_batch(:job, 2) AS written;
SELECT * FROM cell_rows;
SELECT lower_bound, version FROM outbox.cursors WHERE table_key = 'resync.' || :job;
SELECT outbox.process_resync_batch(:job, 2) AS written;
SELECT * FROM cell_rows;
SELECT state, rows_done, rows_left, outbox_rows, finished_at IS NOT NULL AS finished
  FROM outbox.resyncs WHERE job = :job;
SELECT count(*) AS rows_kept FROM outbox.resync_rows WHERE job = :job;
SELECT count(*) AS cursors_kept FROM outbox.cursors WHERE table_key = 'resync.' || :job;
SELECT outbox.process_resync_batch(:job, 2) IS NULL AS nothing_left;
-- No version bump, and no backfill cursor.
SELECT replication_version FROM outbox.tables WHERE table_key = 'org';
SELECT count(*) AS backfill_cursors FROM outbox.cursors WHERE table_key = 'org';

-- Ids without a gap, read as their range (src/resync/resync_job.hpp): those
-- rows and not their neighbours 1 and 5.
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync('org', '{4, 2, 3}') AS job \gset
SELECT outbox.process_resync_batch(:job, 10) AS written;
SELECT object FROM cell_rows;

-- The largest batch_size takes what is left: ids with a gap (read by
-- position) in a batch of 2147483647 (the fuzzer: its arrays' size
-- overflowed, XX000 "invalid memory alloc request size").
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync('org', '{5, 1}') AS job \gset
SELECT outbox.process_resync_batch(:job, 2147483647) AS written;
SELECT object FROM cell_rows;
SELECT outbox.resync('org', 2, 3) AS job \gset
SELECT outbox.process_resync_batch(:job, 2147483647) AS written;

-- A job whose rows went (deleted by hand) fails naming the first position
-- missing, rather than send what is left or stay running for ever, each
-- batch writing none and moving by none: 300 ids with gaps, a byte each
-- in one chunk (src/resync/id_chunks.hpp), deleted after a batch of 100.
SELECT outbox.resync('org', ARRAY(SELECT generate_series(1, 600, 2)::bigint)) AS job \gset
SELECT count(*) AS chunks FROM outbox.resync_rows WHERE job = :job;
SELECT outbox.process_resync_batch(:job, 100) AS written;
DELETE FROM outbox.resync_rows WHERE job = :job AND first = 0;
SELECT outbox.process_resync_batch(:job, 100) AS written;
SELECT state, rows_done, last_error FROM outbox.resyncs WHERE job = :job;
SELECT outbox.cancel_resync(:job);

-- Ids far apart take more bytes each, so more chunks (2^40 apart: six
-- bytes, 316 ids a chunk), and batches read across them: of 1,003 ids, the
-- rows 2 and 4 are written, by the second batch (positions 400 to 799).
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync('org', ARRAY(SELECT g * 1099511627776 FROM generate_series(-500, 500) g)
                            || '{2, 4}'::bigint[]) AS job \gset
SELECT count(*) AS chunks, max(length(ids)) AS most_bytes
  FROM outbox.resync_rows WHERE job = :job;
SELECT outbox.process_resync_batch(:job, 400) AS written FROM generate_series(1, 3);
SELECT object FROM cell_rows;
SELECT state, rows_done, rows_total FROM outbox.resyncs WHERE job = :job;

-- A chunk that is not varints (written by hand) fails the batch, naming it.
SELECT outbox.resync('org', '{1, 2, 3}') AS job \gset
UPDATE outbox.resync_rows SET ids = '\x80' WHERE job = :job;
SELECT outbox.process_resync_batch(:job, 100) AS written;
SELECT outbox.cancel_resync(:job);

-- A range, in batches of 3, of a table sharded by organization_id.
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync('member', 5, 11) AS job \gset
SELECT outbox.process_resync_batch(:job, 3) AS written FROM generate_series(1, 4);
SELECT shard, object, payload FROM cell_rows;
SELECT target, filter, state, rows_total, rows_done, shards, outbox_rows
  FROM outbox.resyncs WHERE job = :job;

-- A shard: the rows of member with organization_id 1, by id, in batches of
-- 3; a shard of another scope is refused.
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync_shard('member', 0, 1) AS job \gset
SELECT outbox.process_resync_batch(:job, 3) AS written FROM generate_series(1, 3);
SELECT shard, object, payload FROM cell_rows;
SELECT target, filter, state, rows_total, rows_done, shards, outbox_rows
  FROM outbox.resyncs WHERE job = :job;
SELECT outbox.resync_shard('member', 5, 1);
SELECT outbox.resync_shard('member', 0, NULL);

-- Dry runs: the same numbers, and no job, row or cursor left behind.
SELECT count(*) AS jobs_before FROM outbox.resync_jobs \gset
SELECT * FROM outbox.plan_resync('member', 5, 11);
SELECT * FROM outbox.plan_resync('org', '{1, 2, 3, 404}');
SELECT * FROM outbox.plan_resync_shard('member', 0, 2);
SELECT count(*) - :jobs_before AS jobs_added FROM outbox.resync_jobs;
SELECT * FROM outbox.plan_resync('org', 5, 1);

-- A rolled-back batch leaves no outbox row and no cursor.
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync('org', 1, 10) AS job \gset
BEGIN;
SELECT outbox.process_resync_batch(:job, 4) AS written;
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM outbox.cell_outbox;
SELECT count(*) AS cursors_after_rollback FROM outbox.cursors WHERE table_key = 'resync.' || :job;
SELECT outbox_rows FROM outbox.resyncs WHERE job = :job;
-- Pause, resume, cancel.
SELECT outbox.pause_resync(:job);
SELECT outbox.process_resync_batch(:job, 4) IS NULL AS paused_writes_nothing;
SELECT outbox.pause_resync(:job);
SELECT outbox.resume_resync(:job);
SELECT outbox.process_resync_batch(:job, 4) AS written;
-- The ETA is of the time the job ran: an hour paused is not in it.
SELECT outbox.pause_resync(:job);
UPDATE outbox.resync_jobs SET created_at = created_at - interval '1 hour',
                              paused_at = paused_at - interval '1 hour' WHERE id = :job;
SELECT outbox.resume_resync(:job);
SELECT eta < interval '10 minutes' AS eta_without_the_pause FROM outbox.resyncs WHERE job = :job;
-- Nor an hour failed (as a failed batch leaves it: finished_at set).
UPDATE outbox.resync_jobs SET state = 'failed', finished_at = now() - interval '1 hour',
                              created_at = created_at - interval '1 hour' WHERE id = :job;
SELECT outbox.resume_resync(:job);
SELECT eta < interval '10 minutes' AS eta_without_the_failure FROM outbox.resyncs WHERE job = :job;
SELECT count(*) AS cursors_before_cancel FROM outbox.cursors WHERE table_key = 'resync.' || :job;
SELECT outbox.cancel_resync(:job);
SELECT count(*) AS cursors_after_cancel FROM outbox.cursors WHERE table_key = 'resync.' || :job;
SELECT outbox.process_resync_batch(:job, 4) IS NULL AS cancelled_writes_nothing;
SELECT state, outbox_rows, finished_at IS NOT NULL AS finished FROM outbox.resyncs WHERE job = :job;
SELECT outbox.resume_resync(:job);
SELECT outbox.cancel_resync(12345);

-- The table unregistered meanwhile: the job fails, saying so.
SELECT outbox.resync('member', '{1}') AS job \gset
SELECT outbox.unregister_table('member');
SELECT outbox.process_resync_batch(:job, 10) AS written;
SELECT state, last_error LIKE 'table with OID % is no longer registered' AS says_so
  FROM outbox.resyncs WHERE job = :job;
-- Registered again, the failed job resumes where it failed.
SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id',
                             payload_columns => '{name}');
SELECT outbox.process_resync_batch(:job, 10) IS NULL AS failed_writes_nothing;
SELECT outbox.resume_resync(:job);
TRUNCATE outbox.cell_outbox;
SELECT outbox.process_resync_batch(:job, 10) AS written;
SELECT shard, object, payload FROM cell_rows;
SELECT state, last_error, rows_done FROM outbox.resyncs WHERE job = :job;
SELECT outbox.unregister_table('member');

-- Redis as the cursor store: the same, and no row in outbox.cursors.
SET outbox.cursor_store = 'redis';
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync('org', '{3, 5}') AS job \gset
SELECT outbox.process_resync_batch(:job, 1) AS written;
SELECT outbox.process_resync_batch(:job, 1) AS written;
SELECT outbox.process_resync_batch(:job, 1) IS NULL AS done;
SELECT object, payload FROM cell_rows;
SELECT count(*) AS table_cursors FROM outbox.cursors WHERE table_key = 'resync.' || :job;
RESET outbox.cursor_store;

-- An organization: every registered table of the Organization relocation
-- scope, its rows that belong to the organization, parents first.
CREATE TABLE project (id bigint PRIMARY KEY, organization_id bigint NOT NULL REFERENCES org,
                      name text);
CREATE TABLE note (id bigint PRIMARY KEY, project_id bigint NOT NULL REFERENCES project,
                   body text);
SELECT outbox.register_table('project', 'ORGANIZATION_UPDATE', shard_column => 'organization_id',
                             payload_columns => '{name}');
SELECT outbox.register_table('note', 'MEMBER_UPDATE', payload_columns => '{body}');
INSERT INTO project SELECT g, CASE WHEN g IN (1, 2, 5) THEN 4 ELSE 7 END, 'p' || g
  FROM generate_series(1, 6) g;
INSERT INTO note VALUES (1, 1, 'n1'), (2, 3, 'n2'), (3, 5, 'n3'), (4, 2, 'n4');
SELECT outbox.set_relocation_scope('org', '{Organization}');
SELECT outbox.set_relocation_root('Organization', 'org');
SELECT outbox.set_relocation_scope('project', '{Organization}');
-- note has no relocation scope: whose its rows are is unknown.
SELECT outbox.resync_organization(4);
SELECT outbox.set_relocation_scope('note', '{Organization}');
TRUNCATE outbox.cell_outbox;
SELECT * FROM outbox.plan_resync_organization(4);
SELECT outbox.resync_organization(4) AS job \gset
SELECT outbox.process_resync_batch(:job, 4) AS written FROM generate_series(1, 2);
SELECT shard, cat, object, payload FROM cell_rows;
SELECT target, filter, state, rows_total, rows_done, shards, outbox_rows
  FROM outbox.resyncs WHERE job = :job;
SELECT outbox.resync_organization(404);
-- A table of the scope that is not registered, and that no registered
-- table refers to through the scope, is not read: none of its rows is
-- sent, and its text key (which an export refuses) does not stop the
-- re-sync.  A registered table that refers to it keeps it in the walk.
CREATE TABLE org_label (code text PRIMARY KEY, org_id bigint NOT NULL REFERENCES org);
INSERT INTO org_label VALUES ('a', 4), ('b', 4);
SELECT outbox.set_relocation_scope('org_label', '{Organization}');
SELECT "rows", shards, tables FROM outbox.plan_resync_organization(4);
CREATE TABLE label_use (id bigint PRIMARY KEY, label text NOT NULL REFERENCES org_label);
SELECT outbox.register_table('label_use', 'MEMBER_UPDATE');
SELECT outbox.set_relocation_scope('label_use', '{Organization}');
SELECT outbox.resync_organization(4);
DROP TABLE label_use, org_label;
-- An organization that is moving is refused, naming the move.
INSERT INTO outbox.organization_moves (relocation, organization, side, from_cell, to_cell, step)
VALUES ('00000000-0000-0000-0000-000000000007', 7, 'source', 'cell-a', 'cell-b', 'copy');
SELECT outbox.resync_organization(7);
DELETE FROM outbox.organization_moves;

-- A table owner's code (here a partial index whose predicate the planner
-- folds) runs as that owner, restricted, when a re-sync finds or reads the
-- rows of its table: never as the superuser who started the job.
CREATE ROLE resync_owner;
SELECT outbox.grant_category('ORGANIZATION_UPDATE', 'resync_owner');
CREATE SCHEMA resync_own AUTHORIZATION resync_owner;
GRANT USAGE ON SCHEMA resync TO resync_owner;
GRANT REFERENCES ON org TO resync_owner;
SET ROLE resync_owner;
CREATE TABLE resync_own.seen (who name, super boolean);
CREATE FUNCTION resync_own.spy() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resync_own.seen SELECT current_user, rolsuper FROM pg_roles
     WHERE rolname = current_user;
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE resync_owner SUPERUSER';
    END IF;
END $$;
CREATE FUNCTION resync_own.f(int) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
    $$ BEGIN PERFORM resync_own.spy(); RETURN true; END $$;
CREATE TABLE resync_own.gadget (id bigint PRIMARY KEY, org_id bigint NOT NULL REFERENCES org);
INSERT INTO resync_own.gadget SELECT g, 4 FROM generate_series(1, 5) g;
CREATE INDEX ON resync_own.gadget (org_id) WHERE resync_own.f(1);
CREATE INDEX ON resync_own.gadget (id) WHERE resync_own.f(1);
SELECT outbox.register_table('resync_own.gadget', 'ORGANIZATION_UPDATE', shard_column => 'org_id');
SELECT outbox.set_relocation_scope('resync_own.gadget', '{Organization}');
TRUNCATE resync_own.seen;
RESET ROLE;
SELECT outbox.resync_organization(4) AS job \gset
SELECT outbox.process_resync_batch(:job, 100) AS written;
SELECT outbox.resync('resync_own.gadget', 1, 100) AS job \gset
SELECT outbox.process_resync_batch(:job, 100) AS written;
SELECT outbox.resync_shard('resync_own.gadget', 0, 4) AS job \gset
SELECT outbox.process_resync_batch(:job, 100) AS written;
SELECT who, super, count(*) > 0 AS ran FROM resync_own.seen GROUP BY who, super;
SELECT rolsuper FROM pg_roles WHERE rolname = 'resync_owner';
DROP SCHEMA resync_own CASCADE;
SELECT outbox.revoke_category('ORGANIZATION_UPDATE', 'resync_owner');
REVOKE ALL ON org FROM resync_owner;
REVOKE ALL ON SCHEMA resync FROM resync_owner;
DROP ROLE resync_owner;

-- Bad input: each refused, naming the argument.
SELECT outbox.resync(NULL, '{1}');
SELECT outbox.resync('org', NULL::bigint[]);
SELECT outbox.resync('org', '{}');
SELECT outbox.resync('org', '{1,NULL}');
SELECT outbox.resync('org', ARRAY(SELECT generate_series(1, 1000001)::bigint));
SELECT outbox.resync('pg_class', '{1}');
SELECT outbox.resync('org', 5, 1);
SELECT outbox.resync('org', NULL, 1);
SELECT outbox.process_resync_batch(NULL, 1);
SELECT outbox.process_resync_batch(1, 0);
SELECT outbox.resync_organization(NULL);
SELECT outbox.process_resync_batch(123456, 1);
SELECT count(*) AS jobs FROM outbox.resyncs;

-- Roles: an application role may neither start a re-sync nor read the
-- jobs; a pg_monitor member reads them.
CREATE ROLE resync_app;
CREATE ROLE resync_monitor IN ROLE pg_monitor;
GRANT USAGE ON SCHEMA resync TO resync_app;
SET ROLE resync_app;
SELECT outbox.resync('org', '{1}');
SELECT outbox.process_resync_batch(1, 1);
SELECT count(*) FROM outbox.resyncs;
SELECT outbox.resync_organization(4);
SELECT outbox.cancel_resync(1);
RESET ROLE;
SET ROLE resync_monitor;
SELECT count(*) > 0 AS jobs_seen FROM outbox.resyncs;
SELECT outbox.pause_resync(1);
RESET ROLE;
-- A CONSUME role (of the category a re-sync writes) and a link role (what
-- a peer's link role is granted) are refused every part of it too: start,
-- dry run, batch, pause, cancel, the view and the tables behind it.
CREATE ROLE resync_consumer;
SELECT outbox.grant_category('ORGANIZATION_UPDATE', 'resync_consumer', 'CONSUME');
CREATE ROLE resync_link;
GRANT EXECUTE ON FUNCTION outbox.receive, outbox.received TO resync_link;
CREATE FUNCTION pg_temp.refused(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'accepted: ' || statement;
EXCEPTION WHEN insufficient_privilege THEN
    RETURN NULL;
END $$;
CREATE TEMP TABLE attempts (statement text);
INSERT INTO attempts VALUES
    ($$SELECT outbox.resync('org', '{1}')$$), ($$SELECT outbox.resync('org', 1, 2)$$),
    ($$SELECT outbox.resync_shard('member', 0, 1)$$), ($$SELECT outbox.resync_organization(4)$$),
    ($$SELECT outbox.plan_resync('org', '{1}')$$), ($$SELECT outbox.process_resync_batch(1, 1)$$),
    ($$SELECT outbox.pause_resync(1)$$), ($$SELECT outbox.resume_resync(1)$$),
    ($$SELECT outbox.cancel_resync(1)$$), ($$SELECT count(*) FROM outbox.resyncs$$),
    ($$SELECT count(*) FROM outbox.resync_jobs$$), ($$SELECT count(*) FROM outbox.resync_rows$$),
    ($$UPDATE outbox.resync_jobs SET state = 'cancelled'$$);
GRANT SELECT ON attempts TO resync_consumer, resync_link, resync_monitor;
GRANT USAGE ON SCHEMA resync TO resync_consumer, resync_link, resync_monitor;
SET ROLE resync_consumer;
SELECT count(*) AS attempts, coalesce(string_agg(pg_temp.refused(statement), '; '), 'none') AS accepted FROM attempts;
RESET ROLE;
SET ROLE resync_link;
SELECT count(*) AS attempts, coalesce(string_agg(pg_temp.refused(statement), '; '), 'none') AS accepted FROM attempts;
RESET ROLE;
-- The same as a pg_monitor member: the view only.
SET ROLE resync_monitor;
SELECT count(*) AS attempts, coalesce(string_agg(pg_temp.refused(statement), '; '), 'none') AS accepted FROM attempts;
RESET ROLE;
SELECT outbox.revoke_category('ORGANIZATION_UPDATE', 'resync_consumer', 'CONSUME');
DROP TABLE attempts;
REVOKE USAGE ON SCHEMA resync FROM resync_consumer, resync_link, resync_monitor;
DROP ROLE resync_consumer;
REVOKE EXECUTE ON FUNCTION outbox.receive, outbox.received FROM resync_link;
DROP ROLE resync_link;
-- A role granted EXECUTE on outbox.resync starts a job without owning
-- anything: the function runs as the extension's owner.
GRANT EXECUTE ON FUNCTION outbox.resync(regclass, bigint[]) TO resync_app;
SET ROLE resync_app;
SELECT outbox.resync('org', '{1}') AS job \gset
RESET ROLE;
SELECT target, filter, state, created_by FROM outbox.resyncs WHERE job = :job;
REVOKE EXECUTE ON FUNCTION outbox.resync(regclass, bigint[]) FROM resync_app;
DROP SCHEMA resync CASCADE;
DROP ROLE resync_app;
DROP ROLE resync_monitor;
