-- Relocation, part 2 (SPEC section 12): an organization exported from one
-- database (ri_src, with its control ri_src_control) and imported into
-- another (ri_dst, with its control ri_dst_control) with new keys, in
-- chunks, then compared; the manifest and the schema checked before
-- anything is written; collisions; cancel; the six roles.  The export
-- travels through a file, as between clusters.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP DATABASE IF EXISTS ri_src;
DROP DATABASE IF EXISTS ri_dst;
DROP DATABASE IF EXISTS ri_bad;
DROP DATABASE IF EXISTS ri_src_control;
DROP DATABASE IF EXISTS ri_dst_control;
CREATE DATABASE ri_src;
ALTER DATABASE ri_src SET outbox.redis_key_prefix = 'ri_src:';
CREATE DATABASE ri_dst;
ALTER DATABASE ri_dst SET outbox.redis_key_prefix = 'ri_dst:';
CREATE DATABASE ri_bad;
ALTER DATABASE ri_bad SET outbox.redis_key_prefix = 'ri_bad:';
CREATE DATABASE ri_src_control;
ALTER DATABASE ri_src_control SET outbox.redis_key_prefix = 'ri_src_control:';
CREATE DATABASE ri_dst_control;
ALTER DATABASE ri_dst_control SET outbox.redis_key_prefix = 'ri_dst_control:';
DROP ROLE IF EXISTS ri_owner;
DROP ROLE IF EXISTS ri_app;
DROP ROLE IF EXISTS ri_monitor;
DROP ROLE IF EXISTS ri_consumer;
DROP ROLE IF EXISTS ri_link;
CREATE ROLE ri_owner;
CREATE ROLE ri_app;
CREATE ROLE ri_monitor IN ROLE pg_monitor;
CREATE ROLE ri_consumer;
CREATE ROLE ri_link;
RESET client_min_messages;
\set VERBOSITY terse
SELECT '/tmp/pg_outbox_relocation_import_' || current_setting('port') AS files \gset
\set org_file :files '_org.tsv'
\set users_file :files '_users.tsv'
\set map_file :files '_map.tsv'

-- Control: users, the User scope's root.
\c ri_src_control
SET client_min_messages = warning;
CREATE EXTENSION pg_outbox;
RESET client_min_messages;
CREATE TABLE users (id bigserial PRIMARY KEY, email text UNIQUE NOT NULL);
SELECT outbox.set_relocation_scope('users', '{User}');
SELECT outbox.set_relocation_root('User', 'users');
INSERT INTO users (email) SELECT 'user' || i || '@example.com' FROM generate_series(1, 6) i;
\c ri_dst_control
SET client_min_messages = warning;
CREATE EXTENSION pg_outbox;
RESET client_min_messages;
CREATE TABLE users (id bigserial PRIMARY KEY, email text UNIQUE NOT NULL);
SELECT outbox.set_relocation_scope('users', '{User}');
SELECT outbox.set_relocation_root('User', 'users');
-- The target's control has users of its own: the imported ones get new ids.
INSERT INTO users (email) SELECT 'local' || i || '@example.com' FROM generate_series(1, 100) i;

-- The cells: the same schema in ri_src, ri_dst and (one column off) ri_bad.
\c ri_src
SELECT $schema$
SET client_min_messages = warning;
CREATE EXTENSION pg_outbox;
RESET client_min_messages;
GRANT CREATE ON SCHEMA public TO ri_owner;
SELECT outbox.register_scope('Organization', 0);
SELECT outbox.register_category('org_update', 'Organization', 0);
SET ROLE ri_owner;
CREATE TABLE plan (id int PRIMARY KEY, name text);
CREATE TABLE organization (id bigserial PRIMARY KEY, slug text UNIQUE NOT NULL,
    plan_id int NOT NULL REFERENCES plan);
CREATE TABLE team (id bigserial PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES organization, name %s);
CREATE TABLE project (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES organization,
    team_id bigint REFERENCES team, parent_id bigint REFERENCES project, slug text NOT NULL,
    tags text[], config jsonb, created_at timestamptz NOT NULL DEFAULT '2026-01-01');
CREATE TABLE member (id bigserial PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES organization, user_id bigint NOT NULL);
CREATE INDEX ON member (user_id);
CREATE TABLE dashboard (id bigserial PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES organization, default_widget_id bigint);
CREATE TABLE widget (id bigserial PRIMARY KEY,
    dashboard_id bigint NOT NULL REFERENCES dashboard, title text);
ALTER TABLE dashboard ADD FOREIGN KEY (default_widget_id) REFERENCES widget;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ri_app;
RESET ROLE;
SELECT outbox.register_cell('us');
SELECT outbox.register_table('organization', 'org_update', 'cell', shard_column => 'id');
-- control's users, as this monolith knows them: the parent of member.user_id.
SELECT outbox.register_scope('User', 1);
SELECT outbox.register_category('user_update', 'User', 1);
CREATE TABLE user_replica (id bigint PRIMARY KEY);
SELECT outbox.register_table('user_replica', 'user_update', 'control', shard_column => 'id',
                             table_key => 'users', relocation_scope => 'Excluded');
SELECT outbox.register_foreign_key('member', 'user_id', 'users', 'CASCADE');
SELECT outbox.set_relocation_scope(t, '{Organization}')
  FROM unnest('{organization,team,project,member,dashboard,widget}'::regclass[]) t;
SELECT outbox.set_relocation_scope('plan', '{Global}');
SELECT outbox.set_relocation_root('Organization', 'organization');
INSERT INTO plan VALUES (1, 'free'), (2, 'business');
$schema$ AS template \gset
SELECT format(:'template', 'text') AS schema_sql, format(:'template', 'integer') AS bad_schema_sql \gset
\o /dev/null
:schema_sql
\o
-- Two organizations; references only within each.
INSERT INTO organization (slug, plan_id) VALUES ('acme', 2), ('globex', 1);
INSERT INTO team (organization_id, name) SELECT 1 + i % 2, 'team ' || i FROM generate_series(1, 10) i;
INSERT INTO project (organization_id, team_id, slug, tags, config)
SELECT 1 + i % 2, CASE WHEN i % 3 <> 0 THEN 2 * (i % 5) + 2 - i % 2 END, 'p' || i,
       ARRAY['t' || i, 'x'], jsonb_build_object('n', i, 'deep', jsonb_build_array(i, 'a'))
  FROM generate_series(1, 40) i;
UPDATE project SET parent_id = id - 2 WHERE id > 2 AND id % 3 = 0;
INSERT INTO member (organization_id, user_id) SELECT 1 + i % 2, 1 + i % 6 FROM generate_series(1, 12) i;
INSERT INTO dashboard (organization_id) SELECT 1 + i % 2 FROM generate_series(1, 6) i;
INSERT INTO widget (dashboard_id, title) SELECT 1 + i % 6, 'w' || i FROM generate_series(1, 18) i;
UPDATE dashboard SET default_widget_id = id + 5 WHERE id % 3 <> 0;
SELECT * FROM outbox.check_models();

-- The export of acme, with a uuid of the operator's choosing, into a file.
SELECT fields->'tables' AS tables, fields->'deferred' AS deferred,
       fields->'cross_silo' AS cross_silo, fields->'columns'->'project' AS project_columns
  FROM outbox.export_organizations('{1}') WHERE model = 'pg_outbox.manifest';
COPY (SELECT 'aaaaaaaa-0000-0000-0000-000000000001', e.* FROM outbox.export_organizations('{1}') e)
  TO :'org_file';

-- Its members' users, exported from the source's control, imported into
-- the target's control, whose map goes to the target cell.
\c ri_src_control
COPY (SELECT 'bbbbbbbb-0000-0000-0000-000000000001', e.*
        FROM outbox.export_users('{2,3,4,5,6,1}') e) TO :'users_file';
\c ri_dst_control
COPY outbox.relocation_rows FROM :'users_file';
CALL outbox.import_users('bbbbbbbb-0000-0000-0000-000000000001');
SELECT table_key, old, new FROM outbox.relocation_pk_map ORDER BY old;
SELECT count(*) FROM users WHERE email LIKE 'user%';
CALL outbox.import_organizations('bbbbbbbb-0000-0000-0000-000000000001');
COPY (SELECT * FROM outbox.relocation_pk_map) TO :'map_file';

-- A target whose team.name is an integer: refused before anything is
-- written, naming the table and the column.
\c ri_bad
\o /dev/null
:bad_schema_sql
\o
COPY outbox.relocation_rows FROM :'org_file';
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
SELECT count(*) AS relocations FROM outbox.relocation_state;
SELECT (SELECT count(*) FROM organization) AS organizations, (SELECT count(*) FROM team) AS teams;
ALTER TABLE team ALTER COLUMN name TYPE text;
ALTER TABLE project DROP COLUMN tags;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
ALTER TABLE project ADD COLUMN tags text[];
ALTER TABLE member ADD COLUMN role text NOT NULL;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
ALTER TABLE member DROP COLUMN role;
-- The staged export checked against its manifest: a row missing, a row
-- edited, the manifest missing.
DELETE FROM outbox.relocation_rows WHERE ordinal = 5;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
DELETE FROM outbox.relocation_rows;
COPY outbox.relocation_rows FROM :'org_file';
UPDATE outbox.relocation_rows SET fields = fields || '{"slug": "evil"}' WHERE model = 'organization';
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
DELETE FROM outbox.relocation_rows WHERE model = 'pg_outbox.manifest';
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000009');
SELECT count(*) AS relocations FROM outbox.relocation_state;
SELECT (SELECT count(*) FROM organization) AS organizations, (SELECT count(*) FROM team) AS teams;
-- A users' map that lacks a member's user: the member's chunk fails, naming
-- the row; cancel removes what the chunks before it wrote.
DELETE FROM outbox.relocation_rows;
COPY outbox.relocation_rows FROM :'org_file';
COPY outbox.relocation_pk_map FROM :'map_file';
DELETE FROM outbox.relocation_pk_map WHERE old = 3;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001',
                                 'bbbbbbbb-0000-0000-0000-000000000001');
SELECT state, step, rows_done FROM outbox.relocations;
SELECT (SELECT count(*) FROM organization) AS organizations, (SELECT count(*) FROM dashboard) AS dashboards,
       (SELECT count(*) FROM member) AS members;
SELECT outbox.cancel_relocation('aaaaaaaa-0000-0000-0000-000000000001');
SELECT (SELECT count(*) FROM organization) AS organizations, (SELECT count(*) FROM dashboard) AS dashboards,
       (SELECT count(*) FROM member) AS members;

-- The target: rows of its own already (acme's slug taken), an application
-- trigger that records who it runs as, the users' map from its control.
\c ri_dst
\o /dev/null
:schema_sql
\o
INSERT INTO organization (slug, plan_id) VALUES ('acme', 1), ('initech', 1);
INSERT INTO team (organization_id, name) VALUES (2, 'local team');
CREATE TABLE trigger_runs (role name, superuser boolean, n int);
GRANT INSERT ON trigger_runs TO ri_owner;
CREATE FUNCTION note_role() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.trigger_runs
    SELECT current_user, rolsuper, 1 FROM pg_catalog.pg_roles WHERE rolname = current_user;
    RETURN NEW;
END $$;
ALTER FUNCTION note_role() OWNER TO ri_owner;
CREATE TRIGGER note_role BEFORE INSERT ON widget FOR EACH ROW EXECUTE FUNCTION note_role();
COPY outbox.relocation_rows FROM :'org_file';
COPY outbox.relocation_pk_map FROM :'map_file';

-- Who may import, compare, cancel, set a hook: the application, a
-- monitor, a consumer and a link role none of it; the table's owner only
-- its own table's hook; pg_monitor reads the state, not the rows.
SELECT outbox.grant_category('org_update', 'ri_consumer', 'CONSUME');
SET ROLE ri_app;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
SELECT outbox.compare_relocation('aaaaaaaa-0000-0000-0000-000000000001');
SELECT outbox.cancel_relocation('aaaaaaaa-0000-0000-0000-000000000001');
SELECT outbox.set_relocation_collision_hook('organization', 'pg_catalog.jsonb_concat(jsonb,jsonb)');
SELECT count(*) FROM outbox.relocations;
SELECT count(*) FROM outbox.relocation_rows;
SET ROLE ri_monitor;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
SELECT count(*) FROM outbox.relocations;
SELECT count(*) FROM outbox.relocation_rows;
SELECT count(*) FROM outbox.relocation_pk_map;
SET ROLE ri_consumer;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
SET ROLE ri_link;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
SELECT outbox._run_as_table_owner('organization', 'SELECT to_jsonb(1)', '{}');
SET ROLE ri_owner;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
SELECT outbox._run_as_table_owner('organization', 'SELECT to_jsonb(1)', '{}');
RESET ROLE;
-- A statement of another kind than a SELECT is a bad argument (the fuzzer
-- found an empty one raising an internal error).
SELECT outbox._run_as_table_owner('organization', '', '{}');
SELECT outbox._run_as_table_owner('organization', 'DELETE FROM public.organization WHERE false', '{}');

-- Chunks of 4 rows.  acme's slug collides and there is no hook: the chunk
-- fails whole, naming the table, the key and the row; the state says so.
SET outbox.relocation_chunk_rows = 0;
SET outbox.relocation_chunk_rows = 4;
\set VERBOSITY default
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001',
                                 'bbbbbbbb-0000-0000-0000-000000000001');
\set VERBOSITY terse
SELECT state, step, rows_done, rows_total, error FROM outbox.relocations;
SELECT count(*) AS chunks, (SELECT count(*) FROM outbox.relocation_pk_map
                             WHERE relocation = 'aaaaaaaa-0000-0000-0000-000000000001') AS mapped
  FROM outbox.import_chunks;
SELECT count(*) AS organizations FROM organization;
-- A failed import is not under way: it cannot be paused.
SELECT outbox.pause_relocation('aaaaaaaa-0000-0000-0000-000000000001');

-- The owner registers a hook; what it does runs as the owner, restricted:
-- it cannot become anyone else.
CREATE FUNCTION renamed_slug(relocation uuid, fields jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        RAISE EXCEPTION 'the hook ran as superuser %', current_user;
    END IF;
    RETURN fields || pg_catalog.jsonb_build_object('slug', (fields->>'slug') || '-relocated');
END $$;
ALTER FUNCTION renamed_slug(uuid, jsonb) OWNER TO ri_owner;
CREATE FUNCTION escalating_slug(relocation uuid, fields jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    SET ROLE postgres;
    RETURN fields;
END $$;
ALTER FUNCTION escalating_slug(uuid, jsonb) OWNER TO ri_owner;
CREATE FUNCTION wrong_hook(relocation uuid) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb';
SET ROLE ri_owner;
SELECT outbox.set_relocation_collision_hook('organization', 'wrong_hook(uuid)');
SELECT outbox.set_relocation_collision_hook('organization', 'escalating_slug(uuid,jsonb)');
SELECT outbox.set_relocation_collision_hook('trigger_runs', 'renamed_slug(uuid,jsonb)');
RESET ROLE;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001',
                                 'bbbbbbbb-0000-0000-0000-000000000001');
SELECT current_user, state FROM outbox.relocations;
-- Resumed with the wrong users' map, or none: refused.
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001');
SET ROLE ri_owner;
SELECT outbox.set_relocation_collision_hook('organization', 'renamed_slug(uuid,jsonb)');
RESET ROLE;
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001',
                                 'bbbbbbbb-0000-0000-0000-000000000001');
SELECT state, step, rows_done, rows_total, error, findings FROM outbox.relocations;
SELECT step, table_key, count(*) AS chunks, sum(rows_written) AS rows_written,
       min(first_ordinal) AS first, max(last_ordinal) AS last
  FROM outbox.import_chunks GROUP BY 1, 2 ORDER BY 5, 1;
-- Nothing to pause, or more to do.
SELECT outbox.pause_relocation('aaaaaaaa-0000-0000-0000-000000000001');
SELECT outbox.pause_relocation(NULL);
-- Again: nothing more to do.
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001',
                                 'bbbbbbbb-0000-0000-0000-000000000001');
SELECT count(*) AS chunks FROM outbox.import_chunks;

SELECT new AS org FROM outbox.relocation_pk_map
 WHERE relocation = 'aaaaaaaa-0000-0000-0000-000000000001' AND table_key = 'organization' \gset
-- New keys from the target's sequences; every reference rewritten; the
-- users' ids through control's map; the hook's slug; the trigger as owner.
SELECT o.id, o.slug, o.plan_id FROM organization o ORDER BY o.id;
SELECT count(*) AS projects, count(*) FILTER (WHERE p.parent_id IS NOT NULL) AS with_parent,
       count(*) FILTER (WHERE p.team_id IS NOT NULL) AS with_team,
       bool_and(t.organization_id = p.organization_id) AS teams_of_the_organization,
       bool_and(q.organization_id = p.organization_id) AS parents_of_the_organization
  FROM project p LEFT JOIN team t ON t.id = p.team_id LEFT JOIN project q ON q.id = p.parent_id
 WHERE p.organization_id = :org;
SELECT m.user_id, u.new IS NOT NULL AS mapped FROM member m
  LEFT JOIN outbox.relocation_pk_map u ON u.relocation = 'bbbbbbbb-0000-0000-0000-000000000001'
                                      AND u.new = m.user_id
 ORDER BY m.id;
SELECT d.id, d.default_widget_id, w.dashboard_id = d.id AS own_widget
  FROM dashboard d LEFT JOIN widget w ON w.id = d.default_widget_id ORDER BY d.id;
SELECT role, superuser, sum(n) FROM trigger_runs GROUP BY 1, 2;
-- Capture fired: the new organization is in the outbox.
SELECT object_identifier, category FROM outbox.cell_outbox ORDER BY id;

-- The compare: none, so complete.
SELECT * FROM outbox.compare_relocation('aaaaaaaa-0000-0000-0000-000000000001');
SELECT state, findings FROM outbox.relocations;
-- A field changed since, and a row added: found, with the table and the
-- column.
UPDATE project SET slug = 'changed' WHERE id = (SELECT min(id) FROM project WHERE organization_id = :org);
INSERT INTO team (organization_id, name) VALUES (:org, 'added');
SELECT table_key, finding, column_name, expected, actual
  FROM outbox.compare_relocation('aaaaaaaa-0000-0000-0000-000000000001');
SELECT state, findings FROM outbox.relocations;
-- metrics() reports the relocations, and the rows of those not finished.
SELECT line FROM regexp_split_to_table(outbox.metrics(), E'\n') AS line
 WHERE line LIKE 'pg_outbox_relocation%' ORDER BY 1;
DELETE FROM team WHERE name = 'added';
-- The same counts and the same values, on other keys or other rows: a
-- member's key moved (missing and extra), two members' users swapped (a
-- field each).  The compare's sums bind each row's values to its key.
UPDATE project SET slug = 'p2' WHERE slug = 'changed';
SELECT max(id) AS moved FROM member WHERE organization_id = :org \gset
UPDATE member SET id = id + 1000 WHERE id = :moved;
CREATE TEMP TABLE swapped AS
SELECT id, user_id FROM member WHERE organization_id = :org AND id <> :moved + 1000 ORDER BY id LIMIT 2;
UPDATE member m SET user_id = (SELECT s.user_id FROM swapped s WHERE s.id <> m.id)
 WHERE m.id IN (SELECT id FROM swapped);
SELECT (SELECT count(DISTINCT user_id) FROM swapped) AS users_swapped;
SELECT table_key, pk - :moved AS pk_from_moved, finding, column_name
  FROM outbox.compare_relocation('aaaaaaaa-0000-0000-0000-000000000001');
-- All put back: nothing found.
UPDATE member m SET user_id = s.user_id FROM swapped s WHERE s.id = m.id;
UPDATE member SET id = :moved WHERE id = :moved + 1000;
SELECT * FROM outbox.compare_relocation('aaaaaaaa-0000-0000-0000-000000000001');
SELECT state, findings FROM outbox.relocations;

-- Cancel: what the import wrote goes, as the owner, in reverse order;
-- what was here before stays.
SELECT outbox.cancel_relocation('aaaaaaaa-0000-0000-0000-000000000001');
SELECT state FROM outbox.relocations;
SELECT (SELECT count(*) FROM organization) AS organizations, (SELECT count(*) FROM team) AS teams,
       (SELECT count(*) FROM project) AS projects, (SELECT count(*) FROM widget) AS widgets;
SELECT outbox.cancel_relocation('aaaaaaaa-0000-0000-0000-000000000001');
CALL outbox.import_organizations('aaaaaaaa-0000-0000-0000-000000000001',
                                 'bbbbbbbb-0000-0000-0000-000000000001');
SELECT * FROM outbox.compare_relocation('aaaaaaaa-0000-0000-0000-000000000001');
-- Bad arguments.
CALL outbox.import_organizations(NULL);
SELECT outbox.compare_relocation(NULL);
SELECT outbox.cancel_relocation('aaaaaaaa-0000-0000-0000-00000000000f');
SELECT outbox.set_relocation_collision_hook(NULL, NULL);
-- A dropped table takes its hook with it.
SELECT relid, hook FROM outbox.relocation_collision_hooks;
DROP TABLE organization CASCADE;
SELECT count(*) AS hooks FROM outbox.relocation_collision_hooks;

-- The compare of the users' relocation re-exports them with export_users:
-- nothing found; then a changed email, found.
\c ri_dst_control
SELECT * FROM outbox.compare_relocation('bbbbbbbb-0000-0000-0000-000000000001');
UPDATE users SET email = 'changed@example.com' WHERE email = 'user2@example.com';
SELECT table_key, finding, column_name
  FROM outbox.compare_relocation('bbbbbbbb-0000-0000-0000-000000000001');

\c regression
SET client_min_messages = warning;
DROP DATABASE ri_src;
DROP DATABASE ri_dst;
DROP DATABASE ri_bad;
DROP DATABASE ri_src_control;
DROP DATABASE ri_dst_control;
DROP ROLE ri_owner;
DROP ROLE ri_app;
DROP ROLE ri_monitor;
DROP ROLE ri_consumer;
DROP ROLE ri_link;
