------------------------------------------------------------------------------
-- Capture that nothing bypasses: the DDL guard
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox._capture_functions() RETURNS oid[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY['outbox.capture_statement()'::regprocedure::oid,
                 'outbox.capture_truncate()'::regprocedure::oid,
                 'outbox.capture_row()'::regprocedure::oid]
$$;

-- What must hold of a registered table for nothing to bypass its capture:
-- it is no partition of anything, nothing inherits from it outside its
-- partition tree (rows of a legacy inheritance child are read with it but
-- never captured), it does not force row-level security on its owner (a
-- backfill reads it as its owner), and every capture trigger in its tree is
-- enabled ALWAYS (an ORIGIN trigger is off under session_replication_role =
-- replica).  Checks triggers that exist: pg_restore creates them one by one.
CREATE OR REPLACE FUNCTION outbox._check_capture(tbl regclass) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    problem record;
BEGIN
    IF (SELECT c.relispartition FROM pg_class c WHERE c.oid = tbl) THEN
        RAISE EXCEPTION 'registered table % cannot be a partition', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Unregister it with outbox.unregister_table() first, and register the partitioned table.';
    END IF;
    SELECT i.inhrelid::regclass AS child, i.inhparent::regclass AS parent INTO problem
      FROM outbox._partition_tree(tbl) t
      JOIN pg_inherits i ON i.inhparent = t.relid
      JOIN pg_class c ON c.oid = i.inhrelid
     WHERE NOT c.relispartition
     ORDER BY i.inhrelid::regclass::text
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'table % inherits from registered table %: its rows would not be captured',
            problem.child, problem.parent
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Use a partitioned table, or register the child on its own without inheritance.';
    END IF;
    IF (SELECT c.relrowsecurity AND c.relforcerowsecurity FROM pg_class c WHERE c.oid = tbl) THEN
        RAISE EXCEPTION 'registered table % cannot force row-level security on its owner', tbl
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'pg_outbox reads the table as its owner to backfill it; a policy would hide rows from that read.',
                  HINT = format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', tbl);
    END IF;
    SELECT g.tgname, g.tgrelid::regclass AS rel INTO problem
      FROM outbox._partition_tree(tbl) t
      JOIN pg_trigger g ON g.tgrelid = t.relid
     WHERE g.tgfoid = ANY (outbox._capture_functions()) AND g.tgenabled <> 'A'
     ORDER BY g.tgrelid::regclass::text, g.tgname
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'the capture trigger % on % must stay enabled ALWAYS', problem.tgname,
            problem.rel
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Unregister the table with outbox.unregister_table() instead.';
    END IF;
END
$$;

-- The capture triggers of rel's partition tree (a partition that left a
-- registered table).
CREATE OR REPLACE FUNCTION outbox._drop_capture_triggers(rel regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    capture record;
BEGIN
    FOR capture IN SELECT g.tgrelid::regclass AS rel, g.tgname
               FROM outbox._partition_tree(rel) t JOIN pg_trigger g ON g.tgrelid = t.relid
              WHERE g.tgfoid = ANY (outbox._capture_functions()) AND g.tgparentid = 0 LOOP
        EXECUTE outbox._trigger_statement('drop_trigger', capture.rel, ARRAY[capture.tgname::text]);
    END LOOP;
END
$$;


-- DROP INDEX CONCURRENTLY commits in stages: refused at sql_drop, it would
-- leave the index invalid all the same.  So the C ddl_command_start trigger
-- asks first, with the indexes the statement names.
CREATE OR REPLACE FUNCTION outbox._guard_drop_index(indexes oid[]) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hit record;
BEGIN
    SELECT i.indexrelid::regclass AS index, i.indrelid::regclass AS tbl INTO hit
      FROM pg_index i
      JOIN outbox.registered_tables t ON t.relid = i.indrelid
     WHERE i.indexrelid = ANY (indexes)
       AND i.indexrelid IN (SELECT outbox._id_indexes(i.indrelid))
       AND NOT EXISTS (SELECT FROM outbox._id_indexes(i.indrelid) o WHERE o <> ALL (indexes))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'cannot drop index %: it is the unique index on id of registered table %',
            hit.index, hit.tbl
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Unregister the table with outbox.unregister_table() first.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION outbox._on_ddl_command_start() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__on_ddl_command_start';
CREATE OR REPLACE FUNCTION outbox._dropped_partitions()
RETURNS TABLE (partition oid, root oid)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__dropped_partitions';
CREATE OR REPLACE FUNCTION outbox._capture_partition_rows(rel regclass, root regclass) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__capture_partition_rows';

-- Refuses the change under way when capture of registered table rel
-- could no longer work after it (its columns, its unique index on id).
CREATE OR REPLACE FUNCTION outbox._keep_capture_working(rel regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t outbox.registered_tables;
    problem text;
BEGIN
    SELECT * INTO STRICT t FROM outbox.registered_tables r WHERE r.relid = rel;
    PERFORM outbox._check_columns(t.relid, t.silo, t.shard_column, t.payload_columns,
                                  t.cell_column);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
    RAISE EXCEPTION 'this change would break capture of registered table %: %', rel, problem
        USING ERRCODE = 'dependent_objects_still_exist',
              HINT = 'Unregister the table with outbox.unregister_table() first.';
END
$$;

-- The registered tables each DDL command of the event touched (or the
-- table a trigger it touched is on, or that table's parent): their capture
-- triggers not altered, their columns still as capture needs them, the
-- triggers installed on a table created as a partition of one, capture
-- complete (called by _guard_ddl, in the ddl_command_end event).
CREATE OR REPLACE FUNCTION outbox._guard_commands() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    command record;
    r record;
BEGIN
    FOR command IN
        SELECT d.command_tag, d.classid, d.objid,
               CASE WHEN d.classid = 'pg_class'::regclass THEN d.objid
                    WHEN d.classid = 'pg_trigger'::regclass THEN
                         (SELECT g.tgrelid FROM pg_trigger g WHERE g.oid = d.objid)
               END AS rel
          FROM pg_event_trigger_ddl_commands() d
    LOOP
        CONTINUE WHEN command.rel IS NULL;
        FOR r IN
            SELECT DISTINCT t.relid
              FROM (SELECT command.rel::regclass
                     UNION SELECT i.inhparent::regclass FROM pg_inherits i
                            WHERE i.inhrelid = command.rel) x(rel)
             CROSS JOIN LATERAL outbox._self_and_ancestors(x.rel) a
              JOIN outbox.registered_tables t ON t.relid = a.relid
        LOOP
            IF command.classid = 'pg_trigger'::regclass AND EXISTS (
                SELECT FROM pg_trigger g WHERE g.oid = command.objid
                   AND g.tgfoid = ANY (outbox._capture_functions())) THEN
                RAISE EXCEPTION 'the capture triggers of % cannot be altered', r.relid
                    USING ERRCODE = 'object_not_in_prerequisite_state',
                          HINT = 'Unregister the table with outbox.unregister_table() instead.';
            END IF;
            PERFORM outbox._keep_capture_working(r.relid);
            IF command.command_tag IN ('CREATE TABLE', 'CREATE FOREIGN TABLE') THEN
                PERFORM outbox._install_capture_triggers(r.relid);
            END IF;
            PERFORM outbox._check_capture(r.relid);
        END LOOP;
    END LOOP;
END
$$;

-- After DDL that touches a registered table (the table, a partition, a
-- legacy inheritance child, a trigger): the registered columns still fit
-- and _check_capture holds.  A partition created or attached gets the
-- capture triggers, and the rows of one attached are captured as inserts;
-- the rows of one detached, as deletions, and it loses the triggers.  Called
-- by the event trigger _on_ddl_command_end (C), as the extension's owner,
-- with the partitions the command attached or detached and their parents.
CREATE OR REPLACE FUNCTION outbox._guard_ddl(partitions oid[], parents oid[], attached boolean[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    command record;
    change record;
    root regclass;
BEGIN
    FOR change IN SELECT * FROM unnest(partitions, attached) AS c(partition, attached)
                   WHERE c.attached LOOP
        IF EXISTS (SELECT FROM outbox._partition_tree(change.partition) t
                     JOIN outbox.registered_tables reg ON reg.relid = t.relid) THEN
            RAISE EXCEPTION 'registered table % cannot become a partition',
                change.partition::regclass
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Unregister it with outbox.unregister_table() first.';
        END IF;
    END LOOP;
    -- The triggers of a move (69_relocation/40_move_cell_log.sql) stay enabled ALWAYS
    -- while a move this cell takes part in runs: its fence and change log.
    IF outbox._moving_here() THEN
        SELECT g.tgname, g.tgrelid::regclass AS rel INTO command
          FROM pg_event_trigger_ddl_commands() d
          JOIN pg_trigger g ON (d.classid = 'pg_class'::regclass AND g.tgrelid = d.objid)
                            OR (d.classid = 'pg_trigger'::regclass AND g.oid = d.objid)
         WHERE d.command_tag IN ('ALTER TABLE', 'ALTER TRIGGER')
           AND g.tgfoid IN ('outbox._move_trigger()'::regprocedure, 'outbox._move_row_trigger()'::regprocedure)
           AND g.tgenabled <> 'A'
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'the move trigger % on % must stay enabled ALWAYS while an organization moves',
                command.tgname, command.rel
                USING ERRCODE = 'object_in_use',
                      HINT = 'Wait for the move to end (outbox.organization_moves).';
        END IF;
    END IF;
    -- A partition created or attached where the move's triggers are in
    -- place gets them too (its writes are logged and fenced as its
    -- parent's).
    IF EXISTS (SELECT FROM pg_trigger g WHERE g.tgfoid = 'outbox._move_trigger()'::regprocedure) THEN
        PERFORM outbox._move_install_triggers(only_missing => true);
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.registered_tables) THEN
        RETURN;
    END IF;
    FOR change IN SELECT * FROM unnest(partitions, parents, attached) AS c(partition, parent, attached)
    LOOP
        SELECT t.relid INTO root
          FROM outbox._self_and_ancestors(change.parent) a
          JOIN outbox.registered_tables t ON t.relid = a.relid
         ORDER BY a.depth LIMIT 1;
        CONTINUE WHEN NOT FOUND;
        IF change.attached THEN
            PERFORM outbox._install_capture_triggers(root);
            PERFORM outbox._capture_partition_rows(change.partition, root);
        ELSE
            PERFORM outbox._capture_partition_rows(change.partition, root);
            PERFORM outbox._drop_capture_triggers(change.partition);
        END IF;
    END LOOP;
    PERFORM outbox._guard_commands();
END
$$;

-- The event trigger: resolves what the statement attached or detached
-- (src/registry/ddl_guard.cpp), then runs _guard_ddl as the extension's owner.
CREATE OR REPLACE FUNCTION outbox._on_ddl_command_end() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__on_ddl_command_end';

-- The drops the DDL guard refuses (called by _on_sql_drop, in the sql_drop
-- event): a partition of a registered table, a handler's function,
-- pg_outbox's capture trigger, a move's trigger while it moves.
CREATE OR REPLACE FUNCTION outbox._refuse_drop() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hit record;
BEGIN
    SELECT d.object_identity AS partition, p.root::regclass AS root INTO hit
      FROM outbox._dropped_partitions() p
      JOIN outbox.registered_tables t ON t.relid = p.root
      JOIN pg_event_trigger_dropped_objects() d
        ON d.classid = 'pg_class'::regclass AND d.objid = p.partition AND d.objsubid = 0
     WHERE NOT EXISTS (SELECT FROM pg_event_trigger_dropped_objects() e
                        WHERE e.classid = 'pg_class'::regclass AND e.objid = p.root
                          AND e.objsubid = 0)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'cannot drop %: it is a partition of registered table %', hit.partition,
            hit.root
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = 'Its rows would leave the registered table without outbox rows.',
                  HINT = 'Detach it first (ALTER TABLE ... DETACH PARTITION captures its rows as deletions), then drop it.';
    END IF;

    SELECT d.object_identity AS function, c.name AS category INTO hit
      FROM pg_event_trigger_dropped_objects() d
      JOIN outbox.handlers h ON h.handler::oid = d.objid
      JOIN outbox.categories c ON c.id = h.category
     WHERE d.classid = 'pg_proc'::regclass
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'function % is the handler of category %', hit.function,
            quote_literal(hit.category)
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Register another handler for the category, or unregister it with outbox.unregister_handler(), first.';
    END IF;

    SELECT d.object_identity INTO hit
      FROM pg_event_trigger_dropped_objects() d
     WHERE d.object_type = 'trigger'
       AND d.address_names[3] LIKE 'outbox\_capture\_%'
       AND EXISTS (
            SELECT FROM pg_class c
              CROSS JOIN LATERAL outbox._self_and_ancestors(c.oid) a
              JOIN outbox.registered_tables t ON t.relid = a.relid
             WHERE c.oid = to_regclass(quote_ident(d.address_names[1]) || '.'
                                       || quote_ident(d.address_names[2])))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'trigger % is pg_outbox''s capture trigger', hit.object_identity
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Unregister the table with outbox.unregister_table() instead.';
    END IF;

    -- Nor a move's trigger, or a table that has one, while it moves.
    SELECT d.object_identity INTO hit
      FROM pg_event_trigger_dropped_objects() d
     WHERE d.object_type = 'trigger' AND d.address_names[3] LIKE 'pg\_outbox\_move\_%'
       AND outbox._moving_here()
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'cannot drop trigger %: an organization moves from or to this cell',
            hit.object_identity
            USING ERRCODE = 'object_in_use',
                  DETAIL = 'The move''s change log and fence are those triggers.',
                  HINT = 'Wait for the move to end (outbox.organization_moves).';
    END IF;
END
$$;

-- Dropping a registered table drops its registration.  Refused: dropping a
-- capture trigger, a handler function, a partition of a registered table
-- without the table (its rows would leave without outbox rows: DETACH it
-- first), or the unique index on id.  SECURITY DEFINER, as above.
CREATE OR REPLACE FUNCTION outbox._on_sql_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._refuse_drop();

    -- A dropped table or column takes its cross-silo references with it.
    DELETE FROM outbox.registered_foreign_keys f
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objid = f.relid
       AND (d.objsubid = 0 OR (d.object_type = 'table column'
                               AND d.address_names[3] = f.column_name));

    -- And its relocation scope, or its being a root.
    DELETE FROM outbox.relocation_scopes s
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = s.relid;
    DELETE FROM outbox.relocation_roots rr
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = rr.relid;
    DELETE FROM outbox.relocation_collision_hooks h
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = h.relid;

    DELETE FROM outbox.registered_tables t
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = t.relid;
    IF FOUND THEN
        PERFORM outbox._invalidate_cache();
    END IF;

    -- An index went: the registered tables must keep their unique index on id.
    IF EXISTS (SELECT FROM pg_event_trigger_dropped_objects() d WHERE d.object_type = 'index') THEN
        PERFORM outbox._keep_capture_working(t.relid) FROM outbox.registered_tables t;
    END IF;
END
$$;

DROP EVENT TRIGGER IF EXISTS outbox_ddl_command_end;
CREATE EVENT TRIGGER outbox_ddl_command_end ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'CREATE SCHEMA', 'CREATE FOREIGN TABLE',
                 'ALTER FOREIGN TABLE', 'ALTER TRIGGER')
    EXECUTE FUNCTION outbox._on_ddl_command_end();
DROP EVENT TRIGGER IF EXISTS outbox_ddl_command_start;
CREATE EVENT TRIGGER outbox_ddl_command_start ON ddl_command_start
    EXECUTE FUNCTION outbox._on_ddl_command_start();
DROP EVENT TRIGGER IF EXISTS outbox_sql_drop;
CREATE EVENT TRIGGER outbox_sql_drop ON sql_drop
    EXECUTE FUNCTION outbox._on_sql_drop();
