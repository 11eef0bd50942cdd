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
--   switch         outbox.organization_cells names the new cell, then the
--                  target's fence lifts: the write pause ends.  The
--                  target holds its outbox rows of the organization
--                  meanwhile (its shards of the organization paused, as
--                  outbox.pause_shard does: the writes are taken and their
--                  messages wait);
--   drain          the source's outbox rows written before its fence are
--                  delivered, then the target releases its own: control
--                  takes every message of the organization from the
--                  source before any from the target (whose import and
--                  catch-up write no outbox rows).  Outside the write
--                  pause: it waits for the source's worker and its link
--                  (issue 44: a second of the pause, before);
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
-- to a primary key), as the fence and the change log need them.  ROWS:
-- see _partition_tree.
CREATE OR REPLACE FUNCTION outbox._move_tables()
RETURNS TABLE (relid regclass, model text, pk name, refs jsonb)
LANGUAGE sql STABLE ROWS 20
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

-- The change log and the fence (src/relocation/move/move_trigger.cpp):
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

-- A stale client's new row that refers to an organization this cell gave
-- away: OBM01 before the foreign key's 23503 (move_trigger.cpp).  BEFORE
-- INSERT OR UPDATE FOR EACH ROW on each table (leaf partitions included)
-- that refers to the Organization scope's root, and on the root.
CREATE OR REPLACE FUNCTION outbox._move_row_trigger() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__move_row_trigger';

-- Tells every backend, at commit, that outbox.organization_moves changed:
-- the move triggers keep whether a cell has any move or fence until then
-- (move_trigger.cpp), so that a cell with none pays no query per
-- statement.
CREATE OR REPLACE FUNCTION outbox._move_moves_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__move_moves_changed';

-- The move's triggers here: those of _move_trigger and _move_row_trigger.
CREATE OR REPLACE FUNCTION outbox._move_triggers()
RETURNS TABLE (tgname name, rel regclass)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT g.tgname, g.tgrelid::regclass FROM pg_trigger g
     WHERE g.tgfoid IN ('outbox._move_trigger()'::regprocedure,
                        'outbox._move_row_trigger()'::regprocedure)
$$;

-- Does a move this cell takes part in run (its triggers must stay)?
CREATE OR REPLACE FUNCTION outbox._moving_here() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT FROM outbox.organization_moves o
                    WHERE o.side <> 'control' AND o.state NOT IN ('complete', 'cancelled'))
$$;

-- The Organization-scoped tables (and each of their partitions) whose move
-- triggers are not as they must be: missing, or (unless only_missing) one
-- of them not enabled ALWAYS or with other arguments (a reference added
-- since), or a row check too many or too few.  A statement on a partition
-- fires the partition's statement triggers, not its parent's (issue 44:
-- an UPDATE through a partition was not logged, an INSERT through one
-- passed the fence, TRUNCATE of one passed).  A partition's triggers
-- carry its root's table key.
CREATE OR REPLACE FUNCTION outbox._move_tables_to_equip(only_missing boolean)
RETURNS TABLE (relid regclass, args text[], row_check boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH root AS (
        -- No root, no row check (a prepare checks the root).
        SELECT outbox._relocation_table_key(r.relid) AS model FROM outbox.relocation_roots r
         WHERE r.scope = 'Organization'
    ), wanted AS (
        SELECT p.relid::regclass AS relid,
               ARRAY[m.model, m.pk] || ARRAY(
                   SELECT x FROM jsonb_array_elements(m.refs) WITH ORDINALITY r(value, n),
                          LATERAL (VALUES (1, r.value->>'column'), (2, r.value->>'parent')) v(k, x)
                    ORDER BY r.n, v.k) AS args,
               coalesce(c.relkind = 'r' AND (m.model = (SELECT model FROM root)
                   OR m.refs @> jsonb_build_array(jsonb_build_object('parent',
                                                                     (SELECT model FROM root)))),
                        false) AS row_check
          FROM outbox._move_tables() m
         CROSS JOIN LATERAL outbox._partition_tree(m.relid) p
          JOIN pg_class c ON c.oid = p.relid
         WHERE c.relkind IN ('r', 'p')
    )
    SELECT w.relid, w.args, w.row_check
      FROM wanted w,
           -- The arguments as pg_get_triggerdef shows them.
           LATERAL (SELECT '(' || string_agg(quote_literal(a), ', ' ORDER BY n) || ')' AS shown
                      FROM unnest(w.args) WITH ORDINALITY u(a, n)) c
     WHERE CASE WHEN only_missing
                THEN NOT EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = w.relid
                                    AND g.tgname = 'pg_outbox_move_insert')
                ELSE (SELECT count(*) FILTER (WHERE g.tgenabled = 'A'
                                                AND right(pg_get_triggerdef(g.oid), length(c.shown))
                                                    = c.shown)
                             || '/' || count(*)
                        FROM pg_trigger g
                       WHERE g.tgrelid = w.relid
                         AND g.tgfoid IN ('outbox._move_trigger()'::regprocedure,
                                          'outbox._move_row_trigger()'::regprocedure))
                     IS DISTINCT FROM (4 + w.row_check::int) || '/' || (4 + w.row_check::int)
           END
$$;

-- Puts the move triggers on each table _move_tables_to_equip names (a
-- table's triggers that are not as they must be are made again).  They
-- are in place ahead of any move: set_relocation_scope and
-- set_relocation_root install them in a cell, and the DDL guard
-- (outbox._guard_ddl) on each partition created or attached later, so
-- that a move's prepare takes no lock that writers wait for (issue 44).
-- Idle, they cost a statement one read of outbox.organization_moves.
CREATE OR REPLACE FUNCTION outbox._move_install_triggers(only_missing boolean DEFAULT false)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
    old record;
    installed int := 0;
BEGIN
    FOR t IN SELECT * FROM outbox._move_tables_to_equip(only_missing) LOOP
        FOR old IN SELECT g.tgname FROM pg_trigger g
                    WHERE g.tgrelid = t.relid
                      AND g.tgfoid IN ('outbox._move_trigger()'::regprocedure,
                                       'outbox._move_row_trigger()'::regprocedure) LOOP
            EXECUTE outbox._trigger_statement('drop_trigger', t.relid, ARRAY[old.tgname::text]);
        END LOOP;
        EXECUTE outbox._trigger_statement('pg_outbox_move', t.relid, t.args);
        IF t.row_check THEN
            EXECUTE outbox._trigger_statement('pg_outbox_move_row', t.relid, t.args);
        END IF;
        installed := installed + 1;
    END LOOP;
    RETURN installed;
END
$$;

-- In a cell, the move triggers ahead of any move (called when a table's
-- scope or the Organization scope's root is set).
CREATE OR REPLACE FUNCTION outbox._move_equip_cell() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('outbox.silo_mode') = 'cell'
       AND EXISTS (SELECT FROM outbox.relocation_roots r WHERE r.scope = 'Organization') THEN
        PERFORM outbox._move_install_triggers();
    END IF;
END
$$;

-- Locks tables in mode for a move's DDL (a prepare's triggers, a cancel's
-- drop), in one order (by oid) for every step, each wait at most 50 ms:
-- a writer whose lock request comes after this one's waits behind it no
-- longer than that, and never deadlocks with it (this wait ends long
-- before deadlock_timeout).  A wait that passes it gives up every lock
-- taken so far and tries again 20 ms later, for up to 5 s; then 55P03
-- (the step fails, and control tries it again later; a cancel says so).
-- Issue 44: a cancel's lock queued behind another tenant's long
-- transaction stopped every writer of the table for as long.
CREATE OR REPLACE FUNCTION outbox._move_lock_tables(tables regclass[], mode text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t regclass;
    deadline timestamptz := clock_timestamp() + interval '5 s';
    caller_timeout text := current_setting('lock_timeout');
BEGIN
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '50ms', true);
            FOREACH t IN ARRAY ARRAY(SELECT DISTINCT u FROM unnest(tables) u ORDER BY 1) LOOP
                EXECUTE outbox._trigger_statement('lock', t, ARRAY[mode]);
            END LOOP;
            PERFORM set_config('lock_timeout', caller_timeout, true);
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            IF clock_timestamp() > deadline THEN
                RAISE;
            END IF;
        END;
        PERFORM pg_sleep(0.02);
    END LOOP;
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
    equip regclass[];
    installed int;
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
    -- What a cancelled move's log got after its cancel: a writer whose
    -- statement logged before the cancel committed, and which committed
    -- after (the cancel waits for no writer: it takes no lock).
    DELETE FROM outbox.move_changes c USING outbox.organization_moves o
     WHERE o.relocation = c.relocation AND o.state = 'cancelled';
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
            outbox._relocation_statement('count_keys', outbox._relocation_table(root),
                (SELECT m.pk FROM outbox._move_tables() m WHERE m.model = root)),
            ARRAY[to_jsonb(p_organization)]);
        IF (taken[1]->>0)::bigint > 0 THEN
            RAISE EXCEPTION 'organization % cannot move to cell %: it is here already', p_organization, cell
                USING ERRCODE = 'unique_violation',
                      HINT = 'A move keeps primary keys: each cell keeps its id ranges apart.';
        END IF;
        -- Coming back to a cell it left: that move's fence gives way to this one's.
        UPDATE outbox.organization_moves o SET fenced = false, updated_at = clock_timestamp()
         WHERE o.organization = p_organization AND o.side = 'source' AND o.state = 'complete';
    END IF;
    -- The triggers are in place ahead of the move (_move_equip_cell); a
    -- table's that are not (dropped or disabled between moves, a
    -- partition older than them, a reference added since) are made again
    -- here.  Their DDL's lock waits behind the writers' transactions and
    -- every later writer waits behind it: at most 50 ms at a time, never
    -- a deadlock with a writer (40P01 went to an application once).
    -- Before this move is recorded: the guard keeps a running move's
    -- triggers, and took this one for running (every retry failed).
    equip := ARRAY(SELECT e.relid FROM outbox._move_tables_to_equip(false) e);
    IF cardinality(equip) > 0 THEN
        PERFORM outbox._move_lock_tables(equip, 'ACCESS EXCLUSIVE');
    END IF;
    installed := outbox._move_install_triggers();
    INSERT INTO outbox.organization_moves (relocation, organization, side, from_cell, to_cell, step,
                                           fenced, plan)
    VALUES (p_relocation, p_organization, p_side, argument->>'from', argument->>'to', 'prepared',
            p_side = 'target', jsonb_build_object('root', root));
    IF p_side = 'target' THEN
        INSERT INTO outbox.move_members (relocation, model, pk, present)
        VALUES (p_relocation, root, p_organization, true);
    END IF;
    RETURN jsonb_build_object('prepared', true, 'triggers', installed);
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
    writers text[];
BEGIN
    IF mv.plan ? 'order' THEN
        RETURN jsonb_build_object('rows', mv.rows_total);
    END IF;
    IF mv.mode = 'move' THEN
        -- A statement that ran before the prepare committed found no move
        -- to log for (the triggers were in place already, idle): its
        -- transaction must end before the export's snapshot, or its write
        -- would be in neither.  The writers running when first asked
        -- (after the prepare), as in_flight asks; the export waits, not
        -- they.
        IF mv.plan ? 'writers' THEN
            writers := ARRAY(SELECT jsonb_array_elements_text(mv.plan->'writers'));
        ELSE
            writers := outbox._move_writers();
            UPDATE outbox.organization_moves o
               SET plan = o.plan || jsonb_build_object('writers', to_jsonb(writers))
             WHERE o.relocation = mv.relocation;
        END IF;
        IF outbox._move_running(writers) > 0 THEN
            RETURN jsonb_build_object('waiting', outbox._move_running(writers));
        END IF;
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
               outbox._relocation_statement('rows_of_keys', (entry->>'relid')::oid::regclass,
                                            entry->>'pk'),
               ARRAY(SELECT to_jsonb(k) FROM unnest(pks) k))) r
$$;

-- After the functions the DDL guard calls (_moving_here above): it runs
-- for this trigger too.
CREATE OR REPLACE TRIGGER moves_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON outbox.organization_moves FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_moves_changed();
ALTER TABLE outbox.organization_moves ENABLE ALWAYS TRIGGER moves_changed;
