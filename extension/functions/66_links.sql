------------------------------------------------------------------------------
-- Links between clusters (SPEC section 11; docs/clusters.md)
------------------------------------------------------------------------------
-- Extension owner only (90_privileges.sql grants them to nobody), except
-- outbox.receive() and outbox.received(), which the extension owner grants
-- to the roles that the other sides' user mappings log in as.  Each peer
-- has a role of its own, named here (set_cell_server on control,
-- link_control on a cell): the receiving functions know the sender by the
-- role it logged in as (session_user), never by what it says.

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

-- Every configured peer of this database and the role it logs in here as:
-- each linked cell (control side), and control (cell side).
CREATE OR REPLACE FUNCTION outbox._link_peers()
    RETURNS TABLE (name text, link_role name, link_role_oid oid)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.name, c.link_role, c.link_role_oid FROM outbox.cells c WHERE c.link_role IS NOT NULL
    UNION ALL
    SELECT 'control', l.link_role, l.link_role_oid FROM outbox.control_link l
$$;

-- A peer's link role: an existing role that is not a superuser (a peer
-- has no business with more than the two receiving functions) and no other
-- peer's.  The first link also makes this side's receipt key.
CREATE OR REPLACE FUNCTION outbox._require_link_role(link_role name, peer text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    other text;
BEGIN
    IF link_role IS NULL THEN
        RAISE EXCEPTION 'link_role must not be NULL: it is the role % logs in here as', quote_literal(peer)
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles r WHERE r.rolname = link_role) THEN
        RAISE EXCEPTION 'role % does not exist', quote_ident(link_role)
            USING ERRCODE = 'undefined_object',
                  HINT = 'CREATE ROLE ' || quote_ident(link_role) || ' LOGIN, one for each peer.';
    END IF;
    IF EXISTS (SELECT FROM pg_roles r WHERE r.rolname = link_role AND r.rolsuper) THEN
        RAISE EXCEPTION 'link_role % is a superuser', quote_ident(link_role)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A peer logs in as its link role: it needs outbox.receive() and outbox.received(), nothing more.';
    END IF;
    SELECT p.name INTO other
      FROM outbox._link_peers() p
     WHERE p.link_role = _require_link_role.link_role AND p.name <> peer;
    IF FOUND THEN
        RAISE EXCEPTION 'role % is already the link role of %', quote_ident(link_role), quote_literal(other)
            USING ERRCODE = 'duplicate_object',
                  DETAIL = 'Each peer logs in as a role of its own: that is how this side knows who is speaking.';
    END IF;
    INSERT INTO outbox.link_secret (secret)
    SELECT decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex')
        ON CONFLICT DO NOTHING;
END
$$;

-- Control side: cell's messages go through server (NULL ends the link:
-- they stay here for local handlers), and the cell's worker logs in here
-- as link_role to deliver its own.
CREATE OR REPLACE FUNCTION outbox.set_cell_server(cell text, server name, link_role name DEFAULT NULL)
    RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(cell, 'cell');
    IF server IS NOT NULL THEN
        PERFORM outbox._require_link_server(server);
        PERFORM outbox._require_link_role(link_role, cell);
    ELSIF link_role IS NOT NULL THEN
        RAISE EXCEPTION 'link_role must be NULL when server is: an unlinked cell delivers nothing here'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE outbox.cells c SET server = set_cell_server.server, link_role = set_cell_server.link_role,
                              link_role_oid = (SELECT r.oid FROM pg_roles r
                                                WHERE r.rolname = set_cell_server.link_role)
     WHERE c.name = cell;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cell % is not registered', quote_literal(cell)
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM outbox._invalidate_cache();
END
$$;

-- Cell side: this database is the cell cell_name, the control database is
-- reached through server, and control's worker logs in here as link_role.
CREATE OR REPLACE FUNCTION outbox.link_control(server name, cell_name text, link_role name)
    RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(server, 'server');
    PERFORM outbox._require(cell_name, 'cell_name');
    PERFORM outbox._require_link_server(server);
    PERFORM outbox._require_cell(cell_name, 'cell_name');
    PERFORM outbox._require_link_role(link_role, 'control');
    INSERT INTO outbox.control_link AS l (server, cell_name, link_role, link_role_oid)
    VALUES (server, cell_name, link_role,
            (SELECT r.oid FROM pg_roles r WHERE r.rolname = link_control.link_role))
        ON CONFLICT (singleton) DO UPDATE SET server = excluded.server, cell_name = excluded.cell_name,
                                              link_role = excluded.link_role,
                                              link_role_oid = excluded.link_role_oid;
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

-- Who is calling the receiving functions: the peer whose link role logged
-- in (session_user, which only a superuser can change), 'control' or a
-- cell's name; anyone else is refused.  The role is the one configured by
-- identity, not by name: a role renamed since, dropped and created again
-- under the name, or made a superuser since, stops the link with a clear
-- error until the link is configured again.  And the link protocol: both
-- sides speak the same one, or the link stops, visibly, until they do.
CREATE OR REPLACE FUNCTION outbox._link_peer(protocol int) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    peer record;
    caller record;
BEGIN
    IF protocol IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION 'link protocol % is not spoken here: this database speaks link protocol 1 (pg_outbox %)',
            coalesce(protocol::text, 'NULL'),
            (SELECT e.extversion FROM pg_extension e WHERE e.extname = 'pg_outbox')
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Run the same version of pg_outbox on both sides of a link (docs/clusters.md, "Upgrading linked clusters").';
    END IF;
    SELECT r.oid, r.rolname, r.rolsuper INTO caller FROM pg_roles r WHERE r.rolname = session_user;
    SELECT p.name, p.link_role, p.link_role_oid INTO peer
      FROM outbox._link_peers() p
     WHERE p.link_role_oid = caller.oid OR p.link_role = session_user
     ORDER BY p.link_role_oid = caller.oid DESC LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'role % is not the link role of a peer of this database', quote_ident(session_user)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Name it with outbox.set_cell_server(cell, server, link_role) on control, or outbox.link_control(server, cell_name, link_role) on a cell.';
    ELSIF peer.link_role_oid IS DISTINCT FROM caller.oid THEN
        RAISE EXCEPTION 'role % is not the link role of %: that role was dropped since, and this one created under its name',
            quote_ident(session_user), quote_literal(peer.name)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'If it is the peer''s, configure the link again (outbox.set_cell_server or outbox.link_control).';
    ELSIF peer.link_role <> session_user THEN
        RAISE EXCEPTION 'role % is the link role of % under another name: it was renamed from %',
            quote_ident(session_user), quote_literal(peer.name), quote_ident(peer.link_role)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Configure the link again with the new name (outbox.set_cell_server or outbox.link_control).';
    ELSIF caller.rolsuper THEN
        RAISE EXCEPTION 'link role % of % is a superuser now', quote_ident(session_user),
            quote_literal(peer.name)
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'A peer logs in as its link role: it needs outbox.receive() and outbox.received(), nothing more.',
                  HINT = 'ALTER ROLE ' || quote_ident(session_user) || ' NOSUPERUSER.';
    END IF;
    RETURN peer.name;
END
$$;

-- The messages of a batch receive() took, checked (categories, scopes,
-- tombstones and present) and written as capture writes, control rows as
-- messages of own_cell (src/link/received_rows.cpp); the extension owner's
-- only.
CREATE OR REPLACE FUNCTION outbox._insert_received(own_cell text, control boolean,
    shard_scopes text[], shard_identifiers bigint[], categories text[],
    object_identifiers bigint[], payloads jsonb[], tombstones text[], present text[],
    OUT written bigint, OUT gone int, OUT there int)
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__insert_received';

-- A received batch's tombstones, of rows deleted on the other side: a
-- deleted control row is recorded in cell_tombstone, a deleted cell row in
-- control_tombstone; a row that is there again (present) forgets its
-- tombstone (called by receive, which says whether any of either came).
CREATE OR REPLACE FUNCTION outbox._receive_tombstones(silo text, any_gone boolean,
    any_there boolean, tombstones text[], present text[], object_identifiers bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Static statements, one per tombstone table (issue 45: no
    -- statement built in SQL).
    IF any_gone AND silo = 'control' THEN
        INSERT INTO outbox.cell_tombstone (table_name, object_identifier)
        SELECT t.name, t.object FROM unnest(tombstones, object_identifiers) t(name, object)
         WHERE t.name IS NOT NULL ON CONFLICT DO NOTHING;
    ELSIF any_gone THEN
        INSERT INTO outbox.control_tombstone (table_name, object_identifier)
        SELECT t.name, t.object FROM unnest(tombstones, object_identifiers) t(name, object)
         WHERE t.name IS NOT NULL ON CONFLICT DO NOTHING;
    END IF;
    IF any_there AND silo = 'control' THEN
        DELETE FROM outbox.cell_tombstone t USING unnest(present, object_identifiers) p(name, object)
         WHERE p.name IS NOT NULL AND t.table_name = p.name AND t.object_identifier = p.object;
    ELSIF any_there THEN
        DELETE FROM outbox.control_tombstone t
         USING unnest(present, object_identifiers) p(name, object)
         WHERE p.name IS NOT NULL AND t.table_name = p.name AND t.object_identifier = p.object;
    END IF;
END
$$;

-- Called by the other side's worker, logged in as its link role: takes a
-- batch of messages into the local outbox, in order, with the tombstones
-- that came with them, and records the batch in outbox.inbox (a batch
-- already there is not taken again: 0); forgets the batches the sender
-- acknowledges, which it had taken before.  Returns how many messages it
-- took.  The local worker then delivers them to the local handlers.
--
-- A peer delivers only what its side owns: control sends control-silo
-- messages of this cell (cell_names all this cell's name), a cell sends
-- its cell-silo messages (cell_names all its own name).  The message
-- arrays have one element per message, in shard order; scopes and
-- categories travel by name; tombstones[m] is the table whose row of
-- message m's object is gone on the sender's side (NULL: none), so a
-- tombstone only ever comes with a message of its object; present[m]
-- (NULL for all: none) is the table whose row of message m's object is
-- there on the sender's side, checked as a tombstone is: a tombstone of it
-- here is removed (the row was deleted and written again with the same id,
-- and the cascade must not take the new row's children).  row_ids are
-- the sender's rows and receipt its proof of having sent them (handed back
-- by outbox.received()); session is the token of the sender's
-- outbox.received() call on this connection.
CREATE OR REPLACE FUNCTION outbox.receive(protocol int, session bigint, batch bigint, receipt text,
    row_ids bigint[], shard_scopes text[], shard_identifiers bigint[], cell_names text[],
    categories text[], object_identifiers bigint[], payloads jsonb[], tombstones text[],
    acknowledged bigint[] DEFAULT '{}', present text[] DEFAULT NULL) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Without JIT: planned over tables never analyzed (cell_objects, the
-- scopes) and arrays of hundreds of messages, the check's statement cost
-- past jit_above_cost, and each call compiled it for about 0.5 s: a core
-- taken from every move and writer of the cells (bench/relocation/move.sh).
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    peer text := outbox._link_peer(protocol);
    silo text := CASE WHEN peer = 'control' THEN 'control' ELSE 'cell' END;
    own_cell text := CASE WHEN peer = 'control' THEN (SELECT l.cell_name FROM outbox.control_link l)
                          ELSE peer END;
    n int := cardinality(shard_scopes);
    taken record;
    wrong text;
BEGIN
    PERFORM outbox._require(session, 'session');
    PERFORM outbox._require(batch, 'batch');
    PERFORM outbox._require(receipt, 'receipt');
    PERFORM outbox._require(row_ids, 'row_ids');
    PERFORM outbox._require(acknowledged, 'acknowledged');
    IF n IS NULL OR cardinality(shard_identifiers) IS DISTINCT FROM n
       OR cardinality(cell_names) IS DISTINCT FROM n OR cardinality(categories) IS DISTINCT FROM n
       OR cardinality(object_identifiers) IS DISTINCT FROM n
       OR cardinality(payloads) IS DISTINCT FROM n OR cardinality(tombstones) IS DISTINCT FROM n
       OR (present IS NOT NULL AND cardinality(present) IS DISTINCT FROM n) THEN
        RAISE EXCEPTION 'the message arrays must all have one element per message'
            USING ERRCODE = 'array_subscript_error';
    END IF;
    -- One C loop over the cells when all is well (<@); the first wrong one
    -- named when not.
    IF own_cell IS NULL OR NOT cell_names <@ ARRAY[own_cell] THEN
        SELECT coalesce(quote_literal(c.name), 'NULL') INTO wrong FROM unnest(cell_names) c(name)
         WHERE c.name IS DISTINCT FROM own_cell LIMIT 1;
        RAISE EXCEPTION '% may send messages of cell % only, not of %', quote_literal(peer),
            coalesce(quote_literal(own_cell), 'NULL'), wrong
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = CASE silo WHEN 'control' THEN 'Control sends a cell the control messages of that cell.'
                                     ELSE 'A cell sends control its own cell messages.' END;
    END IF;
    -- Held to the end of this transaction: a newer connection's
    -- outbox.received() waits for it.
    PERFORM FROM outbox.inbox_sessions s
      WHERE s.origin = peer AND s.session = receive.session FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % is not the current connection of sender %', session,
            quote_literal(peer)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'A sender calls outbox.received() with a new session on each connection.';
    END IF;
    DELETE FROM outbox.inbox i WHERE i.origin = peer AND i.batch = ANY (acknowledged);
    INSERT INTO outbox.inbox AS i (origin, batch, row_ids, messages, receipt)
    VALUES (peer, batch, row_ids, n, receipt) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- Checked and written in one pass over the arrays, in the order they
    -- came: ids follow it within each shard.
    taken := outbox._insert_received(own_cell, silo = 'control', shard_scopes, shard_identifiers,
                                     categories, object_identifiers, payloads, tombstones,
                                     present);
    -- Control: each object must live in the sending cell (a refusal takes
    -- nothing: the rows above and the inbox entry roll back with it).
    IF silo = 'cell' THEN
        PERFORM outbox._check_cell_objects(peer, shard_scopes, shard_identifiers, categories,
                                           object_identifiers, tombstones, present);
    END IF;
    PERFORM outbox._receive_tombstones(silo, taken.gone > 0, taken.there > 0, tombstones,
                                       present, object_identifiers);
    -- The worker drains them once this commits (_insert_received wakes it
    -- as capture does); without one they wait for outbox.drain().
    RETURN n;
END
$$;

-- Called by the other side's worker, logged in as its link role, before it
-- sends anything on a new connection, with a new random session token:
-- that connection becomes the sender's current one (the batches of an
-- older one are refused from now on, and one still running is waited
-- for), and the answer is the batches from the sender that this database
-- took and the sender has not acknowledged (its answer may have been
-- lost), oldest first, with the receipts it gave for them.
CREATE OR REPLACE FUNCTION outbox.received(protocol int, session bigint)
    RETURNS TABLE (batch bigint, row_ids bigint[], messages int, receipt text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    peer text := outbox._link_peer(protocol);
BEGIN
    PERFORM outbox._require(session, 'session');
    INSERT INTO outbox.inbox_sessions AS s (origin, session) VALUES (peer, session)
        ON CONFLICT (origin) DO UPDATE SET session = excluded.session,
                                           connected_at = excluded.connected_at;
    RETURN QUERY SELECT i.batch, i.row_ids, i.messages, i.receipt FROM outbox.inbox i
                  WHERE i.origin = peer ORDER BY i.received_at, i.batch;
END
$$;

-- The extension owner's: a new key for this side's receipts, without
-- stopping the links.  The key before it is kept as previous until now() +
-- overlap: the receipts of batches sent before the rotation (in the peers'
-- inboxes, unacknowledged) are recognised with either key until then.
-- Returns when the previous key stops counting.  One rotation at a time: a
-- second one during an overlap would drop the key before (docs/clusters.md,
-- "Rotating the link secret").
CREATE OR REPLACE FUNCTION outbox.rotate_link_secret(overlap interval DEFAULT '1 day')
    RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s outbox.link_secret;
BEGIN
    PERFORM outbox._require(overlap, 'overlap');
    IF overlap < interval '0' OR overlap > interval '30 days' THEN
        RAISE EXCEPTION 'overlap % is out of range: from 0 to 30 days', overlap
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Receipts of the previous key are recognised for that long; it must be bounded.';
    END IF;
    SELECT * INTO s FROM outbox.link_secret FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no link secret to rotate: no link was ever configured here'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF s.previous_until > now() THEN
        RAISE EXCEPTION 'a rotation is in progress until %', s.previous_until
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'A second rotation now would drop the key before it, and with it the receipts only that key recognises.',
                  HINT = 'Rotate again after that time.';
    END IF;
    UPDATE outbox.link_secret
       SET previous = secret, previous_until = now() + overlap,
           secret = decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex');
    RETURN now() + overlap;
END
$$;

-- The extension owner's, on the sending side: the destination forgets its
-- batch (an entry of outbox.link_unrecognised: its receipt is not this
-- side's under any key).  It goes with the next batch as an
-- acknowledgement; rows of it still here go out again (this side cannot
-- tell whether it sent them: handlers are idempotent).
CREATE OR REPLACE FUNCTION outbox.give_up_link_batch(destination text, batch bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(destination, 'destination');
    PERFORM outbox._require(batch, 'batch');
    UPDATE outbox.link_unrecognised u SET given_up_at = now()
     WHERE u.destination = give_up_link_batch.destination AND u.batch = give_up_link_batch.batch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'batch % of destination % is not in outbox.link_unrecognised', batch,
            quote_literal(destination)
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
