-- The floor of an import with new keys, for the benchmark's schema only
-- (test/harness/organization_schema.sql), written by hand: every table's
-- rows from staging.<table> (the organization as pg_dump wrote it) with a
-- new key from the table's sequence, every reference rewritten through
-- the new keys by a join, foreign keys checked and capture fired (the
-- target's registered tables), in one transaction.  What the import does
-- besides (staging as the export wrote it, a map kept for the compare,
-- chunks that resume, collisions, rows written as each table's owner, the
-- plan read from the schema) is not here: bench/relocation/run.sh times it
-- beside the import to show how far a set-based import of this kind could
-- go.
BEGIN;
CREATE TEMP TABLE map_organization ON COMMIT DROP AS
    SELECT id AS old, nextval('organization_id_seq') AS new FROM staging.organization;
CREATE TEMP TABLE map_team ON COMMIT DROP AS
    SELECT id AS old, nextval('team_id_seq') AS new FROM staging.team;
CREATE TEMP TABLE map_project ON COMMIT DROP AS
    SELECT id AS old, nextval('project_id_seq') AS new FROM staging.project;
CREATE TEMP TABLE map_environment ON COMMIT DROP AS
    SELECT id AS old, nextval('environment_id_seq') AS new FROM staging.environment;
CREATE TEMP TABLE map_event ON COMMIT DROP AS
    SELECT id AS old, nextval('event_id_seq') AS new FROM staging.event;
CREATE TEMP TABLE map_member ON COMMIT DROP AS
    SELECT id AS old, nextval('member_id_seq') AS new FROM staging.member;
CREATE TEMP TABLE map_dashboard ON COMMIT DROP AS
    SELECT id AS old, nextval('dashboard_id_seq') AS new FROM staging.dashboard;
CREATE TEMP TABLE map_widget ON COMMIT DROP AS
    SELECT id AS old, nextval('widget_id_seq') AS new FROM staging.widget;
CREATE TEMP TABLE map_alert_rule ON COMMIT DROP AS
    SELECT id AS old, nextval('alert_rule_id_seq') AS new FROM staging.alert_rule;
ANALYZE map_organization, map_team, map_project, map_environment, map_event, map_member,
        map_dashboard, map_widget, map_alert_rule;

INSERT INTO organization (id, slug, plan_id)
SELECT m.new, s.slug || '-imported', s.plan_id
  FROM staging.organization s JOIN map_organization m ON m.old = s.id;
INSERT INTO team (id, organization_id, name)
SELECT m.new, o.new, s.name
  FROM staging.team s JOIN map_team m ON m.old = s.id JOIN map_organization o ON o.old = s.organization_id;
INSERT INTO project (id, organization_id, team_id, parent_id, slug, created_at)
SELECT m.new, o.new, t.new, p.new, s.slug, s.created_at
  FROM staging.project s JOIN map_project m ON m.old = s.id
  JOIN map_organization o ON o.old = s.organization_id
  LEFT JOIN map_team t ON t.old = s.team_id LEFT JOIN map_project p ON p.old = s.parent_id;
INSERT INTO environment (id, project_id, name)
SELECT m.new, p.new, s.name
  FROM staging.environment s JOIN map_environment m ON m.old = s.id JOIN map_project p ON p.old = s.project_id;
INSERT INTO event (id, project_id, message)
SELECT m.new, p.new, s.message
  FROM staging.event s JOIN map_event m ON m.old = s.id JOIN map_project p ON p.old = s.project_id;
INSERT INTO member (id, organization_id, user_id)
SELECT m.new, o.new, s.user_id
  FROM staging.member s JOIN map_member m ON m.old = s.id JOIN map_organization o ON o.old = s.organization_id;
INSERT INTO dashboard (id, organization_id, default_widget_id)
SELECT m.new, o.new, NULL
  FROM staging.dashboard s JOIN map_dashboard m ON m.old = s.id JOIN map_organization o ON o.old = s.organization_id;
INSERT INTO widget (id, dashboard_id, title)
SELECT m.new, d.new, s.title
  FROM staging.widget s JOIN map_widget m ON m.old = s.id JOIN map_dashboard d ON d.old = s.dashboard_id;
UPDATE dashboard t SET default_widget_id = w.new
  FROM staging.dashboard s JOIN map_dashboard m ON m.old = s.id JOIN map_widget w ON w.old = s.default_widget_id
 WHERE t.id = m.new;
INSERT INTO alert_rule (id, project_id, owner_id)
SELECT m.new, p.new, w.new
  FROM staging.alert_rule s JOIN map_alert_rule m ON m.old = s.id JOIN map_project p ON p.old = s.project_id
  LEFT JOIN map_member w ON w.old = s.owner_id;
COMMIT;
