------------------------------------------------------------------------------
-- Links between clusters (SPEC section 11; README, "Separate clusters")
------------------------------------------------------------------------------
-- Extension owner only (90_privileges.sql grants them to nobody), except
-- outbox.receive(), which the extension owner grants to the role that the
-- other side's user mapping logs in as.

-- The foreign server that reaches a cell's database (control side); NULL
-- ends the link: the cell's messages stay here for local handlers.
-- A link's server must exist and be owned by a superuser: its owner could
-- point it at another host and receive the worker's credentials there.
-- (The worker checks again at every connection: the owner may change.)
CREATE OR REPLACE FUNCTION outbox._require_link_server(server name) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    owner name;
    owner_is_super boolean;
BEGIN
    SELECT r.rolname, r.rolsuper INTO owner, owner_is_super
      FROM pg_foreign_server s JOIN pg_roles r ON r.oid = s.srvowner
     WHERE s.srvname = _require_link_server.server;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'server % does not exist', quote_ident(server)
            USING ERRCODE = 'undefined_object',
                  HINT = 'CREATE SERVER ... FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host, port, dbname), and a USER MAPPING for the worker''s role.';
    END IF;
    IF NOT owner_is_super THEN
        RAISE EXCEPTION 'server % is owned by %, not a superuser', quote_ident(server), quote_ident(owner)
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Its owner could point it at another host and receive the worker''s credentials there.',
                  HINT = 'ALTER SERVER ' || quote_ident(server) || ' OWNER TO a superuser.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION outbox.set_cell_server(cell text, server name) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(cell, 'cell');
    IF server IS NOT NULL THEN
        PERFORM outbox._require_link_server(server);
    END IF;
    UPDATE outbox.cells c SET server = set_cell_server.server WHERE c.name = cell;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cell % is not registered', quote_literal(cell)
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM outbox._invalidate_cache();
END
$$;

-- This database is the cell cell_name; the control database is reached
-- through server (cell side).
CREATE OR REPLACE FUNCTION outbox.link_control(server name, cell_name text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(server, 'server');
    PERFORM outbox._require(cell_name, 'cell_name');
    PERFORM outbox._require_link_server(server);
    IF NOT EXISTS (SELECT FROM outbox.cells c WHERE c.name = link_control.cell_name) THEN
        RAISE EXCEPTION 'cell % is not registered', quote_literal(cell_name)
            USING ERRCODE = 'undefined_object';
    END IF;
    INSERT INTO outbox.control_link AS l (server, cell_name) VALUES (server, cell_name)
        ON CONFLICT (singleton) DO UPDATE SET server = excluded.server, cell_name = excluded.cell_name;
    PERFORM outbox._invalidate_cache();
END
$$;

CREATE OR REPLACE FUNCTION outbox.unlink_control() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM outbox.control_link;
    PERFORM outbox._invalidate_cache();
END
$$;

-- Called by the other side's worker: takes a batch of messages into the
-- local outbox, in order, with the tombstones that came with them, and
-- records the batch in outbox.inbox (a batch already there is not taken
-- again: 0); forgets the batches the sender acknowledges, which it had
-- taken before.  Returns how many messages it took.  The local worker then
-- delivers them to the local handlers.  The message arrays have one
-- element per message, in shard order; row_ids are the sender's rows;
-- session is the token of the sender's outbox.received() call on this
-- connection.
CREATE OR REPLACE FUNCTION outbox.receive(origin text, silo text, session bigint, batch bigint,
    row_ids bigint[],
    shard_scopes int[], shard_identifiers bigint[], cell_names text[], categories text[],
    object_identifiers bigint[], payloads jsonb[], tombstone_tables text[] DEFAULT '{}',
    tombstone_objects bigint[] DEFAULT '{}', acknowledged bigint[] DEFAULT '{}') RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n int := cardinality(shard_scopes);
BEGIN
    PERFORM outbox._require(origin, 'origin');
    PERFORM outbox._require(silo, 'silo');
    PERFORM outbox._require(session, 'session');
    PERFORM outbox._require(batch, 'batch');
    PERFORM outbox._require(row_ids, 'row_ids');
    PERFORM outbox._require(acknowledged, 'acknowledged');
    IF silo NOT IN ('cell', 'control') THEN
        RAISE EXCEPTION 'silo must be ''cell'' or ''control'', not %', quote_literal(silo)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n IS NULL OR cardinality(shard_identifiers) IS DISTINCT FROM n
       OR cardinality(cell_names) IS DISTINCT FROM n OR cardinality(categories) IS DISTINCT FROM n
       OR cardinality(object_identifiers) IS DISTINCT FROM n
       OR cardinality(payloads) IS DISTINCT FROM n
       OR cardinality(tombstone_tables) IS DISTINCT FROM cardinality(tombstone_objects) THEN
        RAISE EXCEPTION 'the message arrays must all have one element per message'
            USING ERRCODE = 'array_subscript_error';
    END IF;
    IF silo = 'control' AND array_position(cell_names, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'cell_names must not contain NULL for control messages'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- A cell takes control's messages for itself only.
    IF silo = 'control' AND EXISTS (SELECT FROM outbox.control_link)
       AND EXISTS (SELECT FROM unnest(cell_names) c(name)
                    WHERE c.name <> (SELECT l.cell_name FROM outbox.control_link l)) THEN
        RAISE EXCEPTION 'this database is cell %, not %',
            quote_literal((SELECT l.cell_name FROM outbox.control_link l)),
            (SELECT quote_literal(c.name) FROM unnest(cell_names) c(name)
              WHERE c.name <> (SELECT l.cell_name FROM outbox.control_link l) LIMIT 1)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM unnest(categories) c(name)
                WHERE NOT EXISTS (SELECT FROM outbox.categories k WHERE k.name = c.name)) THEN
        RAISE EXCEPTION 'category % is not registered here',
            (SELECT quote_literal(c.name) FROM unnest(categories) c(name)
              WHERE NOT EXISTS (SELECT FROM outbox.categories k WHERE k.name = c.name) LIMIT 1)
            USING ERRCODE = 'undefined_object';
    END IF;
    -- Held to the end of this transaction: a newer connection's
    -- outbox.received() waits for it.
    PERFORM FROM outbox.inbox_sessions s
      WHERE s.origin = receive.origin AND s.session = receive.session FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % is not the current connection of sender %', session,
            quote_literal(origin)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'A sender calls outbox.received() with a new session on each connection.';
    END IF;
    DELETE FROM outbox.inbox i WHERE i.origin = receive.origin AND i.batch = ANY (acknowledged);
    INSERT INTO outbox.inbox AS i (origin, batch, row_ids, messages)
    VALUES (origin, batch, row_ids, n) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- Rows go in in the order they came: ids follow it within each shard.
    -- (No temporary table: a caller's own one of the same name would run
    -- its triggers as the extension owner.)
    EXECUTE format('INSERT INTO outbox.%I (shard_scope, shard_identifier, category,'
                   ' object_identifier, payload%s)'
                   ' SELECT m.scope, m.ident, k.id, m.object, m.payload%s'
                   ' FROM unnest($1, $2, $3, $4, $5, $6) WITH ORDINALITY'
                   ' AS m(scope, ident, cell, category_name, object, payload, n)'
                   ' JOIN outbox.categories k ON k.name = m.category_name ORDER BY m.n',
                   silo || '_outbox', CASE silo WHEN 'control' THEN ', cell_name' ELSE '' END,
                   CASE silo WHEN 'control' THEN ', m.cell' ELSE '' END)
        USING shard_scopes, shard_identifiers, cell_names, categories, object_identifiers,
              payloads;
    -- Tombstones of rows deleted on the other side: a deleted control row
    -- is recorded in cell_tombstone, a deleted cell row in control_tombstone.
    IF cardinality(tombstone_tables) > 0 THEN
        EXECUTE format('INSERT INTO outbox.%I (table_name, object_identifier)'
                       ' SELECT * FROM unnest($1, $2) ON CONFLICT DO NOTHING',
                       CASE silo WHEN 'control' THEN 'cell_tombstone' ELSE 'control_tombstone' END)
            USING tombstone_tables, tombstone_objects;
    END IF;
    IF n > 0 THEN
        PERFORM outbox._wake_worker_at_commit(); -- no worker: they wait for outbox.drain()
    END IF;
    RETURN n;
END
$$;

-- Called by the other side's worker before it sends anything on a new
-- connection, with a new random session token: that connection becomes
-- origin's current one (the batches of an older one are refused from now
-- on, and one still running is waited for), and the answer is the batches
-- from origin that this database took and origin has not acknowledged (its
-- answer may have been lost), oldest first.
CREATE OR REPLACE FUNCTION outbox.received(origin text, session bigint)
    RETURNS TABLE (batch bigint, row_ids bigint[], messages int)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM outbox._require(origin, 'origin');
    PERFORM outbox._require(session, 'session');
    INSERT INTO outbox.inbox_sessions AS s (origin, session) VALUES (origin, session)
        ON CONFLICT (origin) DO UPDATE SET session = excluded.session,
                                           connected_at = excluded.connected_at;
    RETURN QUERY SELECT i.batch, i.row_ids, i.messages FROM outbox.inbox i
                  WHERE i.origin = received.origin ORDER BY i.received_at, i.batch;
END
$$;
