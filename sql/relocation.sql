-- Relocation, part 1 (SPEC section 12): scopes, the model check and the
-- export of an organization, in a database of its own so that the check
-- sees only these tables.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP DATABASE IF EXISTS relocation_test;
CREATE DATABASE relocation_test;
ALTER DATABASE relocation_test SET outbox.redis_key_prefix = 'relocation_test:';
\c relocation_test
SET client_min_messages = warning;
CREATE EXTENSION pg_outbox;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE rl_owner;
CREATE ROLE rl_app;
CREATE ROLE rl_monitor IN ROLE pg_monitor;
CREATE ROLE rl_consumer;
CREATE SCHEMA reloc AUTHORIZATION rl_owner;
GRANT CREATE ON SCHEMA public TO rl_owner;
GRANT USAGE ON SCHEMA reloc TO rl_app;

-- An organization of about ten tables (model keys: schema-qualified
-- outside public).  The control silo's users are registered here (a
-- monolith), referred to by a cross-silo reference.
SELECT outbox.register_scope('User', 0);
SELECT outbox.register_category('user_update', 'User', 0);
CREATE TABLE auth_user (id bigint PRIMARY KEY, email text NOT NULL);
SELECT outbox.register_cell('us');
SELECT outbox.register_table('auth_user', 'user_update', 'control', shard_column => 'id',
                             relocation_scope => 'User');
ALTER TABLE auth_user OWNER TO rl_owner;
SET ROLE rl_owner;
CREATE TABLE reloc.plan (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE rl_organization (id bigserial PRIMARY KEY, slug text UNIQUE NOT NULL,
    plan_id int NOT NULL REFERENCES reloc.plan);
CREATE TABLE reloc.team (id bigserial PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES rl_organization, name text);
CREATE TABLE reloc.project (id bigserial PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES rl_organization,
    team_id bigint REFERENCES reloc.team,             -- a nullable reference
    parent_id bigint REFERENCES reloc.project,        -- a self-reference
    slug text NOT NULL);
CREATE TABLE reloc.environment (id bigserial PRIMARY KEY,
    project_id bigint NOT NULL REFERENCES reloc.project, name text);
CREATE TABLE reloc.member (id bigserial PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES rl_organization,
    user_id bigint NOT NULL, actor_id bigint, role text);
CREATE INDEX ON reloc.member (user_id);
-- A cycle through a nullable column: a dashboard's default widget.
CREATE TABLE reloc.dashboard (id bigserial PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES rl_organization, default_widget_id bigint);
CREATE TABLE reloc.widget (id bigserial PRIMARY KEY,
    dashboard_id bigint NOT NULL REFERENCES reloc.dashboard, title text);
ALTER TABLE reloc.dashboard ADD FOREIGN KEY (default_widget_id) REFERENCES reloc.widget;
-- A partitioned table.
CREATE TABLE reloc.event (id bigint NOT NULL, project_id bigint NOT NULL REFERENCES reloc.project,
    message text, PRIMARY KEY (id)) PARTITION BY RANGE (id);
CREATE TABLE reloc.event_1 PARTITION OF reloc.event FOR VALUES FROM (0) TO (1000);
CREATE TABLE reloc.event_2 PARTITION OF reloc.event FOR VALUES FROM (1000) TO (MAXVALUE);
-- Rows decided one by one: an integration of one organization or of all.
CREATE TABLE reloc.integration (id bigserial PRIMARY KEY,
    organization_id bigint REFERENCES rl_organization, provider text);
CREATE FUNCTION reloc.integration_scope(i reloc.integration) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    -- The export calls it as the table's owner, never as a superuser.
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RAISE EXCEPTION 'integration_scope ran as superuser %', current_user;
    END IF;
    RETURN CASE WHEN i.organization_id IS NULL THEN 'Global' ELSE 'Organization' END;
END
$$;
CREATE TABLE reloc.audit_log (id bigserial PRIMARY KEY, organization_id bigint, event text);
RESET ROLE;
SELECT outbox.register_foreign_key('reloc.member', 'user_id', 'auth_user', 'CASCADE');

-- The model check before any scope: every table, and Sentry's rule that
-- each must have one.
SELECT relation, finding FROM outbox.check_models() ORDER BY 1::text, 2;

-- Scopes: bad input names the argument.
SELECT outbox.set_relocation_scope(NULL, '{Organization}');
SELECT outbox.set_relocation_scope('reloc.team', NULL);
SELECT outbox.set_relocation_scope('reloc.team', '{}');
SELECT outbox.set_relocation_scope('reloc.team', '{Tenant}');
SELECT outbox.set_relocation_scope('reloc.team', '{Organization,NULL}');
SELECT outbox.set_relocation_scope('reloc.team', '{Organization,Organization}');
SELECT outbox.set_relocation_scope('reloc.team', '{Excluded,Global}', 'reloc.integration_scope(reloc.integration)');
SELECT outbox.set_relocation_scope('reloc.team', '{Organization,Global}');
SELECT outbox.set_relocation_scope('reloc.team', '{Organization,Global}', 'reloc.integration_scope(reloc.integration)');
SELECT outbox.set_relocation_scope('reloc.team', '{Organization}', 'reloc.integration_scope(reloc.integration)');
SELECT outbox.set_relocation_scope('reloc.team', '{Organization}', plain_columns => '{nope}');
SELECT outbox.set_relocation_scope('reloc.event_1', '{Organization}');
SELECT outbox.set_relocation_scope('pg_class', '{Excluded}');
SELECT outbox.set_relocation_scope('outbox.registered_tables', '{Excluded}');
SELECT outbox.set_relocation_root('Global', 'reloc.plan');
SELECT outbox.set_relocation_root('Organization', 'rl_organization');
SELECT outbox.set_relocation_root(NULL, 'rl_organization');

-- Who may set a scope: the table's owner for its own tables, the extension
-- owner; nobody else.  The root is the extension owner's.
SET ROLE rl_app;
SELECT outbox.set_relocation_scope('reloc.team', '{Organization}');
SELECT outbox.check_models();
RESET ROLE;
SET ROLE rl_owner;
SELECT outbox.set_relocation_scope('reloc.team', '{Organization}');
SELECT outbox.set_relocation_scope('reloc.project', '{Organization}');
SELECT outbox.set_relocation_scope('reloc.environment', '{Organization}');
SELECT outbox.set_relocation_scope('reloc.member', '{Organization}');
SELECT outbox.set_relocation_scope('reloc.dashboard', '{Organization}');
SELECT outbox.set_relocation_scope('reloc.widget', '{Organization}');
SELECT outbox.set_relocation_scope('reloc.event', '{Organization}');
SELECT outbox.set_relocation_scope('reloc.integration', '{Organization,Global}',
                                   'reloc.integration_scope(reloc.integration)');
SELECT outbox.set_relocation_scope('reloc.plan', '{Global}');
SELECT outbox.set_relocation_scope('reloc.audit_log', '{Excluded}');
SELECT outbox.set_relocation_scope('rl_organization', '{Organization}');
SELECT outbox.set_relocation_root('Organization', 'rl_organization');
SELECT * FROM outbox.export_organizations('{1}');
SELECT outbox.check_models();
RESET ROLE;
-- Not the owner of someone else's table.
CREATE TABLE other_table (id bigint PRIMARY KEY);
SET ROLE rl_owner;
SELECT outbox.set_relocation_scope('other_table', '{Excluded}');
RESET ROLE;
SELECT outbox.set_relocation_scope('other_table', '{Excluded}');
SELECT relid, scopes, scope_function FROM outbox.relocation_scopes ORDER BY relid::text;

-- With every scope but no root, and each kind of finding planted.
CREATE TABLE reloc.orphan (id bigint PRIMARY KEY, note text);            -- dangling
CREATE TABLE reloc.release (id bigint PRIMARY KEY,
    project_id bigint REFERENCES reloc.project);                         -- nullable only
CREATE TABLE reloc.cycle_a (id bigint PRIMARY KEY, b_id bigint NOT NULL);
CREATE TABLE reloc.cycle_b (id bigint PRIMARY KEY,
    a_id bigint NOT NULL REFERENCES reloc.cycle_a,
    organization_id bigint NOT NULL REFERENCES rl_organization);
ALTER TABLE reloc.cycle_a ADD FOREIGN KEY (b_id) REFERENCES reloc.cycle_b; -- unbreakable
CREATE TABLE reloc.tag (name text PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES rl_organization);         -- primary key
CREATE TABLE reloc.secret (id bigint PRIMARY KEY,
    organization_id bigint NOT NULL REFERENCES rl_organization);
ALTER TABLE reloc.secret ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE TABLE reloc.setting (id bigint PRIMARY KEY);                      -- no scope
CREATE TABLE reloc.flag (id bigint PRIMARY KEY);
CREATE TABLE reloc.rule (id bigint PRIMARY KEY);
CREATE FUNCTION reloc.rule_scope(r reloc.rule) RETURNS text LANGUAGE sql AS $$ SELECT 'Config' $$;
SELECT outbox.set_relocation_scope(t, '{Organization}')
  FROM unnest('{reloc.orphan,reloc.release,reloc.cycle_a,reloc.cycle_b,reloc.tag,reloc.secret}'::regclass[]) t;
SELECT outbox.set_relocation_scope('reloc.rule', '{Config,Global}', 'reloc.rule_scope(reloc.rule)');
DROP FUNCTION reloc.rule_scope(reloc.rule);                               -- set without function
-- As a restore of a hand-edited dump could leave it: Excluded in a set.
INSERT INTO outbox.relocation_scopes (relid, scopes) VALUES ('reloc.flag', '{Excluded,Global}');
DELETE FROM outbox.relocation_roots;
SELECT relation, finding FROM outbox.check_models() ORDER BY 1::text, 2;
SELECT outbox.set_relocation_root('Organization', 'rl_organization');
SELECT outbox.set_relocation_root('User', 'auth_user');
SELECT relation, finding, detail FROM outbox.check_models() ORDER BY 1::text, 2;
-- The export refuses what it cannot export, naming the table.
SELECT count(*) FROM outbox.export_organizations('{1}');
ALTER TABLE reloc.secret NO FORCE ROW LEVEL SECURITY;
SELECT count(*) FROM outbox.export_organizations('{1}');
DROP TABLE reloc.tag;
SELECT count(*) FROM outbox.export_organizations('{1}');
DROP TABLE reloc.cycle_a, reloc.cycle_b;
-- A dropped table takes its scope with it; plain_columns silences a value.
DROP TABLE reloc.orphan, reloc.release, reloc.setting, reloc.flag, reloc.rule;
SELECT outbox.set_relocation_scope('reloc.member', '{Organization}', plain_columns => '{actor_id}');
SELECT relation, finding FROM outbox.check_models() ORDER BY 1::text, 2;
SELECT count(*) FROM outbox.relocation_scopes WHERE relid::text LIKE '%orphan%';

-- Two organizations; the second must not come along.
INSERT INTO reloc.plan VALUES (1, 'free'), (2, 'business');
INSERT INTO auth_user SELECT i, 'user' || i || '@example.com' FROM generate_series(1, 6) i;
INSERT INTO rl_organization (slug, plan_id) VALUES ('acme', 2), ('globex', 1);
INSERT INTO reloc.team (organization_id, name) VALUES (1, 'a1'), (2, 'g1'), (1, 'a2');
INSERT INTO reloc.project (organization_id, team_id, slug) VALUES
    (1, 1, 'web'), (2, 2, 'gweb'), (1, NULL, 'api');
INSERT INTO reloc.project (organization_id, team_id, parent_id, slug) VALUES
    (1, 3, 3, 'api-v2'), (2, 2, 2, 'gweb-2');
INSERT INTO reloc.environment (project_id, name)
SELECT p, e FROM generate_series(1, 5) p, unnest('{prod,dev}'::text[]) e;
INSERT INTO reloc.member (organization_id, user_id, actor_id, role) VALUES
    (1, 1, 10, 'owner'), (1, 2, NULL, 'member'), (2, 3, NULL, 'owner'), (2, 1, NULL, 'member');
INSERT INTO reloc.dashboard (organization_id) VALUES (1), (2);
INSERT INTO reloc.widget (dashboard_id, title) VALUES (1, 'errors'), (2, 'gerrors'), (1, 'latency');
UPDATE reloc.dashboard SET default_widget_id = CASE id WHEN 1 THEN 3 ELSE 2 END;
INSERT INTO reloc.event SELECT i, 1 + i % 5, 'event ' || i FROM generate_series(990, 1010) i;
INSERT INTO reloc.integration (organization_id, provider) VALUES (1, 'github'), (NULL, 'slack'), (2, 'jira');
INSERT INTO reloc.audit_log (organization_id, event) VALUES (1, 'login');
INSERT INTO reloc.secret VALUES (1, 1), (2, 2);

CREATE TABLE rl_export AS SELECT * FROM outbox.export_organizations('{1}');
SELECT ordinal, model, pk, CASE WHEN model = 'pg_outbox.manifest'
    THEN fields - 'exported_at' - 'system_identifier' ELSE fields END AS fields
  FROM rl_export ORDER BY ordinal;
-- Nothing of the second organization.
SELECT count(*) AS of_globex FROM rl_export
 WHERE fields->>'organization_id' = '2' OR fields->>'slug' LIKE 'g%' OR fields->>'title' LIKE 'g%'
    OR fields->>'project_id' IN ('2', '5');
-- Every foreign key inside the export points to a row written before it,
-- except the cycle's column, which the manifest defers.
WITH fk AS (
    SELECT k.conrelid::regclass::text AS child, k.confrelid::regclass::text AS parent,
           a.attname::text AS col
      FROM pg_constraint k JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
     WHERE k.contype = 'f' AND k.conparentid = 0),
manifest AS (SELECT fields AS m FROM rl_export WHERE model = 'pg_outbox.manifest')
SELECT fk.child, fk.col, count(*) AS refs,
       count(*) FILTER (WHERE p.ordinal IS NULL AND fk.parent IN (SELECT jsonb_object_keys(m->'tables') FROM manifest)) AS missing,
       count(*) FILTER (WHERE p.ordinal > c.ordinal) AS after,
       coalesce((SELECT m->'deferred'->fk.child ? fk.col FROM manifest), false) AS deferred
  FROM rl_export c JOIN fk ON fk.child = c.model
  LEFT JOIN rl_export p ON p.model = fk.parent AND p.pk = (c.fields->>fk.col)::bigint
 WHERE c.fields->>fk.col IS NOT NULL
 GROUP BY 1, 2, 6 ORDER BY 1, 2;
SELECT fields - 'exported_at' - 'system_identifier' - 'checksum' AS manifest
  FROM rl_export WHERE model = 'pg_outbox.manifest';

-- The manifest's checksum, as docs/relocation.md recomputes it, and its
-- counts: they catch a dropped and an edited row.
CREATE FUNCTION rl_verify(export regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    m jsonb;
    sum text;
    bad text;
BEGIN
    EXECUTE format('SELECT fields FROM %s WHERE model = ''pg_outbox.manifest''', export) INTO m;
    EXECUTE format($q$SELECT encode(sha256(convert_to(string_agg(format(E'%%s\t%%s\t%%s\t%%s\n',
                          ordinal, model, pk, fields), '' ORDER BY ordinal), 'UTF8')), 'hex')
                       FROM %s WHERE model <> 'pg_outbox.manifest'$q$, export) INTO sum;
    EXECUTE format($q$SELECT string_agg(t.key, ', ') FROM jsonb_each_text(%L::jsonb) t
                       WHERE t.value::bigint <> (SELECT count(*) FROM %s e WHERE e.model = t.key)$q$,
                   m->'tables', export) INTO bad;
    RETURN CASE WHEN sum IS DISTINCT FROM m->>'checksum' THEN 'checksum differs' ELSE 'checksum ok' END
        || coalesce(', counts differ: ' || bad, ', counts ok');
END
$$;
SELECT rl_verify('rl_export');
CREATE TABLE rl_dropped AS SELECT * FROM rl_export;
DELETE FROM rl_dropped WHERE model = 'reloc.environment' AND pk = 3;
SELECT rl_verify('rl_dropped');
CREATE TABLE rl_edited AS SELECT * FROM rl_export;
UPDATE rl_edited SET fields = jsonb_set(fields, '{role}', '"owner"') WHERE model = 'reloc.member' AND pk = 2;
SELECT rl_verify('rl_edited');
-- The same export again is the same rows (the checksum does not depend on
-- the run).
SELECT (SELECT fields->>'checksum' FROM rl_export WHERE model = 'pg_outbox.manifest') =
       (SELECT fields->>'checksum' FROM outbox.export_organizations('{1}') WHERE model = 'pg_outbox.manifest')
       AS same_checksum;

-- Both organizations at once; then control's export of their members, as
-- the manifest lists them.
SELECT model, count(*) FROM outbox.export_organizations('{2,1}') GROUP BY 1 ORDER BY 1;
SELECT fields->'cross_silo' FROM rl_export WHERE model = 'pg_outbox.manifest';
SELECT ordinal, model, pk, CASE WHEN model = 'pg_outbox.manifest'
    THEN fields - 'exported_at' - 'system_identifier' ELSE fields END AS fields
  FROM outbox.export_users(
    (SELECT array_agg(v::bigint) FROM rl_export, jsonb_array_elements_text(fields->'cross_silo'->'auth_user') v
      WHERE model = 'pg_outbox.manifest'));

-- Bad input.
SELECT * FROM outbox.export_organizations(NULL);
SELECT * FROM outbox.export_organizations('{}');
SELECT * FROM outbox.export_organizations('{1,NULL}');
SELECT * FROM outbox.export_organizations('{1,1}');
SELECT * FROM outbox.export_organizations('{{1},{2}}');
SELECT * FROM outbox.export_organizations('{1,99}');
SELECT * FROM outbox.export_organizations(ARRAY(SELECT generate_series(1, 100000)::bigint));
SELECT count(*) FROM outbox.export_organizations(ARRAY(SELECT generate_series(1, 10000)::bigint));
SELECT * FROM outbox.export_users('{}');

-- Roles (SPEC section 9): only the extension owner exports; pg_monitor
-- reads the check; the others nothing.
GRANT rl_app TO rl_consumer;
SELECT outbox.grant_category('user_update', 'rl_consumer', 'CONSUME');
SET ROLE rl_monitor;
SELECT count(*) FROM outbox.check_models();
SELECT * FROM outbox.export_organizations('{1}');
SELECT outbox.set_relocation_root('Organization', 'rl_organization');
SELECT outbox.set_relocation_scope('reloc.team', '{Excluded}');
RESET ROLE;
SET ROLE rl_consumer;
SELECT * FROM outbox.export_users('{1}');
SELECT outbox.set_relocation_scope('reloc.team', '{Excluded}');
RESET ROLE;
SET ROLE rl_owner;
SELECT * FROM outbox.export_users('{1}');
RESET ROLE;
-- metrics() counts the findings (here: the test's own tables, rl_export,
-- its two copies and reloc.later, without a scope).
CREATE TABLE reloc.later (id bigint PRIMARY KEY);
SELECT line FROM regexp_split_to_table(outbox.metrics(), E'\n') line
 WHERE line LIKE 'pg_outbox_model_findings%' AND line NOT LIKE '% 0';

-- One rule for which tables a relocation covers (src/relocation/model/):
-- the import's lookup by table key leaves out another extension's table as
-- the export does (its SQL copy of the rule took it).
CREATE TABLE reloc.extension_owned (id bigint PRIMARY KEY);
ALTER EXTENSION plpgsql ADD TABLE reloc.extension_owned;
SELECT outbox._relocation_table('reloc.extension_owned') AS extension_table,
       outbox._relocation_table('reloc.later') AS application_table,
       outbox._relocation_table_key('reloc.extension_owned') AS its_key;
ALTER EXTENSION plpgsql DROP TABLE reloc.extension_owned;
DROP TABLE reloc.extension_owned;
-- The rule's other edges, now read from the catalogs (issue 49): a
-- partition takes its root's key, a temporary table is not covered, an
-- unlogged one is; a registered table is named by its table_key, which
-- may collide with another table's name (an error that names both).
CREATE TEMP TABLE reloc_temporary (id bigint PRIMARY KEY);
CREATE UNLOGGED TABLE reloc.unlogged (id bigint PRIMARY KEY);
CREATE TABLE reloc.keyed (id bigint PRIMARY KEY);
SELECT outbox.register_table('reloc.keyed', 'user_update', 'control', table_key => 'auth_user_copy');
CREATE TABLE auth_user_copy (id bigint PRIMARY KEY);
SELECT outbox._relocation_table('reloc.event_1') AS partition,
       outbox._relocation_table('reloc.event') AS its_root,
       outbox._relocation_table('reloc_temporary') AS temporary,
       outbox._relocation_table('pg_temp.reloc_temporary') AS temporary_qualified,
       outbox._relocation_table('reloc.unlogged') AS unlogged,
       outbox._relocation_table('reloc.keyed') AS by_its_name,
       outbox._relocation_table_key('reloc.keyed') AS its_key,
       outbox._relocation_table_key('reloc.event_1') AS partition_key,
       outbox._relocation_table_key(0) AS no_table,
       outbox._relocation_table(NULL) AS null_key;
\set VERBOSITY default
SELECT outbox._relocation_table('auth_user_copy');
\set VERBOSITY terse
SELECT outbox.unregister_table('reloc.keyed');
DROP TABLE reloc_temporary, reloc.unlogged, reloc.keyed, auth_user_copy;

\c regression
SET client_min_messages = warning;
DROP DATABASE relocation_test;
DROP ROLE rl_owner, rl_app, rl_monitor, rl_consumer;
