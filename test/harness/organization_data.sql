-- Two organizations, the first of about 100,000 rows times :scale (a psql
-- variable, 1 unless set: bench/relocation/run.sh's SCALE); every row
-- refers to rows of its own organization only (organization_schema.sql).
\if :{?scale}
\else
\set scale 1
\endif
INSERT INTO organization VALUES (1, 'acme', 2), (2, 'globex', 1);
INSERT INTO team SELECT i, 1 + i % 2, 'team ' || i FROM generate_series(1, 200) i;
INSERT INTO project (id, organization_id, team_id, slug)
SELECT i, 1 + i % 2, CASE WHEN i % 3 = 0 THEN NULL ELSE i % 2 + 2 * (1 + i % 99) END, 'p' || i
  FROM generate_series(1, 4000 * :scale) i;
UPDATE project SET parent_id = id - 2 WHERE id > 2 AND id % 5 = 0;
INSERT INTO environment (project_id, name) SELECT p, e FROM generate_series(1, 4000 * :scale) p, unnest('{prod,dev,stage}'::text[]) e;
INSERT INTO event SELECT i, 1 + i % (4000 * :scale), 'event ' || i FROM generate_series(1, 160000 * :scale) i;
INSERT INTO member SELECT i, 1 + i % 2, i FROM generate_series(1, 4000 * :scale) i;
INSERT INTO dashboard SELECT i, 1 + i % 2, NULL FROM generate_series(1, 2000 * :scale) i;
INSERT INTO widget SELECT i, 1 + i % (2000 * :scale), 'w' || i FROM generate_series(1, 6000 * :scale) i;
UPDATE dashboard SET default_widget_id = id - 1 WHERE id % 2 = 0;
INSERT INTO alert_rule SELECT i, 1 + i % (4000 * :scale), CASE WHEN i % 2 = 0 THEN 1 + i % (4000 * :scale) END FROM generate_series(1, 8000 * :scale) i;
-- New rows take ids above these.
SELECT setval(pg_get_serial_sequence(t, 'id'), 1000000 * :scale)
  FROM unnest('{organization,team,project,environment,event,member,dashboard,widget,alert_rule}'::text[]) t;
ANALYZE;
