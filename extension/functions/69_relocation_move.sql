------------------------------------------------------------------------------
-- Moving an organization between cells (SPEC section 12; relocation, part 3)
------------------------------------------------------------------------------
-- outbox.relocate_organization(root_id, to_cell) on control records a move
-- (outbox.organization_moves, side control); control's worker drives it a
-- step at a time (outbox._move_step, one transaction each), calling the two
-- cells over the links: outbox._relocation_call reaches a cell through its
-- foreign server as control's link role there, and runs
-- outbox.relocation_peer, which a cell lets control's link role execute
-- when it takes part in moves (docs/relocation.md).  There are no
-- cell-to-cell links: the source's chunks and changes pass through control.
--
-- Steps (organization_moves.step on control):
--   prepare        the target fences the organization (it refuses its
--                  writes), then the source starts its change log: a
--                  trigger on every Organization-scoped table records each
--                  changed row's key in the writing transaction;
--   export         the source exports the organization, from one snapshot
--                  taken after the change log started (export_organizations
--                  into its outbox.relocation_rows);
--   check          the target has none of its keys (else the move fails
--                  before anything is copied; outbox.plan_relocation asks
--                  the same up front);
--   copy           chunk by chunk, from the source's staging table to the
--                  target's (a chunk sent again is recognised by its
--                  ordinals);
--   import         the target imports it with the source's primary keys
--                  (relocation_state.keys = kept), after checking their
--                  keys again, chunk by chunk (part 2);
--   catch_up       the changed rows, as they are now in the source, applied
--                  in the target (upserts, deletions), until few are left;
--   fence          the source refuses the organization's writes (SQLSTATE
--                  OBM01, naming the new cell);
--   in_flight      waits for the source's transactions that were running
--                  then (they may still write: the change log has them);
--   last_catch_up  the last changes, until none is left;
--   drain          the source's outbox rows written before its fence are
--                  delivered: control takes every message of the
--                  organization from there before any from the target
--                  (whose import and catch-up write no outbox rows);
--   switch         outbox.organization_cells names the new cell, then the
--                  target's fence lifts: the write pause ends;
--   delete         the organization's rows leave the source in batches,
--                  without outbox rows (no tombstone, no cascade in
--                  control); the source stays fenced for it.
-- mode fork: prepare (no fence, no change log), export, copy, then part 2's
-- import with new keys (capture fires: new objects for control); the new
-- root key goes into organization_cells, and the source keeps the original.
-- At every moment at most one cell accepts the organization's writes: the
-- target is fenced from the start until after the flip, the source from
-- before the flip for good.  A step that fails is tried again (1 s, 2 s,
-- ... a minute; outbox.relocations shows the error): each call a cell
-- takes is one transaction there, and one taken twice does nothing more.

-- outbox._run_as_table_owner, its deletions without outbox rows: only the
-- move's last step, removing the organization from the cell it left.
CREATE OR REPLACE FUNCTION outbox._run_as_table_owner_uncaptured(tbl regclass, statement text,
    rows jsonb[]) RETURNS jsonb[]
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__run_as_table_owner_uncaptured';

-- One call of outbox.relocation_peer in cell, through server.
CREATE OR REPLACE FUNCTION outbox._relocation_call(server text, cell text, operation text,
    argument text) RETURNS text
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__relocation_call';

------------------------------------------------------------------------------
-- In the cells: the change log and the fence
------------------------------------------------------------------------------

-- Every Organization-scoped table here, with its primary key and its
-- references to other Organization-scoped tables (one-column foreign keys
-- to a primary key), as the fence and the change log need them.
CREATE OR REPLACE FUNCTION outbox._move_tables()
RETURNS TABLE (relid regclass, model text, pk name, refs jsonb)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH t AS (
        SELECT s.relid, outbox._relocation_table_key(s.relid) AS model, a.attname AS pk
          FROM outbox.relocation_scopes s
          JOIN pg_index i ON i.indrelid = s.relid AND i.indisprimary AND i.indnkeyatts = 1
          JOIN pg_attribute a ON a.attrelid = s.relid AND a.attnum = i.indkey[0]
         WHERE 'Organization' = ANY (s.scopes)
    )
    SELECT t.relid, t.model, t.pk,
           coalesce((SELECT jsonb_agg(jsonb_build_object('column', fa.attname, 'parent', p.model)
                                      ORDER BY fa.attname)
                       FROM pg_constraint k
                       JOIN pg_attribute fa ON fa.attrelid = k.conrelid AND fa.attnum = k.conkey[1]
                       JOIN t p ON p.relid = coalesce(pg_partition_root(k.confrelid), k.confrelid)
                      WHERE k.conrelid = t.relid AND k.contype = 'f'
                        AND cardinality(k.conkey) = 1), '[]')
      FROM t
$$;

-- The change log and the fence (src/relocation/move_trigger.cpp):
-- statement triggers on each Organization-scoped table (arguments: its
-- table key, its primary key, then each reference's column and parent
-- table key), enabled ALWAYS.  For each move this cell takes part in: the
-- source logs the keys of every row the statement changed until a
-- statement sees its fence (which refuses the organization's writes from
-- then on); a fenced side refuses a statement that changes one of the
-- organization's rows, or writes one that refers to one of them, or writes
-- its root.  A statement that started before a fence committed may not
-- see it: the move waits for every transaction running then before its
-- last catch-up.
CREATE OR REPLACE FUNCTION outbox._move_trigger() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__move_trigger';

-- Does a move this cell takes part in run (its triggers must stay)?
CREATE OR REPLACE FUNCTION outbox._moving_here() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT FROM outbox.organization_moves o
                    WHERE o.side <> 'control' AND o.state NOT IN ('complete', 'cancelled'))
$$;

-- Puts the move triggers on every Organization-scoped table that lacks them.
CREATE OR REPLACE FUNCTION outbox._move_install_triggers() RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
    args text;
    installed int := 0;
BEGIN
    FOR t IN SELECT * FROM outbox._move_tables() LOOP
        CONTINUE WHEN EXISTS (SELECT FROM pg_trigger g
                               WHERE g.tgrelid = t.relid AND g.tgname = 'pg_outbox_move_insert');
        args := format('%L, %L', t.model, t.pk) || coalesce((
            SELECT string_agg(format(', %L, %L', r.value->>'column', r.value->>'parent'), '')
              FROM jsonb_array_elements(t.refs) r), '');
        EXECUTE format('CREATE TRIGGER pg_outbox_move_insert AFTER INSERT ON %1$s'
                       ' REFERENCING NEW TABLE AS pg_outbox_new'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger(%2$s);'
                       ' CREATE TRIGGER pg_outbox_move_update AFTER UPDATE ON %1$s'
                       ' REFERENCING OLD TABLE AS pg_outbox_old NEW TABLE AS pg_outbox_new'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger(%2$s);'
                       ' CREATE TRIGGER pg_outbox_move_delete AFTER DELETE ON %1$s'
                       ' REFERENCING OLD TABLE AS pg_outbox_old'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger(%2$s);'
                       ' CREATE TRIGGER pg_outbox_move_truncate BEFORE TRUNCATE ON %1$s'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger(%2$s);'
                       ' ALTER TABLE %1$s ENABLE ALWAYS TRIGGER pg_outbox_move_insert,'
                       ' ENABLE ALWAYS TRIGGER pg_outbox_move_update,'
                       ' ENABLE ALWAYS TRIGGER pg_outbox_move_delete,'
                       ' ENABLE ALWAYS TRIGGER pg_outbox_move_truncate',
                       t.relid, args);
        installed := installed + 1;
    END LOOP;
    RETURN installed;
END
$$;

-- The table key of the Organization scope's root here.
CREATE OR REPLACE FUNCTION outbox._move_root() RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    root regclass := (SELECT r.relid FROM outbox.relocation_roots r WHERE r.scope = 'Organization');
BEGIN
    IF root IS NULL THEN
        RAISE EXCEPTION 'scope Organization has no relocation root in this cell'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'SELECT outbox.set_relocation_root(''Organization'', <table>);';
    END IF;
    RETURN outbox._relocation_table_key(root);
END
$$;

-- prepare: this cell's part in the move, its triggers, and on the target
-- its fence (the root, which must not be here).
CREATE OR REPLACE FUNCTION outbox._move_prepare(cell text, argument jsonb) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_relocation uuid := (argument->>'relocation')::uuid;
    p_side text := argument->>'side';
    p_organization bigint := (argument->>'organization')::bigint;
    p_mode text := coalesce(argument->>'mode', 'move');
    mv outbox.organization_moves;
    root text := outbox._move_root();
    taken jsonb[];
BEGIN
    IF p_mode NOT IN ('move', 'fork') THEN
        RAISE EXCEPTION 'relocation %: mode % is not one of relocation protocol 1', p_relocation,
            quote_literal(p_mode) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_side NOT IN ('source', 'target') OR p_organization IS NULL
       OR argument->>(CASE p_side WHEN 'source' THEN 'from' ELSE 'to' END) IS DISTINCT FROM cell THEN
        RAISE EXCEPTION 'relocation %: cell % cannot be the % of a move from % to %', p_relocation,
            cell, p_side, argument->>'from', argument->>'to' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO mv FROM outbox.organization_moves o WHERE o.relocation = p_relocation;
    IF FOUND THEN
        IF mv.side <> p_side OR mv.organization <> p_organization THEN
            RAISE EXCEPTION 'relocation % is another move here', p_relocation
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN jsonb_build_object('prepared', false);
    END IF;
    IF p_mode = 'fork' THEN
        -- A copy with new keys: no fence, no change log.
        INSERT INTO outbox.organization_moves (relocation, organization, side, mode, from_cell,
                                               to_cell, step, plan)
        VALUES (p_relocation, p_organization, p_side, 'fork', argument->>'from', argument->>'to',
                'prepared', jsonb_build_object('root', root));
        RETURN jsonb_build_object('prepared', true, 'triggers', 0);
    END IF;
    IF p_side = 'target' THEN
        taken := outbox._run_as_table_owner(outbox._relocation_table(root),
            format('SELECT pg_catalog.to_jsonb(t.%I) FROM %s t WHERE t.%I = %s',
                   (SELECT m.pk FROM outbox._move_tables() m WHERE m.model = root),
                   outbox._relocation_table(root),
                   (SELECT m.pk FROM outbox._move_tables() m WHERE m.model = root), p_organization),
            '{}');
        IF cardinality(taken) > 0 THEN
            RAISE EXCEPTION 'organization % cannot move to cell %: it is here already', p_organization, cell
                USING ERRCODE = 'unique_violation',
                      HINT = 'A move keeps primary keys: each cell keeps its id ranges apart.';
        END IF;
    END IF;
    IF p_side = 'target' THEN
        -- Coming back to a cell it left: that move's fence gives way to this one's.
        UPDATE outbox.organization_moves o SET fenced = false, updated_at = clock_timestamp()
         WHERE o.organization = p_organization AND o.side = 'source' AND o.state = 'complete';
    END IF;
    INSERT INTO outbox.organization_moves (relocation, organization, side, from_cell, to_cell, step,
                                           fenced, plan)
    VALUES (p_relocation, p_organization, p_side, argument->>'from', argument->>'to', 'prepared',
            p_side = 'target', jsonb_build_object('root', root));
    IF p_side = 'target' THEN
        INSERT INTO outbox.move_members (relocation, model, pk, present)
        VALUES (p_relocation, root, p_organization, true);
    END IF;
    RETURN jsonb_build_object('prepared', true, 'triggers', outbox._move_install_triggers());
END
$$;

-- export (source): the organization from one snapshot into
-- outbox.relocation_rows, its rows as the first members, the plan of its
-- tables.  Done once.
CREATE OR REPLACE FUNCTION outbox._move_export(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    total bigint;
BEGIN
    IF mv.plan ? 'order' THEN
        RETURN jsonb_build_object('rows', mv.rows_total);
    END IF;
    INSERT INTO outbox.relocation_rows (relocation, ordinal, model, pk, fields)
    SELECT mv.relocation, e.ordinal, e.model, e.pk, e.fields
      FROM outbox.export_organizations(ARRAY[mv.organization]) e;
    GET DIAGNOSTICS total = ROW_COUNT;
    INSERT INTO outbox.move_members (relocation, model, pk, present)
    SELECT mv.relocation, s.model, s.pk, true FROM outbox.relocation_rows s
     WHERE s.relocation = mv.relocation AND s.pk IS NOT NULL AND mv.mode = 'move';
    -- The members' statistics, which the catch-up's and the fence's probes
    -- by key are planned with (the table was small a moment ago).
    ANALYZE outbox.move_members;
    UPDATE outbox.organization_moves o
       SET rows_total = total, step = 'exported', updated_at = clock_timestamp(),
           plan = o.plan || jsonb_build_object('order', outbox._relocation_plan(mv.relocation,
               (SELECT s.fields FROM outbox.relocation_rows s
                 WHERE s.relocation = mv.relocation AND s.pk IS NULL)))
     WHERE o.relocation = mv.relocation;
    RETURN jsonb_build_object('rows', total);
END
$$;

-- The rows of table (a plan entry) whose primary keys are pks, as they are
-- now: {pk: row}.
CREATE OR REPLACE FUNCTION outbox._move_rows(entry jsonb, pks bigint[]) RETURNS jsonb
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_object_agg(r->>(entry->>'pk'), r), '{}')
      FROM unnest(outbox._run_as_table_owner((entry->>'relid')::oid::regclass,
               format('SELECT pg_catalog.to_jsonb(t) FROM %s t WHERE t.%I = ANY (SELECT'
                      ' (j OPERATOR(pg_catalog.#>>) ''{}'')::bigint FROM pg_catalog.unnest($1) j)',
                      entry->>'qualified', entry->>'pk'),
               ARRAY(SELECT to_jsonb(k) FROM unnest(pks) k))) r
$$;

-- changes (source): forgets the change log entries the target applied
-- (acknowledge), then reads the next ones: each changed row of the
-- organization as it is now, or its deletion (gone, or no longer the
-- organization's).  Membership as the export has it, incrementally: a row
-- is the organization's when it is the root or one of its references leads
-- to a row that is; tables in export order, so a parent is decided before
-- its children, and a row whose membership changed brings the rows that
-- refer to it along.  A row once a member stays in move_members (present
-- false when it left): a batch read again gives the same deletions.
CREATE OR REPLACE FUNCTION outbox._move_changes(mv outbox.organization_moves, argument jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    batch_limit int := coalesce((argument->>'limit')::int, 1000);
    seqs bigint[];
    entry jsonb;
    ref jsonb;
    child jsonb;
    pks bigint[];
    rows_now jsonb;
    k bigint;
    r jsonb;
    member boolean;
    was boolean;
    changed bigint[];
    out jsonb := '[]';
    extra jsonb := '{}'; -- table key -> keys of rows to decide, found through their parents
    left_over bigint;
BEGIN
    DELETE FROM outbox.move_changes c
     WHERE c.relocation = mv.relocation
       AND c.seq = ANY (ARRAY(SELECT jsonb_array_elements_text(argument->'acknowledge')::bigint));
    seqs := ARRAY(SELECT c.seq FROM outbox.move_changes c WHERE c.relocation = mv.relocation
                   ORDER BY c.seq LIMIT batch_limit);
    FOR entry IN SELECT e.value FROM jsonb_array_elements(mv.plan->'order') WITH ORDINALITY e(value, n)
                  ORDER BY e.n LOOP
        pks := ARRAY(SELECT DISTINCT u.k FROM (
                        SELECT c.pk AS k FROM outbox.move_changes c
                         WHERE c.relocation = mv.relocation AND c.seq = ANY (seqs)
                           AND c.model = entry->>'model'
                        UNION
                        SELECT jsonb_array_elements_text(extra->(entry->>'model'))::bigint) u);
        CONTINUE WHEN cardinality(pks) = 0;
        rows_now := outbox._move_rows(entry, pks);
        changed := '{}';
        FOREACH k IN ARRAY pks LOOP
            r := rows_now->(k::text);
            member := false;
            IF r IS NOT NULL THEN
                member := entry->>'model' = mv.plan->>'root' AND k = mv.organization;
                FOR ref IN SELECT x.value FROM jsonb_array_elements(entry->'refs') x LOOP
                    EXIT WHEN member;
                    CONTINUE WHEN ref->>'kind' <> 'map' OR (ref->>'deferred')::boolean
                                  OR r->>(ref->>'column') IS NULL;
                    member := EXISTS (SELECT FROM outbox.move_members mm
                                       WHERE mm.relocation = mv.relocation
                                         AND mm.model = ref->>'parent'
                                         AND mm.pk = (r->>(ref->>'column'))::bigint AND mm.present);
                END LOOP;
            END IF;
            SELECT mm.present INTO was FROM outbox.move_members mm
             WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model' AND mm.pk = k;
            IF member THEN
                out := out || jsonb_build_array(jsonb_build_object(
                    'model', entry->>'model', 'pk', k, 'fields', r - (entry->>'pk')));
                INSERT INTO outbox.move_members AS mm (relocation, model, pk, present)
                VALUES (mv.relocation, entry->>'model', k, true)
                ON CONFLICT (relocation, model, pk) DO UPDATE SET present = true;
            ELSIF was IS NOT NULL THEN
                out := out || jsonb_build_array(jsonb_build_object(
                    'model', entry->>'model', 'pk', k, 'fields', NULL));
                UPDATE outbox.move_members mm SET present = false
                 WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model' AND mm.pk = k;
            END IF;
            IF member IS DISTINCT FROM coalesce(was, false) THEN
                changed := changed || k;
            END IF;
        END LOOP;
        CONTINUE WHEN cardinality(changed) = 0;
        -- The rows referring to those whose membership changed.
        FOR child IN SELECT e.value FROM jsonb_array_elements(mv.plan->'order') e LOOP
            FOR ref IN SELECT x.value FROM jsonb_array_elements(child->'refs') x
                        WHERE x.value->>'parent' = entry->>'model' AND x.value->>'kind' = 'map'
                          AND NOT (x.value->>'deferred')::boolean LOOP
                extra := jsonb_set(extra, ARRAY[child->>'model'],
                    coalesce(extra->(child->>'model'), '[]') || to_jsonb(ARRAY(
                        SELECT (j #>> '{}')::bigint FROM unnest(outbox._run_as_table_owner(
                            (child->>'relid')::oid::regclass,
                            format('SELECT pg_catalog.to_jsonb(t.%I) FROM %s t WHERE t.%I = ANY (SELECT'
                                   ' (j OPERATOR(pg_catalog.#>>) ''{}'')::bigint FROM pg_catalog.unnest($1) j)',
                                   child->>'pk', child->>'qualified', ref->>'column'),
                            ARRAY(SELECT to_jsonb(c) FROM unnest(changed) c))) j)));
            END LOOP;
        END LOOP;
    END LOOP;
    SELECT count(*) - cardinality(seqs) INTO left_over FROM outbox.move_changes c
     WHERE c.relocation = mv.relocation;
    RETURN jsonb_build_object('changes', out, 'seqs', to_jsonb(seqs), 'left', left_over);
END
$$;

-- in_flight (source, fenced): the transactions running when first asked
-- (after the fence committed), and how many of them still run.
CREATE OR REPLACE FUNCTION outbox._move_in_flight(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    running text[] := mv.in_flight;
    waiting int;
BEGIN
    IF NOT mv.fenced THEN
        RAISE EXCEPTION 'relocation %: the source is not fenced yet', mv.relocation
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF running IS NULL THEN
        -- Every session of this database that may write here (not
        -- autovacuum), pg_outbox's worker included (its cascade writes).
        running := ARRAY(SELECT l.virtualxid FROM pg_locks l
                           JOIN pg_stat_activity a ON a.pid = l.pid
                          WHERE l.locktype = 'virtualxid' AND l.granted
                            AND l.pid <> pg_backend_pid()
                            AND a.datid = (SELECT d.oid FROM pg_database d
                                            WHERE d.datname = current_database())
                            AND a.backend_type <> 'autovacuum worker');
        UPDATE outbox.organization_moves o SET in_flight = running, step = 'in_flight'
         WHERE o.relocation = mv.relocation;
    END IF;
    SELECT count(*) INTO waiting FROM pg_locks l
     WHERE l.locktype = 'virtualxid' AND l.granted AND l.virtualxid = ANY (running);
    IF waiting = 0 AND mv.outbox_mark IS NULL THEN
        -- Every write of the organization here has committed: its outbox
        -- rows are at most this one.  The worker delivers them at once.
        UPDATE outbox.organization_moves o
           SET outbox_mark = coalesce((SELECT max(b.id) FROM outbox.cell_outbox b), 0)
         WHERE o.relocation = mv.relocation;
        PERFORM outbox._wake_worker_at_commit();
    END IF;
    RETURN jsonb_build_object('waiting', waiting);
END
$$;

-- Deletes the rows of a plan entry whose primary keys are keys, as the
-- table's owner and without outbox rows (a move's target and the source it
-- left: the rows' messages are the other cell's); returns how many.
CREATE OR REPLACE FUNCTION outbox._move_delete_rows(entry jsonb, keys jsonb[]) RETURNS int
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT cardinality(outbox._run_as_table_owner_uncaptured((entry->>'relid')::oid::regclass,
        format('WITH w AS (DELETE FROM %s t WHERE t.%I = ANY (SELECT'
               ' (j OPERATOR(pg_catalog.#>>) ''{}'')::bigint FROM pg_catalog.unnest($1) j)'
               ' RETURNING t.%I) SELECT pg_catalog.to_jsonb(w.%I) FROM w',
               entry->>'qualified', entry->>'pk', entry->>'pk', entry->>'pk'),
        keys))
$$;

-- Sets the cycles' columns of the organization's rows here (the members
-- of mv present) to NULL, table by table of plan, before they are deleted.
CREATE OR REPLACE FUNCTION outbox._move_clear_cycles(mv outbox.organization_moves, plan jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entry jsonb;
    deferred text[];
BEGIN
        FOR entry IN SELECT e.value FROM jsonb_array_elements(plan) e LOOP
            deferred := outbox._relocation_deferred(entry);
            CONTINUE WHEN cardinality(deferred) = 0;
            PERFORM outbox._run_as_table_owner_uncaptured((entry->>'relid')::oid::regclass,
                format('WITH w AS (UPDATE %s t SET (%s) = ROW(%s) WHERE t.%I = ANY (SELECT'
                       ' (j OPERATOR(pg_catalog.#>>) ''{}'')::bigint FROM pg_catalog.unnest($1) j)'
                       ' RETURNING t.%I) SELECT pg_catalog.to_jsonb(w.%I) FROM w',
                       entry->>'qualified',
                       (SELECT string_agg(quote_ident(c), ', ') FROM unnest(deferred) c),
                       (SELECT string_agg('NULL', ', ') FROM unnest(deferred) c),
                       entry->>'pk', entry->>'pk', entry->>'pk'),
                ARRAY(SELECT to_jsonb(mm.pk) FROM outbox.move_members mm
                       WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
                         AND mm.present));
        END LOOP;
END
$$;

-- lift (target): the tombstones of parents in the other silo that the
-- organization's rows here refer to are walked again by this cell's
-- cascade (their ids renewed, above its tombstone watermark).  This cell
-- may have recorded and walked one before the rows came, finding no child:
-- a user deleted in control while its member's organization moved, whose
-- member the source's cascade had not deleted before its fence (which then
-- refused it) would stay here an orphan (test/integration/
-- relocation_cascade.sh; found by the soak).  The references are read as
-- each table's owner.  Returns the tombstones renewed.
CREATE OR REPLACE FUNCTION outbox._move_walk_tombstones_again(mv outbox.organization_moves)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entry jsonb;
    fk record;
    refs bigint[];
    n bigint;
    renewed bigint := 0;
BEGIN
    FOR entry IN SELECT e.value FROM outbox.relocation_state s, jsonb_array_elements(s.plan) e
                  WHERE s.relocation = mv.relocation LOOP
        FOR fk IN SELECT f.relid, f.column_name, f.parent_table, f.parent_silo
                    FROM outbox.registered_foreign_keys f
                   WHERE f.relid = (entry->>'relid')::oid LOOP
            refs := ARRAY(SELECT DISTINCT (r OPERATOR(pg_catalog.#>>) '{}')::bigint FROM unnest(
                outbox._run_as_table_owner(fk.relid,
                    format('SELECT pg_catalog.to_jsonb(t.%1$I) FROM %2$s t WHERE t.%1$I IS NOT NULL'
                           ' AND t.%3$I OPERATOR(pg_catalog.=) ANY (SELECT'
                           ' (j OPERATOR(pg_catalog.#>>) ''{}'')::bigint FROM pg_catalog.unnest($1) j)',
                           fk.column_name, entry->>'qualified', entry->>'pk'),
                    ARRAY(SELECT to_jsonb(mm.pk) FROM outbox.move_members mm
                           WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
                             AND mm.present))) r);
            CONTINUE WHEN cardinality(refs) = 0;
            -- A deleted control row is a cell tombstone (cascade.cpp).
            IF fk.parent_silo = 'control' THEN
                UPDATE outbox.cell_tombstone t SET id = DEFAULT
                 WHERE t.table_name = fk.parent_table AND t.object_identifier = ANY (refs);
            ELSE
                UPDATE outbox.control_tombstone t SET id = DEFAULT
                 WHERE t.table_name = fk.parent_table AND t.object_identifier = ANY (refs);
            END IF;
            GET DIAGNOSTICS n = ROW_COUNT;
            renewed := renewed + n;
        END LOOP;
    END LOOP;
    RETURN renewed;
END
$$;

-- delete (source, after the cutover): the organization's rows, children
-- first, limit at a time, as each table's owner, without outbox rows; the
-- first call clears the references of cycles (which point from a table to
-- one after it).
CREATE OR REPLACE FUNCTION outbox._move_delete(mv outbox.organization_moves, batch_limit int)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entry jsonb;
    pks bigint[];
    deleted int;
BEGIN
    IF mv.step NOT IN ('drained', 'deleting') THEN
        RAISE EXCEPTION 'relocation %: the source deletes the organization only once its outbox rows are delivered',
            mv.relocation USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF mv.step = 'drained' THEN
        PERFORM outbox._move_clear_cycles(mv, mv.plan->'order');
    END IF;
    -- Each table's members in key order, from the last key deleted on
    -- (plan.deleted): a scan from the start would pass every row already
    -- done, batch after batch.
    FOR entry IN SELECT e.value FROM jsonb_array_elements(mv.plan->'order') WITH ORDINALITY e(value, n)
                  ORDER BY e.n DESC LOOP
        pks := ARRAY(SELECT mm.pk FROM outbox.move_members mm
                      WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
                        AND mm.pk > coalesce((mv.plan->'deleted'->>(entry->>'model'))::bigint,
                                             -9223372036854775808)
                        AND mm.present ORDER BY mm.pk LIMIT batch_limit);
        CONTINUE WHEN cardinality(pks) = 0;
        deleted := outbox._move_delete_rows(entry, ARRAY(SELECT to_jsonb(k) FROM unnest(pks) k));
        -- pks are the present members of that range of keys.
        UPDATE outbox.move_members mm SET present = false
         WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
           AND mm.pk BETWEEN pks[1] AND pks[cardinality(pks)];
        UPDATE outbox.organization_moves o
           SET step = 'deleting', rows_done = o.rows_done + deleted, updated_at = clock_timestamp(),
               plan = jsonb_set(o.plan, '{deleted}', coalesce(o.plan->'deleted', '{}')
                                || jsonb_build_object(entry->>'model', pks[cardinality(pks)]))
         WHERE o.relocation = mv.relocation;
        RETURN jsonb_build_object('deleted', deleted, 'done', false);
    END LOOP;
    UPDATE outbox.organization_moves o
       SET state = 'complete', step = 'deleted', updated_at = clock_timestamp(),
           finished_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    DELETE FROM outbox.move_changes c WHERE c.relocation = mv.relocation;
    RETURN jsonb_build_object('deleted', 0, 'done', true);
END
$$;

-- stage (target): a chunk of the source's export into relocation_rows; a
-- chunk sent again adds nothing.
CREATE OR REPLACE FUNCTION outbox._move_stage(mv outbox.organization_moves, chunk jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    staged bigint;
BEGIN
    IF jsonb_typeof(chunk) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'relocation %: a chunk is an array of rows', mv.relocation
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO outbox.relocation_rows (relocation, ordinal, model, pk, fields)
    SELECT mv.relocation, (c->>0)::bigint, c->>1, (c->>2)::bigint, c->3
      FROM jsonb_array_elements(chunk) c
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS staged = ROW_COUNT;
    INSERT INTO outbox.move_members (relocation, model, pk, present)
    SELECT mv.relocation, c->>1, (c->>2)::bigint, true
      FROM jsonb_array_elements(chunk) c WHERE c->>2 IS NOT NULL AND mv.mode = 'move'
    ON CONFLICT DO NOTHING;
    RETURN jsonb_build_object('staged', staged);
END
$$;

-- import (target): the first call starts the import with the source's keys
-- once none of them is taken here; each call after it imports a chunk.
-- Which of by_model's keys ({model: [primary key, ...]}, a move's) are taken here,
-- model by model: what a move keeping primary keys would collide with.
-- Read as each table's owner (its policies and code run as that role).
CREATE OR REPLACE FUNCTION outbox._move_taken(by_model jsonb)
RETURNS TABLE (model text, "rows" bigint, taken bigint, first_taken bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    k record;
    t record;
    answer jsonb[];
BEGIN
    IF jsonb_typeof(by_model) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'argument.keys must be a JSON object of arrays of keys by table key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR k IN SELECT e.key, e.value FROM jsonb_each(by_model) e ORDER BY e.key LOOP
        SELECT * INTO t FROM outbox._move_tables() m WHERE m.model = k.key;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'table key % is no Organization-scoped table here', quote_literal(k.key)
                USING ERRCODE = 'undefined_table',
                      HINT = 'A move needs the same relocation scopes in both cells (outbox.check_models()).';
        ELSIF jsonb_typeof(k.value) IS DISTINCT FROM 'array' THEN
            RAISE EXCEPTION 'argument.keys.% must be an array of keys', k.key
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        answer := outbox._run_as_table_owner(t.relid,
            format('SELECT pg_catalog.jsonb_build_array(pg_catalog.count(*), pg_catalog.min(t.%I::bigint))'
                   ' FROM %s t WHERE t.%I = ANY (SELECT (j OPERATOR(pg_catalog.#>>) ''{}'')::bigint'
                   ' FROM pg_catalog.unnest($1) j)', t.pk, t.relid, t.pk),
            ARRAY(SELECT e FROM jsonb_array_elements(k.value) e));
        model := k.key;
        "rows" := jsonb_array_length(k.value);
        taken := (answer[1]->>0)::bigint;
        first_taken := (answer[1]->>1)::bigint;
        RETURN NEXT;
    END LOOP;
END
$$;

-- What a move says of keys taken in its target (a row of _move_taken).
CREATE OR REPLACE FUNCTION outbox._move_taken_message(mv outbox.organization_moves, model text,
    taken bigint, first_taken bigint) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('organization %s cannot move to cell %s: %s of its keys in %s are taken there (the first: %s)',
                  mv.organization, mv.to_cell, taken, model, first_taken)
$$;

-- keys (source): the primary keys of the move's export, ordinals first to
-- last, {model: [key, ...]}; with no move of that relocation here, those of
-- organization as it is now (outbox.plan_relocation's dry run).
CREATE OR REPLACE FUNCTION outbox._move_keys(p_relocation uuid, argument jsonb) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT FROM outbox.organization_moves o
                WHERE o.relocation = p_relocation AND o.side = 'source') THEN
        RETURN jsonb_build_object('keys', coalesce((
            SELECT jsonb_object_agg(g.model, g.pks) FROM (
                SELECT s.model, jsonb_agg(s.pk ORDER BY s.pk) AS pks FROM outbox.relocation_rows s
                 WHERE s.relocation = p_relocation AND s.pk IS NOT NULL
                   AND s.ordinal BETWEEN (argument->>'first')::bigint AND (argument->>'last')::bigint
                 GROUP BY s.model) g), '{}'));
    END IF;
    PERFORM outbox._require((argument->>'organization')::bigint, 'argument.organization');
    RETURN jsonb_build_object('keys', coalesce((
        SELECT jsonb_object_agg(g.model, g.pks) FROM (
            SELECT e.model, jsonb_agg(e.pk ORDER BY e.pk) AS pks
              FROM outbox.export_organizations(ARRAY[(argument->>'organization')::bigint]) e
             WHERE e.pk IS NOT NULL GROUP BY e.model) g), '{}'));
END
$$;

CREATE OR REPLACE FUNCTION outbox._move_import(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st outbox.relocation_state;
    found_taken record;
BEGIN
    SELECT * INTO st FROM outbox.relocation_state s WHERE s.relocation = mv.relocation;
    IF NOT FOUND AND mv.mode = 'fork' THEN
        -- part 2's import: new keys, capture fired (new objects for control)
        PERFORM outbox._import_begin(mv.relocation, 'Organization', NULL);
        RETURN jsonb_build_object('more', true);
    ELSIF NOT FOUND THEN
        ANALYZE outbox.move_members; -- all staged: as in the export
        PERFORM outbox._import_begin(mv.relocation, 'Organization', NULL);
        UPDATE outbox.relocation_state s SET keys = 'kept' WHERE s.relocation = mv.relocation
        RETURNING * INTO st;
        -- Checked before the copy (step check); again here, for rows the
        -- target wrote since.
        SELECT * INTO found_taken FROM outbox._move_taken(coalesce((
            SELECT jsonb_object_agg(g.model, g.pks) FROM (
                SELECT s.model, jsonb_agg(s.pk) AS pks FROM outbox.relocation_rows s
                 WHERE s.relocation = mv.relocation AND s.pk IS NOT NULL GROUP BY s.model) g), '{}')) k
         WHERE k.taken > 0 ORDER BY k.model LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION '%', outbox._move_taken_message(mv, found_taken.model, found_taken.taken,
                                                           found_taken.first_taken)
                USING ERRCODE = 'unique_violation',
                      HINT = 'A move keeps primary keys: keep each cell''s id ranges apart (its sequences), then cancel the move and start it again.';
        END IF;
        RETURN jsonb_build_object('more', true);
    END IF;
    IF outbox._import_step(mv.relocation) THEN
        RETURN jsonb_build_object('more', true);
    END IF;
    IF mv.mode = 'fork' THEN
        -- The copy is all there is to a fork: it is done, under a new root key.
        UPDATE outbox.organization_moves o
           SET state = 'complete', step = 'imported', updated_at = clock_timestamp(),
               finished_at = coalesce(o.finished_at, clock_timestamp())
         WHERE o.relocation = mv.relocation;
    END IF;
    RETURN jsonb_build_object('more', false, 'root', (
        SELECT m.new FROM outbox.relocation_pk_map m
         WHERE m.relocation = mv.relocation AND m.table_key = mv.plan->>'root'
           AND m.old = mv.organization));
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
        deferred := outbox._relocation_deferred(entry);
        cols := ARRAY(SELECT jsonb_array_elements_text(entry->'columns') EXCEPT SELECT unnest(deferred));
        applied := applied + cardinality(outbox._run_as_table_owner_uncaptured(
            (entry->>'relid')::oid::regclass,
            format('WITH w AS (INSERT INTO %1$s AS t (%2$s) OVERRIDING SYSTEM VALUE SELECT %3$s'
                   ' FROM pg_catalog.unnest($1) j, pg_catalog.jsonb_populate_record(NULL::%1$s, j) r'
                   ' ON CONFLICT (%4$I) DO %5$s RETURNING t.%4$I) SELECT pg_catalog.to_jsonb(w.%4$I) FROM w',
                   entry->>'qualified',
                   (SELECT string_agg(quote_ident(c), ', ') FROM unnest(cols || (entry->>'pk')) c),
                   (SELECT string_agg('r.' || quote_ident(c), ', ') FROM unnest(cols || (entry->>'pk')) c),
                   entry->>'pk',
                   CASE WHEN cardinality(cols) = 0 THEN 'NOTHING'
                        ELSE format('UPDATE SET (%s) = ROW(%s)',
                                    (SELECT string_agg(quote_ident(c), ', ') FROM unnest(cols) c),
                                    (SELECT string_agg('excluded.' || quote_ident(c), ', ') FROM unnest(cols) c))
                   END),
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
            format('WITH w AS (UPDATE %1$s AS t SET (%2$s) = ROW(%3$s)'
                   ' FROM pg_catalog.unnest($1) j, pg_catalog.jsonb_populate_record(NULL::%1$s, j) r'
                   ' WHERE t.%4$I OPERATOR(pg_catalog.=) r.%4$I RETURNING t.%4$I)'
                   ' SELECT pg_catalog.to_jsonb(w.%4$I) FROM w',
                   entry->>'qualified',
                   (SELECT string_agg(quote_ident(c), ', ') FROM unnest(deferred) c),
                   (SELECT string_agg('r.' || quote_ident(c), ', ') FROM unnest(deferred) c),
                   entry->>'pk'),
            rows_to_write);
    END LOOP;
    FOR entry IN SELECT e.value FROM jsonb_array_elements(plan) WITH ORDINALITY e(value, n)
                  ORDER BY e.n DESC LOOP
        rows_to_write := ARRAY(SELECT c->'pk' FROM jsonb_array_elements(changes) c
                                WHERE c->>'model' = entry->>'model'
                                  AND jsonb_typeof(c->'fields') IS DISTINCT FROM 'object');
        CONTINUE WHEN cardinality(rows_to_write) = 0;
        applied := applied + outbox._move_delete_rows(entry, rows_to_write);
        UPDATE outbox.move_members mm SET present = false
         WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
           AND mm.pk = ANY (ARRAY(SELECT (w #>> '{}')::bigint FROM unnest(rows_to_write) w));
    END LOOP;
    RETURN jsonb_build_object('applied', applied);
END
$$;

-- cancel (either side, before the cutover): the target removes what it
-- received (without outbox rows: it wrote them without), both forget
-- the move's staging, change log and members, lift their fence, and drop
-- the triggers when no other move needs them.  The source is as it was.
-- Returns the rows deleted.
CREATE OR REPLACE FUNCTION outbox._move_cancel_here(mv outbox.organization_moves) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    plan jsonb := (SELECT s.plan FROM outbox.relocation_state s WHERE s.relocation = mv.relocation);
    entry jsonb;
    deleted bigint := 0;
    keys jsonb[];
    t record;
BEGIN
    IF mv.state = 'cancelled' THEN
        RETURN jsonb_build_object('deleted', 0);
    ELSIF mv.mode = 'fork' AND mv.state <> 'complete' THEN
        -- What the import wrote goes as it came, captured (part 2's cancel).
        IF mv.side = 'target' AND EXISTS (SELECT FROM outbox.relocation_state s
                                           WHERE s.relocation = mv.relocation
                                             AND s.state <> 'cancelled') THEN
            deleted := outbox.cancel_relocation(mv.relocation);
        END IF;
        plan := NULL;
    ELSIF mv.state = 'complete' OR mv.step IN ('deleting', 'deleted')
          OR (mv.side = 'target' AND NOT mv.fenced) THEN
        RAISE EXCEPTION 'relocation % is past its cutover: organization % lives in cell % now',
            mv.relocation, mv.organization, mv.to_cell
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF mv.side = 'target' AND plan IS NOT NULL THEN
        PERFORM outbox._move_clear_cycles(mv, plan);
        FOR entry IN SELECT e.value FROM jsonb_array_elements(plan) WITH ORDINALITY e(value, n)
                      ORDER BY e.n DESC LOOP
            keys := ARRAY(SELECT to_jsonb(mm.pk) FROM outbox.move_members mm
                           WHERE mm.relocation = mv.relocation AND mm.model = entry->>'model'
                             AND mm.present);
            CONTINUE WHEN cardinality(keys) = 0;
            deleted := deleted + outbox._move_delete_rows(entry, keys);
        END LOOP;
        UPDATE outbox.relocation_state s
           SET state = 'cancelled', step = NULL, updated_at = clock_timestamp(),
               finished_at = clock_timestamp()
         WHERE s.relocation = mv.relocation;
    END IF;
    UPDATE outbox.organization_moves o
       SET state = 'cancelled', step = 'cancelled', fenced = false, updated_at = clock_timestamp(),
           finished_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    DELETE FROM outbox.move_changes c WHERE c.relocation = mv.relocation;
    DELETE FROM outbox.move_members mm WHERE mm.relocation = mv.relocation;
    DELETE FROM outbox.relocation_rows s WHERE s.relocation = mv.relocation;
    -- The triggers go when nothing here needs them: no move under way, no
    -- source that stays fenced for an organization it gave away.
    IF NOT outbox._moving_here() AND NOT EXISTS (
        SELECT FROM outbox.organization_moves o WHERE o.side = 'source' AND o.fenced) THEN
        FOR t IN SELECT g.tgname, g.tgrelid::regclass AS rel FROM pg_trigger g
                  WHERE g.tgfoid = 'outbox._move_trigger()'::regprocedure LOOP
            EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
        END LOOP;
    END IF;
    RETURN jsonb_build_object('deleted', deleted);
END
$$;

-- Control's call into a cell: outbox.relocation_peer there.  Every
-- operation but prepare names a move this cell takes part in, on the side
-- the operation is for.
CREATE OR REPLACE FUNCTION outbox.relocation_peer(protocol int, operation text, argument jsonb)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    link outbox.control_link;
    mv outbox.organization_moves;
    p_relocation uuid;
    wanted text;
    t record;
BEGIN
    IF protocol IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION 'relocation protocol % is not supported here (this side speaks 1)',
            coalesce(protocol::text, 'NULL') USING ERRCODE = 'feature_not_supported';
    END IF;
    SELECT * INTO link FROM outbox.control_link;
    IF current_setting('outbox.silo_mode') <> 'cell' OR NOT FOUND
       OR link.link_role <> session_user THEN
        RAISE EXCEPTION 'role % is not the link role of this cell''s control', quote_ident(session_user)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- By identity too: dropped and created again, or a superuser now.
    PERFORM outbox._link_peer(1);
    IF jsonb_typeof(argument) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'argument must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    p_relocation := (argument->>'relocation')::uuid;
    PERFORM outbox._require(p_relocation, 'argument.relocation');
    IF operation = 'prepare' THEN
        RETURN outbox._move_prepare(link.cell_name, argument);
    ELSIF operation = 'cancel' THEN
        -- The tables whose move triggers the cancel may drop are locked
        -- before the move's row: a writer's trigger logs into
        -- move_changes, whose key check waits for that row, while holding
        -- its table, which DROP TRIGGER would wait for (a deadlock, seen).
        FOR t IN SELECT DISTINCT g.tgrelid::regclass AS rel FROM pg_trigger g
                  WHERE g.tgfoid = 'outbox._move_trigger()'::regprocedure ORDER BY 1 LOOP
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', t.rel);
        END LOOP;
        SELECT * INTO mv FROM outbox.organization_moves o
         WHERE o.relocation = p_relocation AND o.side <> 'control' FOR UPDATE;
        IF NOT FOUND THEN
            RETURN jsonb_build_object('deleted', 0); -- never prepared here
        END IF;
        RETURN outbox._move_cancel_here(mv);
    ELSIF operation = 'keys' THEN -- of a move's export here, or a dry run's
        RETURN outbox._move_keys(p_relocation, argument);
    ELSIF operation = 'taken' THEN -- read only, for any move and dry run
        RETURN jsonb_build_object('taken', coalesce((
            SELECT jsonb_agg(to_jsonb(k)) FROM outbox._move_taken(argument->'keys') k), '[]'));
    END IF;
    wanted := CASE WHEN operation IN ('export', 'chunk', 'changes', 'fence', 'in_flight',
                                      'drained', 'delete', 'finish') THEN 'source'
                   WHEN operation IN ('stage', 'import', 'apply', 'lift') THEN 'target' END;
    IF wanted IS NULL THEN
        RAISE EXCEPTION 'operation % is not one of relocation protocol 1', quote_literal(operation)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO mv FROM outbox.organization_moves o
     WHERE o.relocation = p_relocation AND o.side = wanted FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relocation % is no move whose % this cell is', p_relocation, wanted
            USING ERRCODE = 'undefined_object';
    ELSIF mv.state = 'cancelled' THEN
        RAISE EXCEPTION 'relocation % was cancelled', p_relocation
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    CASE operation
    WHEN 'export' THEN
        RETURN outbox._move_export(mv);
    WHEN 'chunk' THEN
        RETURN jsonb_build_object('rows', coalesce((
            SELECT jsonb_agg(jsonb_build_array(s.ordinal, s.model, s.pk, s.fields) ORDER BY s.ordinal)
              FROM outbox.relocation_rows s
             WHERE s.relocation = p_relocation
               AND s.ordinal BETWEEN (argument->>'first')::bigint AND (argument->>'last')::bigint),
            '[]'));
    WHEN 'changes' THEN
        RETURN outbox._move_changes(mv, argument);
    WHEN 'fence' THEN
        UPDATE outbox.organization_moves o
           SET fenced = true, fenced_at = coalesce(o.fenced_at, clock_timestamp()), step = 'fenced',
               updated_at = clock_timestamp()
         WHERE o.relocation = p_relocation;
        -- Fenced by an earlier call whose answer control lost: since then.
        RETURN jsonb_build_object('fenced', true, 'since', CASE WHEN mv.fenced THEN mv.fenced_at END);
    WHEN 'in_flight' THEN
        RETURN outbox._move_in_flight(mv);
    WHEN 'drained' THEN
        IF mv.outbox_mark IS NULL THEN
            RAISE EXCEPTION 'relocation %: the source''s transactions in flight are not waited for yet',
                p_relocation USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        IF mv.step NOT IN ('drained', 'deleting', 'deleted') AND NOT EXISTS (
            SELECT FROM outbox.cell_outbox b WHERE b.id <= mv.outbox_mark) THEN
            UPDATE outbox.organization_moves o SET step = 'drained', updated_at = clock_timestamp()
             WHERE o.relocation = p_relocation;
        END IF;
        RETURN jsonb_build_object('left', (SELECT count(*) FROM outbox.cell_outbox b
                                            WHERE b.id <= mv.outbox_mark));
    WHEN 'delete' THEN
        IF mv.state = 'complete' THEN
            RETURN jsonb_build_object('deleted', 0, 'done', true);
        END IF;
        RETURN outbox._move_delete(mv, coalesce((argument->>'limit')::int, 1000));
    WHEN 'finish' THEN
        IF mv.mode <> 'fork' THEN
            RAISE EXCEPTION 'relocation % is a move: its source finishes by deleting the organization',
                p_relocation USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        UPDATE outbox.organization_moves o
           SET state = 'complete', step = 'exported', updated_at = clock_timestamp(),
               finished_at = coalesce(o.finished_at, clock_timestamp())
         WHERE o.relocation = p_relocation;
        DELETE FROM outbox.relocation_rows s WHERE s.relocation = p_relocation;
        RETURN jsonb_build_object('finished', true);
    WHEN 'stage' THEN
        RETURN outbox._move_stage(mv, argument->'rows');
    WHEN 'import' THEN
        RETURN outbox._move_import(mv);
    WHEN 'apply' THEN
        RETURN outbox._move_apply(mv, argument->'changes');
    WHEN 'lift' THEN
        IF mv.step <> 'lifted' THEN
            PERFORM outbox._move_walk_tombstones_again(mv);
        END IF;
        UPDATE outbox.organization_moves o
           SET fenced = false, state = 'complete', step = 'lifted',
               lifted_at = coalesce(o.lifted_at, clock_timestamp()),
               finished_at = coalesce(o.finished_at, clock_timestamp()), updated_at = clock_timestamp()
         WHERE o.relocation = p_relocation;
        RETURN jsonb_build_object('lifted', true);
    END CASE;
END
$$;

------------------------------------------------------------------------------
-- On control: the move and its driver
------------------------------------------------------------------------------

-- The cell organization root_id lives in, checked as a move from there to
-- to_cell needs: on control, both cells linked.
CREATE OR REPLACE FUNCTION outbox._move_cells(root_id bigint, to_cell text) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    from_cell text;
BEGIN
    PERFORM outbox._require(root_id, 'root_id');
    PERFORM outbox._require(to_cell, 'to_cell');
    IF current_setting('outbox.silo_mode') <> 'control' THEN
        RAISE EXCEPTION 'organizations are moved from control, and this is %',
            CASE current_setting('outbox.silo_mode') WHEN 'cell' THEN 'a cell' ELSE 'a monolith' END
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT o.cell INTO from_cell FROM outbox.organization_cells o WHERE o.organization = root_id;
    IF from_cell IS NULL THEN
        RAISE EXCEPTION 'organization % has no cell in outbox.organization_cells', root_id
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'SELECT outbox.set_organization_cell(<organization>, <cell>);';
    ELSIF from_cell = to_cell THEN
        RAISE EXCEPTION 'organization % lives in cell % already', root_id, to_cell
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.cells c WHERE c.name = to_cell) THEN
        RAISE EXCEPTION 'to_cell: cell % is not registered', quote_literal(to_cell)
            USING ERRCODE = 'undefined_object';
    END IF;
    IF EXISTS (SELECT FROM outbox.cells c WHERE c.name IN (from_cell, to_cell) AND c.server IS NULL) THEN
        RAISE EXCEPTION 'cell % is not linked', (SELECT c.name FROM outbox.cells c
                                                  WHERE c.name IN (from_cell, to_cell)
                                                    AND c.server IS NULL ORDER BY c.name LIMIT 1)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'A move goes over the links: outbox.set_cell_server(cell, server, link_role).';
    END IF;
    RETURN from_cell;
END
$$;

-- The extension owner's, on control: moves organization root_id from the
-- cell outbox.organization_cells names to to_cell; returns the move's
-- relocation id (outbox.relocations shows it).  Control's worker does the
-- rest.  mode move keeps the primary keys; mode fork copies the
-- organization with new keys and keeps the source, as Sentry's relocation
-- does (docs/relocation.md).
CREATE OR REPLACE FUNCTION outbox.relocate_organization(root_id bigint, to_cell text,
    mode text DEFAULT 'move') RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    from_cell text;
    moving uuid;
    p_relocation uuid := gen_random_uuid();
BEGIN
    PERFORM outbox._require(mode, 'mode');
    IF mode NOT IN ('move', 'fork') THEN
        RAISE EXCEPTION 'mode must be move or fork, not %', quote_literal(mode)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    from_cell := outbox._move_cells(root_id, to_cell);
    SELECT o.relocation INTO moving FROM outbox.organization_moves o
     WHERE o.organization = root_id AND o.side = 'control'
       AND o.state NOT IN ('complete', 'cancelled');
    IF FOUND THEN
        RAISE EXCEPTION 'organization % is moving already (relocation %)', root_id, moving
            USING ERRCODE = 'object_in_use';
    END IF;
    INSERT INTO outbox.organization_moves (relocation, organization, side, mode, from_cell, to_cell,
                                           step)
    VALUES (p_relocation, root_id, 'control', mode, from_cell, to_cell, 'prepare');
    PERFORM outbox._wake_worker_at_commit();
    RETURN p_relocation;
END
$$;

-- The extension owner's, on control: a dry run of moving organization
-- root_id to to_cell, up front: per Organization-scoped table, the
-- organization's rows in its cell now and how many of their primary keys
-- to_cell has taken (a move keeping them would be refused: the move checks
-- the same before it copies anything).  Exports the organization in its
-- cell, in this call.
CREATE OR REPLACE FUNCTION outbox.plan_relocation(root_id bigint, to_cell text)
RETURNS TABLE (model text, "rows" bigint, taken bigint, first_taken bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    from_cell text := outbox._move_cells(root_id, to_cell);
    dry_run jsonb := jsonb_build_object('relocation', gen_random_uuid(), 'organization', root_id);
    keys jsonb;
BEGIN
    keys := outbox._relocation_call((SELECT c.server FROM outbox.cells c WHERE c.name = from_cell),
                                    from_cell, 'keys', dry_run::text)::jsonb->'keys';
    RETURN QUERY
    SELECT t->>'model', (t->>'rows')::bigint, (t->>'taken')::bigint, (t->>'first_taken')::bigint
      FROM jsonb_array_elements(outbox._relocation_call(
               (SELECT c.server FROM outbox.cells c WHERE c.name = to_cell), to_cell, 'taken',
               (dry_run || jsonb_build_object('keys', keys))::text)::jsonb->'taken') t
     ORDER BY 1;
END
$$;

-- The move relocation on control, locked (a step under way holds the row:
-- this waits for it); NULL when it is no move driven from here.
CREATE OR REPLACE FUNCTION outbox._move_locked(p_relocation uuid)
RETURNS outbox.organization_moves
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM outbox.organization_moves o
     WHERE o.relocation = p_relocation AND o.side = 'control' FOR UPDATE
$$;

-- pause_relocation of a move: before its fence only (a pause after it would
-- hold the organization's writes).
CREATE OR REPLACE FUNCTION outbox._pause_move(mv outbox.organization_moves) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF mv.state <> 'moving' THEN
        RAISE EXCEPTION 'relocation % is %: only a move under way can be paused', mv.relocation,
            mv.state USING ERRCODE = 'object_not_in_prerequisite_state';
    ELSIF mv.step NOT IN ('prepare', 'export', 'check', 'copy', 'import', 'catch_up') THEN
        RAISE EXCEPTION 'relocation % is at step %, past its fence: a pause would hold organization %''s writes',
            mv.relocation, mv.step, mv.organization
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Wait for the move to end, or cancel it before its switch.';
    END IF;
    UPDATE outbox.organization_moves o SET state = 'paused', updated_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
END
$$;

-- The extension owner's: a paused move goes on (control's worker takes it
-- up at once, its failures forgotten).
CREATE OR REPLACE FUNCTION outbox.resume_relocation(relocation uuid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    mv outbox.organization_moves;
BEGIN
    PERFORM outbox._require(relocation, 'relocation');
    mv := outbox._move_locked(relocation);
    IF mv.relocation IS NULL THEN
        RAISE EXCEPTION 'relocation % is no move driven from here', relocation
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'An import resumes with CALL outbox.import_organizations (or import_users) again.';
    ELSIF mv.state NOT IN ('paused', 'failed') THEN
        RAISE EXCEPTION 'relocation % is %: only a paused or failed move can be resumed', relocation,
            mv.state USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE outbox.organization_moves o
       SET state = 'moving', retry_at = NULL, failures = 0, error = NULL,
           updated_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    PERFORM outbox._wake_worker_at_commit();
END
$$;

-- cancel_relocation of a move, before its switch: the source first (its
-- fence lifts: the organization's writes go on there, where
-- organization_cells still places it), then the target (what it received
-- goes, its fence last).  From the caller's session, through the links'
-- servers and the caller's user mappings; an error leaves the move as it
-- was at the cell that raised it, and a second cancel finishes it.
CREATE OR REPLACE FUNCTION outbox._cancel_move(mv outbox.organization_moves) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deleted bigint;
BEGIN
    IF mv.state = 'cancelled' THEN
        RAISE EXCEPTION 'relocation % is already cancelled', mv.relocation
            USING ERRCODE = 'object_not_in_prerequisite_state';
    ELSIF mv.state = 'complete' OR mv.step IN ('switch', 'delete', 'done') THEN
        RAISE EXCEPTION 'relocation % is past its cutover: organization % lives in cell % now',
            mv.relocation, mv.organization, mv.to_cell
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Move it back with outbox.relocate_organization.';
    END IF;
    PERFORM outbox._move_call(mv, mv.from_cell, 'cancel');
    deleted := (outbox._move_call(mv, mv.to_cell, 'cancel')->>'deleted')::bigint;
    UPDATE outbox.organization_moves o
       SET state = 'cancelled', step = 'cancelled', fenced = false, updated_at = clock_timestamp(),
           finished_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    RETURN deleted;
END
$$;

-- One call into a cell of the move (its answer parsed).
CREATE OR REPLACE FUNCTION outbox._move_call(mv outbox.organization_moves, cell text,
    operation text, argument jsonb DEFAULT '{}') RETURNS jsonb
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT outbox._relocation_call(c.server, cell, operation,
               (argument || jsonb_build_object('relocation', mv.relocation))::text)::jsonb
      FROM outbox.cells c WHERE c.name = cell
$$;

-- The next step of mv (control's row, locked); returns whether there is
-- more to do at once.
CREATE OR REPLACE FUNCTION outbox._move_advance(mv outbox.organization_moves) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chunk_rows bigint := current_setting('outbox.relocation_chunk_rows')::bigint;
    answer jsonb;
    next_step text := mv.step;
    n bigint;
    found_taken record;
BEGIN
    CASE mv.step
    WHEN 'prepare' THEN
        PERFORM outbox._move_call(mv, mv.to_cell, 'prepare', jsonb_build_object(
            'side', 'target', 'organization', mv.organization, 'from', mv.from_cell, 'to', mv.to_cell,
            'mode', mv.mode));
        PERFORM outbox._move_call(mv, mv.from_cell, 'prepare', jsonb_build_object(
            'side', 'source', 'organization', mv.organization, 'from', mv.from_cell, 'to', mv.to_cell,
            'mode', mv.mode));
        next_step := 'export';
    WHEN 'export' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'export');
        mv.rows_total := (answer->>'rows')::bigint;
        next_step := CASE mv.mode WHEN 'move' THEN 'check' ELSE 'copy' END;
    WHEN 'check' THEN
        -- Before anything is copied: the target has none of the keys.  A
        -- key taken there fails the move, for the operator to cancel (or,
        -- the row gone, resume).
        n := coalesce((mv.plan->>'checked')::bigint, 0);
        answer := outbox._move_call(mv, mv.to_cell, 'taken', jsonb_build_object('keys',
            outbox._move_call(mv, mv.from_cell, 'keys', jsonb_build_object(
                'first', n + 1, 'last', n + 10 * chunk_rows))->'keys'));
        SELECT t->>'model' AS model, (t->>'taken')::bigint AS taken,
               (t->>'first_taken')::bigint AS first_taken INTO found_taken
          FROM jsonb_array_elements(answer->'taken') t
         WHERE (t->>'taken')::bigint > 0 ORDER BY t->>'model' LIMIT 1;
        IF FOUND THEN
            UPDATE outbox.organization_moves o
               SET state = 'failed', updated_at = clock_timestamp(),
                   error = format('check: %s', outbox._move_taken_message(mv, found_taken.model,
                                      found_taken.taken, found_taken.first_taken))
             WHERE o.relocation = mv.relocation;
            RETURN false;
        END IF;
        mv.plan := coalesce(mv.plan, '{}') || jsonb_build_object('checked', n + 10 * chunk_rows);
        IF n + 10 * chunk_rows >= mv.rows_total THEN
            next_step := 'copy';
        END IF;
    WHEN 'copy' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'chunk', jsonb_build_object(
            'first', mv.rows_done + 1, 'last', mv.rows_done + chunk_rows));
        n := jsonb_array_length(answer->'rows');
        IF n = 0 OR (answer->'rows'->0->>0)::bigint <> mv.rows_done + 1 THEN
            RAISE EXCEPTION 'relocation %: cell % sent no row % of its export', mv.relocation,
                mv.from_cell, mv.rows_done + 1 USING ERRCODE = 'protocol_violation';
        END IF;
        PERFORM outbox._move_call(mv, mv.to_cell, 'stage', jsonb_build_object('rows', answer->'rows'));
        mv.rows_done := mv.rows_done + n;
        IF mv.rows_done >= mv.rows_total THEN
            next_step := 'import';
        END IF;
    WHEN 'import' THEN
        answer := outbox._move_call(mv, mv.to_cell, 'import');
        IF (answer->>'more')::boolean THEN
            NULL;
        ELSIF mv.mode = 'move' THEN
            next_step := 'catch_up';
        ELSE
            -- A fork is a new organization, in the target, under the key
            -- the import gave its root; the source keeps the original.
            INSERT INTO outbox.organization_cells (organization, cell)
            VALUES ((answer->>'root')::bigint, mv.to_cell)
            ON CONFLICT ON CONSTRAINT organization_cells_pkey
                DO UPDATE SET cell = excluded.cell, updated_at = now();
            PERFORM outbox._move_call(mv, mv.from_cell, 'finish');
            UPDATE outbox.organization_moves o
               SET state = 'complete', step = 'done', rows_done = mv.rows_done,
                   plan = coalesce(o.plan, '{}') || jsonb_build_object('forked_as', answer->'root'),
                   updated_at = clock_timestamp(), finished_at = clock_timestamp()
             WHERE o.relocation = mv.relocation;
            RETURN false;
        END IF;
    WHEN 'catch_up', 'last_catch_up' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'changes', jsonb_build_object(
            'acknowledge', coalesce(mv.plan->'acknowledge', '[]'), 'limit', chunk_rows));
        IF jsonb_array_length(answer->'changes') > 0 THEN
            PERFORM outbox._move_call(mv, mv.to_cell, 'apply',
                                      jsonb_build_object('changes', answer->'changes'));
        END IF;
        mv.plan := coalesce(mv.plan, '{}') || jsonb_build_object('acknowledge', answer->'seqs');
        mv.changes := (answer->>'left')::bigint;
        mv.changes_applied := mv.changes_applied + jsonb_array_length(answer->'changes');
        IF mv.step = 'catch_up' AND mv.changes <= greatest(chunk_rows / 10, 1) THEN
            next_step := 'fence';
        ELSIF mv.step = 'last_catch_up' AND mv.changes = 0
              AND jsonb_array_length(answer->'seqs') = 0 THEN
            next_step := 'drain';
        END IF;
    WHEN 'fence' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'fence');
        -- A step tried again after its answer was lost: the pause began at
        -- the first fence (the source's clock).
        mv.fenced_at := coalesce((answer->>'since')::timestamptz, clock_timestamp());
        next_step := 'in_flight';
    WHEN 'in_flight' THEN
        IF (outbox._move_call(mv, mv.from_cell, 'in_flight')->>'waiting')::int = 0 THEN
            next_step := 'last_catch_up';
        ELSE
            PERFORM pg_sleep(0.005);
        END IF;
    WHEN 'switch' THEN
        INSERT INTO outbox.organization_cells AS o (organization, cell)
        VALUES (mv.organization, mv.to_cell)
        ON CONFLICT ON CONSTRAINT organization_cells_pkey
            DO UPDATE SET cell = excluded.cell, updated_at = now()
            WHERE o.cell IS DISTINCT FROM excluded.cell;
        PERFORM outbox._move_call(mv, mv.to_cell, 'lift');
        mv.lifted_at := clock_timestamp();
        next_step := 'delete';
        mv.rows_done := 0;
    WHEN 'drain' THEN
        -- The source's worker delivers them (woken when its transactions in
        -- flight were over); look again shortly.
        IF (outbox._move_call(mv, mv.from_cell, 'drained')->>'left')::bigint = 0 THEN
            next_step := 'switch';
        ELSE
            PERFORM pg_sleep(0.01);
        END IF;
    WHEN 'delete' THEN
        answer := outbox._move_call(mv, mv.from_cell, 'delete', jsonb_build_object('limit', chunk_rows));
        mv.rows_done := mv.rows_done + (answer->>'deleted')::bigint;
        IF (answer->>'done')::boolean THEN
            UPDATE outbox.organization_moves o
               SET state = 'complete', step = 'done', rows_done = mv.rows_done,
                   updated_at = clock_timestamp(), finished_at = clock_timestamp()
             WHERE o.relocation = mv.relocation;
            RETURN false;
        END IF;
    END CASE;
    UPDATE outbox.organization_moves o
       SET step = next_step, rows_done = mv.rows_done, rows_total = mv.rows_total,
           changes = mv.changes, changes_applied = mv.changes_applied, plan = mv.plan,
           fenced = o.fenced OR next_step IN ('in_flight', 'last_catch_up', 'drain', 'switch'),
           fenced_at = mv.fenced_at, lifted_at = mv.lifted_at, updated_at = clock_timestamp()
     WHERE o.relocation = mv.relocation;
    RETURN true;
END
$$;

-- Control's worker: the next step of a move that is due, in this
-- transaction (committed durably: a switch lost in a crash would be done
-- again, but only after it was acknowledged to nobody).  A failed step is
-- tried again after 1 s, 2 s, ... a minute, its error in
-- outbox.relocations.  Returns whether to go on at once.
CREATE OR REPLACE FUNCTION outbox._move_step() RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mv outbox.organization_moves;
    more boolean;
    message text;
BEGIN
    SELECT * INTO mv FROM outbox.organization_moves o
     WHERE o.side = 'control' AND o.state = 'moving'
       AND (o.retry_at IS NULL OR o.retry_at <= clock_timestamp())
     ORDER BY o.updated_at LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM set_config('synchronous_commit', 'on', true);
    BEGIN
        more := outbox._move_advance(mv);
        IF mv.failures > 0 THEN
            UPDATE outbox.organization_moves o SET error = NULL, failures = 0, retry_at = NULL
             WHERE o.relocation = mv.relocation;
        END IF;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS message = MESSAGE_TEXT;
        UPDATE outbox.organization_moves o
           SET error = format('%s: %s', o.step, message), failures = o.failures + 1,
               retry_at = clock_timestamp() + least(60, 2 ^ least(o.failures, 6)) * interval '1 second',
               updated_at = clock_timestamp()
         WHERE o.relocation = mv.relocation;
        more := false;
    END;
    RETURN more;
END
$$;
