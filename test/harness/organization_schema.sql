-- The tables of an organization as Sentry has them, in miniature: ten
-- tables with a nullable reference, a self-reference, a cycle through a
-- nullable column, a partitioned table, a cross-silo column kept as a
-- value; every primary key from a sequence.  Used by the relocation tests
-- (test/integration/relocation_*.sh) and bench/relocation/run.sh, in the
-- source and in the target; organization_data.sql fills the source.
CREATE TABLE plan (id int PRIMARY KEY, name text);
CREATE TABLE organization (id bigserial PRIMARY KEY, slug text UNIQUE, plan_id int NOT NULL REFERENCES plan);
CREATE TABLE team (id bigserial PRIMARY KEY, organization_id bigint NOT NULL REFERENCES organization, name text);
CREATE INDEX ON team (organization_id);
CREATE TABLE project (id bigserial PRIMARY KEY, organization_id bigint NOT NULL REFERENCES organization,
    team_id bigint REFERENCES team, parent_id bigint REFERENCES project, slug text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX ON project (organization_id);
CREATE INDEX ON project (team_id);
CREATE INDEX ON project (parent_id);
CREATE TABLE environment (id bigserial PRIMARY KEY, project_id bigint NOT NULL REFERENCES project, name text);
CREATE INDEX ON environment (project_id);
CREATE TABLE event (id bigserial NOT NULL, project_id bigint NOT NULL REFERENCES project, message text,
    PRIMARY KEY (id)) PARTITION BY RANGE (id);
CREATE TABLE event_1 PARTITION OF event FOR VALUES FROM (0) TO (50000);
CREATE TABLE event_2 PARTITION OF event FOR VALUES FROM (50000) TO (100000000);
CREATE INDEX ON event (project_id);
CREATE TABLE member (id bigserial PRIMARY KEY, organization_id bigint NOT NULL REFERENCES organization, user_id bigint NOT NULL);
CREATE INDEX ON member (organization_id);
CREATE TABLE dashboard (id bigserial PRIMARY KEY, organization_id bigint NOT NULL REFERENCES organization, default_widget_id bigint);
CREATE INDEX ON dashboard (organization_id);
CREATE TABLE widget (id bigserial PRIMARY KEY, dashboard_id bigint NOT NULL REFERENCES dashboard, title text);
CREATE INDEX ON widget (dashboard_id);
ALTER TABLE dashboard ADD FOREIGN KEY (default_widget_id) REFERENCES widget;
CREATE INDEX ON dashboard (default_widget_id);
CREATE TABLE alert_rule (id bigserial PRIMARY KEY, project_id bigint NOT NULL REFERENCES project, owner_id bigint REFERENCES member);
CREATE INDEX ON alert_rule (project_id);
CREATE INDEX ON alert_rule (owner_id);
SELECT outbox.set_relocation_scope(t, '{Organization}')
  FROM unnest('{organization,team,project,environment,event,dashboard,widget,alert_rule}'::regclass[]) t;
SELECT outbox.set_relocation_scope('plan', '{Global}');
SELECT outbox.set_relocation_scope('member', '{Organization}', plain_columns => '{user_id}');
SELECT outbox.set_relocation_root('Organization', 'organization');
INSERT INTO plan VALUES (1, 'free'), (2, 'business');
