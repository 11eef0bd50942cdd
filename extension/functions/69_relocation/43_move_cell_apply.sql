-- Moving an organization: the target's catch-up (41_move_cell_steps.sql
-- has the other steps; control drives them through relocation_peer,
-- 42_move_peer.sql).

-- The source's word is not taken for whose rows these are (issue 44): a
-- changed row of table entry is written only when it is the
-- organization's by the export's rule (its root, or a reference leading to
-- a row of the move here, parents first), and never over a row of this
-- cell that is not the move's (another organization's, whose key a writer
-- in the source took: the move fails, naming the row).
CREATE OR REPLACE FUNCTION outbox._move_apply_check(mv outbox.organization_moves, entry jsonb,
                                                    rows_to_write jsonb[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    outsider text;
BEGIN
    SELECT w->>(entry->>'pk') INTO outsider FROM unnest(rows_to_write) w
     WHERE NOT (entry->>'model' = mv.plan->>'root'
                AND (w->>(entry->>'pk'))::bigint = mv.organization)
       AND NOT EXISTS (
           SELECT FROM jsonb_array_elements(entry->'refs') x
             JOIN outbox.move_members mm
               ON mm.relocation = mv.relocation AND mm.model = x.value->>'parent' AND mm.present
              AND mm.pk = (w->>(x.value->>'column'))::bigint
            WHERE x.value->>'kind' = 'map' AND NOT (x.value->>'deferred')::boolean)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'relocation %: row % of % in the catch-up is not organization %''s',
            mv.relocation, outsider, entry->>'model', mv.organization
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT k #>> '{}' INTO outsider
      FROM unnest(outbox._run_as_table_owner((entry->>'relid')::oid::regclass,
               outbox._relocation_statement('keys_where', (entry->>'relid')::oid::regclass,
                                            entry->>'pk', key_column => entry->>'pk'),
               ARRAY(SELECT w->(entry->>'pk') FROM unnest(rows_to_write) w))) k
     WHERE NOT EXISTS (SELECT FROM outbox.move_members mm
                        WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
                          AND mm.pk = (k #>> '{}')::bigint)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'relocation %: the catch-up would overwrite row % of %, which is not organization %''s',
            mv.relocation, outsider, entry->>'model', mv.organization
            USING ERRCODE = 'unique_violation',
                  HINT = 'A writer in the source gave a row of the organization a key this cell uses: remove that row in the source, or cancel the move.';
    END IF;
END
$$;

-- apply (target): the source's changes, in its table order: rows written
-- (their cycle-breaking columns after every row of the batch), then rows
-- deleted, children first.
CREATE OR REPLACE FUNCTION outbox._move_apply(mv outbox.organization_moves, changes jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    plan jsonb := (SELECT s.plan FROM outbox.relocation_state s WHERE s.relocation = mv.relocation);
    entry jsonb;
    rows_to_write jsonb[];
    cols text[];
    deferred text[];
    applied int := 0;
BEGIN
    FOR entry IN SELECT e.value FROM jsonb_array_elements(plan) WITH ORDINALITY e(value, n)
                  ORDER BY e.n LOOP
        rows_to_write := ARRAY(SELECT c->'fields' || jsonb_build_object(entry->>'pk', c->'pk')
                                 FROM jsonb_array_elements(changes) c
                                WHERE c->>'model' = entry->>'model'
                                  AND jsonb_typeof(c->'fields') = 'object');
        CONTINUE WHEN cardinality(rows_to_write) = 0;
        PERFORM outbox._move_apply_check(mv, entry, rows_to_write);
        deferred := outbox._relocation_deferred(entry);
        cols := ARRAY(SELECT jsonb_array_elements_text(entry->'columns') EXCEPT SELECT unnest(deferred));
        applied := applied + cardinality(outbox._run_as_table_owner_uncaptured(
            (entry->>'relid')::oid::regclass,
            outbox._relocation_statement('upsert_rows', (entry->>'relid')::oid::regclass,
                                         entry->>'pk', cols::name[]),
            rows_to_write));
        INSERT INTO outbox.move_members AS mm (relocation, model, pk, present)
        SELECT mv.relocation, entry->>'model', (w->>(entry->>'pk'))::bigint, true
          FROM unnest(rows_to_write) w
        ON CONFLICT (relocation, model, pk) DO UPDATE SET present = true;
    END LOOP;
    FOR entry IN SELECT e.value FROM jsonb_array_elements(plan) e LOOP
        deferred := outbox._relocation_deferred(entry);
        CONTINUE WHEN cardinality(deferred) = 0;
        rows_to_write := ARRAY(SELECT c->'fields' || jsonb_build_object(entry->>'pk', c->'pk')
                                 FROM jsonb_array_elements(changes) c
                                WHERE c->>'model' = entry->>'model'
                                  AND jsonb_typeof(c->'fields') = 'object');
        CONTINUE WHEN cardinality(rows_to_write) = 0;
        PERFORM outbox._run_as_table_owner_uncaptured((entry->>'relid')::oid::regclass,
            outbox._relocation_statement('update_rows', (entry->>'relid')::oid::regclass,
                                         entry->>'pk', deferred::name[]),
            rows_to_write);
    END LOOP;
    FOR entry IN SELECT e.value FROM jsonb_array_elements(plan) WITH ORDINALITY e(value, n)
                  ORDER BY e.n DESC LOOP
        -- Only the move's own rows are deleted; another key is not the
        -- organization's here, and is left alone.
        rows_to_write := ARRAY(SELECT c->'pk' FROM jsonb_array_elements(changes) c
                                WHERE c->>'model' = entry->>'model'
                                  AND jsonb_typeof(c->'fields') IS DISTINCT FROM 'object'
                                  AND EXISTS (SELECT FROM outbox.move_members mm
                                               WHERE mm.relocation = mv.relocation
                                                 AND mm.model = entry->>'model' AND mm.present
                                                 AND mm.pk = (c->>'pk')::bigint));
        CONTINUE WHEN cardinality(rows_to_write) = 0;
        applied := applied + outbox._move_delete_rows(entry, rows_to_write);
        UPDATE outbox.move_members mm SET present = false
         WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
           AND mm.pk = ANY (ARRAY(SELECT (w #>> '{}')::bigint FROM unnest(rows_to_write) w));
    END LOOP;
    RETURN jsonb_build_object('applied', applied);
END
$$;
