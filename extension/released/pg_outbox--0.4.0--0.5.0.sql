-- pg_outbox 0.5.0: safe in a shared database.  No role gains privilege (a
-- table owner's code runs as the table owner, handlers as their function's
-- owner, registration needs a category grant), no role crashes the server,
-- ordinary DDL keeps working for every role, and capture cannot be bypassed
-- by DDL.  pg_outbox--0.5.0.sql is the same version as one full script.
\echo Use "ALTER EXTENSION pg_outbox UPDATE TO '0.5.0'" to load this file. \quit

------------------------------------------------------------------------------
-- Category grants
------------------------------------------------------------------------------
-- REGISTER: the role may register tables it owns under the category.
-- CONSUME: the role may claim and complete the category's messages from
-- outside the database.  Neither implies the other; members of a role
-- inherit its grants.
CREATE TABLE outbox.category_grants (
    category  int     NOT NULL REFERENCES outbox.categories (id),
    role      regrole NOT NULL,
    privilege text    NOT NULL CHECK (privilege IN ('REGISTER', 'CONSUME')),
    PRIMARY KEY (category, role, privilege)
);
SELECT pg_catalog.pg_extension_config_dump('outbox.category_grants', '');

CREATE FUNCTION outbox._category_id(category text) RETURNS int
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_id int;
BEGIN
    PERFORM outbox._require(category, 'category');
    SELECT c.id INTO found_id FROM outbox.categories c WHERE c.name = _category_id.category;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'category % is not registered', quote_literal(category)
            USING ERRCODE = 'undefined_object',
                  HINT = 'Register it with outbox.register_category().';
    END IF;
    RETURN found_id;
END
$$;

CREATE FUNCTION outbox._check_privilege_name(privilege text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(privilege, 'privilege');
    IF upper(privilege) NOT IN ('REGISTER', 'CONSUME') THEN
        RAISE EXCEPTION 'privilege must be ''REGISTER'' or ''CONSUME'', not %',
            quote_literal(privilege) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN upper(privilege);
END
$$;

CREATE FUNCTION outbox.grant_category(category text, role regrole,
    privilege text DEFAULT 'REGISTER') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int := outbox._category_id(category);
BEGIN
    PERFORM outbox._require(role, 'role');
    privilege := outbox._check_privilege_name(privilege);
    INSERT INTO outbox.category_grants AS g (category, role, privilege)
    VALUES (category_id, role, privilege) ON CONFLICT DO NOTHING;
END
$$;

-- Revoking REGISTER is refused while the role (or a member that holds it
-- through the role alone) owns tables registered under the category:
-- registrations must keep the grant they were made with.
CREATE FUNCTION outbox.revoke_category(category text, role regrole,
    privilege text DEFAULT 'REGISTER') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int := outbox._category_id(category);
    still_registered text;
BEGIN
    PERFORM outbox._require(role, 'role');
    privilege := outbox._check_privilege_name(privilege);
    IF privilege = 'REGISTER' THEN
        SELECT string_agg(r.relid::text, ', ' ORDER BY r.table_key) INTO still_registered
          FROM outbox.registered_tables r
          JOIN pg_class c ON c.oid = r.relid
          JOIN pg_roles o ON o.oid = c.relowner
         WHERE r.category = category_id AND NOT o.rolsuper
           AND pg_has_role(c.relowner, role, 'USAGE')
           AND NOT EXISTS (SELECT FROM outbox.category_grants g
                            WHERE g.category = category_id AND g.privilege = 'REGISTER'
                              AND g.role <> revoke_category.role
                              AND pg_has_role(c.relowner, g.role, 'USAGE'));
        IF still_registered IS NOT NULL THEN
            RAISE EXCEPTION 'role % owns tables registered under category %: %', role,
                quote_literal(category), still_registered
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = 'Unregister them with outbox.unregister_table() first.';
        END IF;
    END IF;
    DELETE FROM outbox.category_grants g
     WHERE g.category = category_id AND g.role = revoke_category.role
       AND g.privilege = revoke_category.privilege;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'role % holds no % privilege on category %', role, privilege,
            quote_literal(category) USING ERRCODE = 'undefined_object';
    END IF;
END
$$;

-- Whether caller may register tbl under category (NULL: tbl's registered
-- category).  Called by the C gate of register_table, unregister_table and
-- set_replication_version for callers that are not superusers.  An unknown
-- category or table is left to the body to report.
CREATE FUNCTION outbox._check_register_privilege(caller oid, tbl regclass, category text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cat record;
BEGIN
    IF category IS NULL THEN
        SELECT c.id, c.name INTO cat
          FROM outbox.registered_tables r JOIN outbox.categories c ON c.id = r.category
         WHERE r.relid = tbl;
    ELSE
        SELECT c.id, c.name INTO cat FROM outbox.categories c
         WHERE c.name = _check_register_privilege.category;
    END IF;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.category_grants g
                    WHERE g.category = cat.id AND g.privilege = 'REGISTER'
                      AND pg_has_role(caller, g.role, 'USAGE')) THEN
        RAISE EXCEPTION 'role % may not register tables under category %', caller::regrole,
            quote_literal(cat.name)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('The extension owner grants it: SELECT outbox.grant_category(%L, %L);',
                                cat.name, caller::regrole);
    END IF;
END
$$;

------------------------------------------------------------------------------
-- The DDL guard
------------------------------------------------------------------------------
CREATE FUNCTION outbox._capture_functions() RETURNS oid[]
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
CREATE FUNCTION outbox._check_capture(tbl regclass) RETURNS void
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
CREATE FUNCTION outbox._drop_capture_triggers(rel regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    capture record;
BEGIN
    FOR capture IN SELECT g.tgrelid::regclass AS rel, g.tgname
               FROM outbox._partition_tree(rel) t JOIN pg_trigger g ON g.tgrelid = t.relid
              WHERE g.tgfoid = ANY (outbox._capture_functions()) AND g.tgparentid = 0 LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', capture.tgname, capture.rel);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION outbox._unregister_table(tbl regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._registered(tbl);
    -- The registry row goes first: the DDL guard then lets the triggers go.
    DELETE FROM outbox.registered_tables r WHERE r.relid = tbl;
    PERFORM outbox._drop_capture_triggers(tbl);
    PERFORM outbox._invalidate_cache();
END
$$;

-- The valid unique indexes on (id) alone of tbl: what keeps ids unique, which
-- capture and backfill rely on.  An index left invalid by a failed CREATE or
-- DROP INDEX CONCURRENTLY does not count; a partitioned table's does (it is
-- invalid until every partition's index is attached, as during pg_restore,
-- and each of those keeps its partition's ids unique meanwhile).
CREATE FUNCTION outbox._id_indexes(tbl regclass) RETURNS SETOF oid
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT i.indexrelid FROM pg_index i
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
      JOIN pg_class c ON c.oid = i.indrelid
     WHERE i.indrelid = tbl AND i.indisunique AND (i.indisvalid OR c.relkind = 'p')
       AND i.indnkeyatts = 1 AND a.attname = 'id' AND i.indexprs IS NULL AND i.indpred IS NULL
$$;

CREATE OR REPLACE FUNCTION outbox._check_columns(tbl regclass, silo text, shard_column name,
                                      payload_columns name[], cell_column name)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col record;
    payload_column name;
BEGIN
    SELECT * INTO col FROM outbox._column(tbl, 'id');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % has no column "id"', tbl USING ERRCODE = 'undefined_column',
            DETAIL = 'A replicated table needs a unique, non-null integer id column.';
    ELSIF NOT col.integral THEN
        RAISE EXCEPTION 'column "id" of table % is of type %, not an integer type', tbl,
            col.type_name USING ERRCODE = 'datatype_mismatch';
    ELSIF NOT col.not_null THEN
        RAISE EXCEPTION 'column "id" of table % must be NOT NULL', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF NOT EXISTS (SELECT FROM outbox._id_indexes(tbl)) THEN
        RAISE EXCEPTION 'column "id" of table % has no unique index', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Make id the primary key, or add a unique index on (id) alone.';
    END IF;

    IF shard_column IS NOT NULL THEN
        SELECT * INTO col FROM outbox._column(tbl, shard_column);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'shard_column % does not exist in table %',
                quote_ident(shard_column), tbl USING ERRCODE = 'undefined_column';
        ELSIF NOT col.integral THEN
            RAISE EXCEPTION 'shard_column % of table % is of type %, not an integer type',
                quote_ident(shard_column), tbl, col.type_name USING ERRCODE = 'datatype_mismatch';
        ELSIF NOT col.not_null THEN
            RAISE EXCEPTION 'shard_column % of table % must be NOT NULL',
                quote_ident(shard_column), tbl USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = 'Every outbox row needs a shard identifier.';
        END IF;
    END IF;

    IF cell_column IS NOT NULL THEN
        IF silo <> 'control' THEN
            RAISE EXCEPTION 'cell_column is for control-silo tables only; % is a % table', tbl,
                silo USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT * INTO col FROM outbox._column(tbl, cell_column);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'cell_column % does not exist in table %',
                quote_ident(cell_column), tbl USING ERRCODE = 'undefined_column';
        ELSIF NOT col.textual THEN
            RAISE EXCEPTION 'cell_column % of table % is of type %, not text, varchar or name',
                quote_ident(cell_column), tbl, col.type_name USING ERRCODE = 'datatype_mismatch';
        ELSIF NOT col.not_null THEN
            RAISE EXCEPTION 'cell_column % of table % must be NOT NULL',
                quote_ident(cell_column), tbl USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
    END IF;

    IF payload_columns IS NOT NULL THEN
        IF cardinality(payload_columns) = 0 THEN
            RAISE EXCEPTION 'payload_columns must not be empty'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Pass NULL for outbox rows without a payload.';
        END IF;
        IF array_position(payload_columns, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'payload_columns must not contain NULL'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF (SELECT count(DISTINCT c) FROM unnest(payload_columns) c) <> cardinality(payload_columns)
        THEN
            RAISE EXCEPTION 'payload_columns names a column twice: %', payload_columns
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOREACH payload_column IN ARRAY payload_columns LOOP
            IF NOT EXISTS (SELECT FROM outbox._column(tbl, payload_column)) THEN
                RAISE EXCEPTION 'payload_columns: column % does not exist in table %',
                    quote_ident(payload_column), tbl USING ERRCODE = 'undefined_column';
            END IF;
        END LOOP;
    END IF;
END
$$;

-- DROP INDEX CONCURRENTLY commits in stages: refused at sql_drop, it would
-- leave the index invalid all the same.  So the C ddl_command_start trigger
-- asks first, with the indexes the statement names.
CREATE FUNCTION outbox._guard_drop_index(indexes oid[]) RETURNS void
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

CREATE FUNCTION outbox._on_ddl_command_start() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'on_ddl_command_start';
CREATE FUNCTION outbox._dropped_partitions()
RETURNS TABLE (partition oid, root oid)
    LANGUAGE c AS 'MODULE_PATHNAME', 'dropped_partitions';
CREATE FUNCTION outbox._capture_partition_rows(rel regclass, root regclass) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'capture_partition_rows';
DROP FUNCTION outbox._ddl_attaches_partition(pg_ddl_command);

-- After DDL that touches a registered table (the table, a partition, a
-- legacy inheritance child, a trigger): the registered columns still fit
-- and _check_capture holds.  A partition created or attached gets the
-- capture triggers, and the rows of one attached are captured as inserts;
-- the rows of one detached, as deletions, and it loses the triggers.  Called
-- by the event trigger _on_ddl_command_end (C), as the extension's owner,
-- with the partitions the command attached or detached and their parents.
CREATE FUNCTION outbox._guard_ddl(partitions oid[], parents oid[], attached boolean[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    command record;
    change record;
    r record;
    root regclass;
    problem text;
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
            SELECT DISTINCT t.relid, t.silo, t.shard_column, t.payload_columns, t.cell_column
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
            BEGIN
                PERFORM outbox._check_columns(r.relid, r.silo, r.shard_column, r.payload_columns,
                                              r.cell_column);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
                RAISE EXCEPTION 'this change would break capture of registered table %: %',
                    r.relid, problem
                    USING ERRCODE = 'dependent_objects_still_exist',
                          HINT = 'Unregister the table with outbox.unregister_table() first.';
            END;
            IF command.command_tag IN ('CREATE TABLE', 'CREATE FOREIGN TABLE') THEN
                PERFORM outbox._install_capture_triggers(r.relid);
            END IF;
            PERFORM outbox._check_capture(r.relid);
        END LOOP;
    END LOOP;
END
$$;

-- The event trigger: resolves what the statement attached or detached
-- (src/registry/ddl_guard.cpp), then runs _guard_ddl as the extension's owner.
CREATE OR REPLACE FUNCTION outbox._on_ddl_command_end() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'on_ddl_command_end';

-- Dropping a registered table drops its registration.  Refused: dropping a
-- capture trigger, a handler function, a partition of a registered table
-- without the table (its rows would leave without outbox rows: DETACH it
-- first), or the unique index on id.  SECURITY DEFINER, as above.
CREATE OR REPLACE FUNCTION outbox._on_sql_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hit record;
    r record;
    problem text;
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

    DELETE FROM outbox.registered_tables t
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = t.relid;
    IF FOUND THEN
        PERFORM outbox._invalidate_cache();
    END IF;

    -- An index went: the registered tables must keep their unique index on id.
    IF EXISTS (SELECT FROM pg_event_trigger_dropped_objects() d WHERE d.object_type = 'index') THEN
        FOR r IN SELECT t.relid, t.silo, t.shard_column, t.payload_columns, t.cell_column
                   FROM outbox.registered_tables t LOOP
            BEGIN
                PERFORM outbox._check_columns(r.relid, r.silo, r.shard_column,
                                              r.payload_columns, r.cell_column);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT;
                RAISE EXCEPTION 'this change would break capture of registered table %: %',
                    r.relid, problem
                    USING ERRCODE = 'dependent_objects_still_exist',
                          HINT = 'Unregister the table with outbox.unregister_table() first.';
            END;
        END LOOP;
    END IF;
END
$$;

DROP EVENT TRIGGER outbox_ddl_command_end;
CREATE EVENT TRIGGER outbox_ddl_command_end ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'CREATE SCHEMA', 'CREATE FOREIGN TABLE',
                 'ALTER FOREIGN TABLE', 'ALTER TRIGGER')
    EXECUTE FUNCTION outbox._on_ddl_command_end();
CREATE EVENT TRIGGER outbox_ddl_command_start ON ddl_command_start
    EXECUTE FUNCTION outbox._on_ddl_command_start();

-- Registration also checks what the DDL guard keeps true.
CREATE OR REPLACE FUNCTION outbox._register_table(tbl regclass, category text, silo text,
    shard_column name, payload_columns name[], cell_column name, replication_version int,
    table_key text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel record;
    category_id int;
    taken text;
BEGIN
    SELECT c.relname, c.relkind, c.relispartition, c.relpersistence, c.relnamespace INTO rel
      FROM pg_class c WHERE c.oid = tbl;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'tbl % is not a table', tbl USING ERRCODE = 'wrong_object_type';
    ELSIF tbl < 16384 OR rel.relnamespace IN ('pg_catalog'::regnamespace,
                                              'information_schema'::regnamespace) THEN
        RAISE EXCEPTION 'tbl % is a system catalog', tbl USING ERRCODE = 'wrong_object_type';
    ELSIF rel.relispartition THEN
        RAISE EXCEPTION 'tbl % is a partition', tbl USING ERRCODE = 'wrong_object_type',
            HINT = 'Register the partitioned table; every partition is captured.';
    ELSIF rel.relpersistence = 't' THEN
        RAISE EXCEPTION 'tbl % is a temporary table', tbl USING ERRCODE = 'wrong_object_type';
    END IF;

    category_id := outbox._category_id(category);

    PERFORM outbox._require(silo, 'silo');
    IF silo NOT IN ('cell', 'control') THEN
        RAISE EXCEPTION 'silo must be ''cell'' or ''control'', not %', quote_literal(silo)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    PERFORM outbox._require(replication_version, 'replication_version');
    IF replication_version < 1 THEN
        RAISE EXCEPTION 'replication_version must be at least 1, not %', replication_version
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    table_key := coalesce(table_key, rel.relname);
    IF NOT outbox._valid_table_key(table_key) THEN
        RAISE EXCEPTION 'table_key % is not valid', quote_literal(table_key)
            USING ERRCODE = 'invalid_name',
                  DETAIL = 'The table key names the version-gate options, which are GUCs.',
                  HINT = 'Pass a table_key matching [a-z_][a-z0-9_]* (at most 63 bytes).';
    END IF;

    LOCK TABLE outbox.registered_tables IN SHARE ROW EXCLUSIVE MODE;
    SELECT r.table_key INTO taken FROM outbox.registered_tables r WHERE r.relid = tbl;
    IF FOUND THEN
        RAISE EXCEPTION 'table % is already registered (table_key %)', tbl, quote_literal(taken)
            USING ERRCODE = 'duplicate_object';
    END IF;
    SELECT r.relid::text INTO taken FROM outbox.registered_tables r
     WHERE r.table_key = _register_table.table_key;
    IF FOUND THEN
        RAISE EXCEPTION 'table_key % is already used by table %', quote_literal(table_key), taken
            USING ERRCODE = 'duplicate_object', HINT = 'Pass another table_key.';
    END IF;

    PERFORM outbox._check_columns(tbl, silo, shard_column, payload_columns, cell_column);

    INSERT INTO outbox.registered_tables
        (table_key, relid, silo, category, shard_column, cell_column, payload_columns,
         replication_version)
    VALUES (table_key, tbl, silo, category_id, shard_column, cell_column, payload_columns,
            replication_version);

    PERFORM outbox._install_capture_triggers(tbl);
    PERFORM outbox._check_capture(tbl);
    PERFORM outbox._invalidate_cache();
END
$$;

------------------------------------------------------------------------------
-- Reads of registered tables run as their owners
------------------------------------------------------------------------------
CREATE FUNCTION outbox._table_id_range(tbl regclass, OUT min_id bigint, OUT max_id bigint)
    LANGUAGE c AS 'MODULE_PATHNAME', 'table_id_range';

CREATE OR REPLACE FUNCTION outbox._backfill_status()
RETURNS TABLE (table_key text, relation regclass, silo text, coded_version int,
               option_version int, effective_version int, cursor_lower_bound bigint,
               cursor_version int, max_id bigint, fraction_done float8, state text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    min_id bigint;
    store_down boolean := false;
    readable boolean;
    lower bigint;
    version int;
BEGIN
    FOR r IN SELECT t.table_key, t.relid, t.silo, t.replication_version
               FROM outbox.registered_tables t ORDER BY t.table_key LOOP
        table_key := r.table_key;
        relation := r.relid;
        silo := r.silo;
        coded_version := r.replication_version;
        option_version := outbox.get_option(
            format('outbox_replication.%s.replication_version', r.table_key))::int;
        effective_version := outbox.find_replication_version(
            r.relid, current_setting('outbox.self_hosted')::boolean);
        -- As the table's owner: its index predicates and operators run when
        -- this is planned.
        SELECT i.min_id, i.max_id INTO min_id, max_id FROM outbox._table_id_range(r.relid) i;
        cursor_lower_bound := NULL;
        cursor_version := NULL;
        readable := NOT store_down;
        IF readable THEN
            BEGIN
                SELECT c.lower_bound, c.version INTO cursor_lower_bound, cursor_version
                  FROM outbox._cursor_peek(r.table_key) c;
            EXCEPTION
                WHEN connection_exception THEN
                    store_down := true;
                    readable := false;
                WHEN data_corrupted THEN
                    readable := false;
            END;
        END IF;
        lower := coalesce(cursor_lower_bound, 0);
        version := coalesce(cursor_version, 1);
        state := CASE
            WHEN NOT readable THEN 'cursor_unavailable'
            WHEN version > coded_version THEN 'complete'
            WHEN version > effective_version THEN 'awaiting_option'
            WHEN version < effective_version OR lower = 0 THEN 'pending'
            ELSE 'in_progress' END;
        -- In float8: ids may span the whole bigint range.
        fraction_done := CASE
            WHEN NOT readable THEN NULL
            WHEN state = 'complete' THEN 1
            WHEN state = 'pending' OR lower = 0 OR max_id IS NULL THEN 0
            ELSE least(greatest((lower::float8 - min_id::float8)
                                / (max_id::float8 - min_id::float8 + 1), 0), 1) END;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Sums of id spans overflow a bigint when ids are sparse: only whether
-- anything was backfilled matters.
CREATE OR REPLACE FUNCTION outbox.backfill_outboxes_for(silo_mode text DEFAULT NULL,
    scheduled_count int DEFAULT 0, max_batch_rate int DEFAULT 10000,
    force_synchronous boolean DEFAULT false) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    remaining bigint;
    backfilled boolean := false;
    tbl regclass;
    batch outbox.backfill_batch;
BEGIN
    silo_mode := coalesce(silo_mode, current_setting('outbox.silo_mode'));
    IF silo_mode NOT IN ('monolith', 'cell', 'control') THEN
        RAISE EXCEPTION 'silo_mode must be monolith, cell or control, not %', quote_literal(silo_mode)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM outbox._require(scheduled_count, 'scheduled_count');
    PERFORM outbox._require(max_batch_rate, 'max_batch_rate');
    PERFORM outbox._require(force_synchronous, 'force_synchronous');
    IF scheduled_count < 0 THEN
        RAISE EXCEPTION 'scheduled_count must be zero or positive, not %', scheduled_count
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_batch_rate <= 0 THEN
        RAISE EXCEPTION 'max_batch_rate must be positive, not %', max_batch_rate
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    remaining := max_batch_rate - scheduled_count;
    IF remaining <= 0 THEN
        RETURN false;
    END IF;
    FOR tbl IN SELECT * FROM outbox._local_tables(silo_mode) LOOP
        batch := outbox.process_backfill_batch(tbl, remaining::int, force_synchronous);
        CONTINUE WHEN batch IS NULL;
        remaining := remaining - batch.count;
        backfilled := backfilled OR batch.count > 0;
        EXIT WHEN remaining <= 0;
    END LOOP;
    RETURN backfilled;
END
$$;

------------------------------------------------------------------------------
-- Handlers: the function must exist (0.4.0 accepted any OID)
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox.register_handler(category text, handler regprocedure) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int;
    f record;
BEGIN
    PERFORM outbox._require(category, 'category');
    PERFORM outbox._require(handler, 'handler');
    SELECT c.id INTO category_id FROM outbox.categories c WHERE c.name = register_handler.category;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'category % is not registered', quote_literal(category)
            USING ERRCODE = 'undefined_object';
    END IF;
    SELECT p.prokind, p.proretset, p.prorettype, p.pronargs, p.proargtypes INTO f
      FROM pg_proc p WHERE p.oid = handler;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'handler: function with OID % does not exist', handler::oid
            USING ERRCODE = 'undefined_function';
    END IF;
    IF f.prokind <> 'f' OR f.proretset OR f.prorettype <> 'void'::regtype OR f.pronargs <> 1
       OR f.proargtypes[0] <> 'outbox.message'::regtype THEN
        RAISE EXCEPTION 'handler % must be a function (outbox.message) RETURNS void', handler
            USING ERRCODE = 'invalid_function_definition';
    END IF;
    INSERT INTO outbox.handlers AS h (category, handler) VALUES (category_id, handler)
        ON CONFLICT ON CONSTRAINT handlers_pkey DO UPDATE SET handler = excluded.handler;
    PERFORM outbox._invalidate_cache();
END
$$;

------------------------------------------------------------------------------
-- The Redis password is no longer a setting
------------------------------------------------------------------------------
-- 0.4.0 had outbox.redis_password; a copy set with ALTER DATABASE or ALTER
-- ROLE ... SET stays readable by every role in pg_db_role_setting.  ALTER
-- ... RESET cannot name it any more (outbox is a reserved prefix), so the
-- entries go directly.
UPDATE pg_catalog.pg_db_role_setting s
   SET setconfig = ARRAY(SELECT c FROM unnest(s.setconfig) c
                          WHERE c NOT LIKE 'outbox.redis\_password=%')
 WHERE EXISTS (SELECT FROM unnest(s.setconfig) c WHERE c LIKE 'outbox.redis\_password=%');
DELETE FROM pg_catalog.pg_db_role_setting s WHERE s.setconfig = '{}';

------------------------------------------------------------------------------
-- Privileges
------------------------------------------------------------------------------
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
               WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname <> '_in_logical_apply' LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;

-- Every object keeps its own privileges; the schema itself gives nothing.
-- The three table functions check the caller in C: it must own the table
-- and hold REGISTER on its category (outbox.grant_category).
GRANT USAGE ON SCHEMA outbox TO PUBLIC;
-- PostgreSQL clones the capture row trigger onto every new partition as the
-- role that creates or attaches it, and checks that role may execute it.
-- Called as anything but a trigger, it raises an error.
GRANT EXECUTE ON FUNCTION outbox.capture_row() TO PUBLIC;
GRANT EXECUTE ON FUNCTION
    outbox.register_table(regclass, text, text, name, name[], name, int, text),
    outbox.unregister_table(regclass),
    outbox.set_replication_version(regclass, int) TO PUBLIC;
