------------------------------------------------------------------------------
-- Where each organization lives (SPEC section 12; relocation, part 3)
------------------------------------------------------------------------------
-- The extension owner's, on control (or a monolith): records that
-- organization lives in cell; cell NULL forgets the organization (deleted).
CREATE OR REPLACE FUNCTION outbox.set_organization_cell(organization bigint, cell text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM outbox._require(organization, 'organization');
    IF current_setting('outbox.silo_mode') = 'cell' THEN
        RAISE EXCEPTION 'outbox.organization_cells is control''s record, and this is a cell'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Call outbox.set_organization_cell on control.';
    END IF;
    IF cell IS NULL THEN
        DELETE FROM outbox.organization_cells o WHERE o.organization = organization;
        RETURN;
    END IF;
    PERFORM outbox._require_cell(cell, 'cell');
    INSERT INTO outbox.organization_cells AS o (organization, cell)
    VALUES (organization, cell)
    ON CONFLICT ON CONSTRAINT organization_cells_pkey
        DO UPDATE SET cell = excluded.cell, updated_at = now()
        WHERE o.cell IS DISTINCT FROM excluded.cell;
END
$$;

-- Everyone's: the cell an application sends organization's requests to
-- (NULL: not known here).  It tells no more than the cell of an id the
-- caller names.
CREATE OR REPLACE FUNCTION outbox.organization_cell(organization bigint) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(organization, 'organization');
    RETURN (SELECT o.cell FROM outbox.organization_cells o WHERE o.organization = $1);
END
$$;

------------------------------------------------------------------------------
-- Which cell may speak for a cell object (control side; issue 46)
------------------------------------------------------------------------------
-- Does organization live in cell: organization_cells names it, or a move of
-- it between cell and another is in progress (either side may still speak:
-- the source until its delete step ends, the target from its cutover).
CREATE OR REPLACE FUNCTION outbox._lives_in(organization bigint, cell text) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT FROM outbox.organization_cells o
                    WHERE o.organization = _lives_in.organization AND o.cell = _lives_in.cell)
        OR EXISTS (SELECT FROM outbox.organization_moves v
                    WHERE v.organization = _lives_in.organization AND v.side = 'control'
                      AND v.state NOT IN ('complete', 'cancelled')
                      AND _lives_in.cell IN (v.from_cell, v.to_cell))
$$;

-- The extension owner's, on control: the shard identifiers of scope are
-- organizations' ids, so that control can tell whose a cell's message of it
-- is (and refuses one of another scope).
CREATE OR REPLACE FUNCTION outbox.set_organization_scope(scope text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO outbox.organization_scopes (scope) VALUES (outbox._scope_id(scope))
        ON CONFLICT DO NOTHING;
END
$$;

-- The extension owner's, on control: the scope no longer names
-- organizations (a cell's messages of it are refused from now on).
CREATE OR REPLACE FUNCTION outbox.unset_organization_scope(scope text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(scope, 'scope');
    DELETE FROM outbox.organization_scopes o USING outbox.scopes s
     WHERE s.name = unset_organization_scope.scope AND o.scope = s.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'scope % does not name organizations here', quote_literal(scope)
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;

-- The extension owner's, on control: the organization root's category
-- (its object identifiers are organizations' ids) and its table's key in the
-- cells, which tombstones and present name.
CREATE OR REPLACE FUNCTION outbox.set_organization_root(category text, table_key text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int;
BEGIN
    category_id := outbox._category_id(category);
    PERFORM outbox._require(table_key, 'table_key');
    IF table_key = '' THEN
        RAISE EXCEPTION 'table_key must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO outbox.organization_root AS r (category, table_key) VALUES (category_id, table_key)
        ON CONFLICT (singleton) DO UPDATE SET category = excluded.category,
                                              table_key = excluded.table_key;
    -- The root's table is the root's category's, whatever was seen before.
    DELETE FROM outbox.cell_object_tables t WHERE t.table_key = set_organization_root.table_key;
    INSERT INTO outbox.cell_object_tables (table_key, category) VALUES (table_key, category_id);
END
$$;

-- What a batch taken from a cell says of its objects (_check_cell_objects
-- checked it): each object's organization, the last message's, and each
-- table's category.
CREATE OR REPLACE FUNCTION outbox._record_cell_objects(category_ids int[],
    object_identifiers bigint[], organizations bigint[], tables text[]) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO outbox.cell_objects AS c (category, object_identifier, organization)
    SELECT DISTINCT ON (u.category, u.object) u.category, u.object, u.organization
      FROM unnest(category_ids, object_identifiers, organizations) WITH ORDINALITY
           u(category, object, organization, n)
     ORDER BY u.category, u.object, u.n DESC
        ON CONFLICT (category, object_identifier) DO UPDATE SET organization = excluded.organization
     WHERE c.organization <> excluded.organization;
    INSERT INTO outbox.cell_object_tables (table_key, category)
    SELECT DISTINCT u.tbl, u.category FROM unnest(tables, category_ids) u(tbl, category)
     WHERE u.tbl IS NOT NULL
        ON CONFLICT (table_key) DO NOTHING;
$$;

-- Control's check of what a cell's link role delivers (outbox.receive):
-- each message's object must live in cell, the sending cell.  Its
-- organization is the shard's (organization_scopes) and, for the root's
-- category, the object itself; an object control recorded before must
-- belong to an organization of cell too; a tombstone or present must name
-- the table of the message's category.  Raises on the first message that
-- breaks a rule, naming it (the sender's round fails, visibly, and nothing
-- is taken); otherwise records each object's organization and each table's
-- category.
CREATE OR REPLACE FUNCTION outbox._check_cell_objects(cell text, shard_scopes text[],
    shard_identifiers bigint[], categories text[], object_identifiers bigint[],
    tombstones text[], present text[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int := cardinality(categories);
    category_ids int[];
    organizations bigint[];
    tables text[];
    refusal text;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    WITH m AS (
        SELECT u.n, u.scope_name, s.id AS scope, u.ident, u.category_name, k.id AS category,
               u.object, coalesce(u.gone, u.there) AS tbl
          FROM unnest(shard_scopes, shard_identifiers, categories, object_identifiers, tombstones,
                      coalesce(present, array_fill(NULL::text, ARRAY[n])))
               WITH ORDINALITY u(scope_name, ident, category_name, object, gone, there, n)
          JOIN outbox.scopes s ON s.name = u.scope_name
          JOIN outbox.categories k ON k.name = u.category_name
    ), o AS (
        SELECT m.*, os.scope IS NOT NULL AS keyed, m.ident AS shard_org,
               coalesce(r.category = m.category, false) AS is_root, r.table_key AS root_table,
               (SELECT c.organization FROM outbox.cell_objects c
                 WHERE c.category = m.category AND c.object_identifier = m.object) AS recorded_org,
               (SELECT t.category FROM outbox.cell_object_tables t WHERE t.table_key = m.tbl)
                   AS table_category,
               m.tbl IS NOT NULL AND min(m.category) OVER (PARTITION BY m.tbl)
                   <> max(m.category) OVER (PARTITION BY m.tbl) AS table_categories
          FROM m
          LEFT JOIN outbox.organization_scopes os ON os.scope = m.scope
          LEFT JOIN outbox.organization_root r ON true
    ), checked AS (
        SELECT o.n, o.category, CASE WHEN o.is_root THEN o.object ELSE o.shard_org END AS organization,
               o.tbl,
               CASE
               WHEN NOT o.keyed THEN
                   format('scope %L does not name organizations here, so control cannot tell whose'
                          ' object it is', o.scope_name)
               WHEN NOT outbox._lives_in(o.shard_org, cell) THEN
                   format('its shard (%L, %s) is organization %s, which does not live in cell %L',
                          o.scope_name, o.ident, o.shard_org, cell)
               WHEN o.is_root AND NOT outbox._lives_in(o.object, cell) THEN
                   format('its object is organization %s, which does not live in cell %L', o.object,
                          cell)
               WHEN o.recorded_org IS NOT NULL
                    AND o.recorded_org <> CASE WHEN o.is_root THEN o.object ELSE o.shard_org END
                    AND NOT outbox._lives_in(o.recorded_org, cell) THEN
                   format('control recorded its object as organization %s''s, which does not live'
                          ' in cell %L', o.recorded_org, cell)
               WHEN o.tbl IS NOT NULL AND o.is_root AND o.tbl IS DISTINCT FROM o.root_table THEN
                   format('a message of the organization root''s category names table %L, not %L',
                          o.tbl, o.root_table)
               WHEN o.tbl IS NOT NULL AND o.table_category IS NOT NULL
                    AND o.table_category <> o.category THEN
                   format('table %L is of category %L here', o.tbl,
                          (SELECT k.name FROM outbox.categories k WHERE k.id = o.table_category))
               WHEN o.table_categories THEN
                   format('the batch names table %L with messages of two categories', o.tbl)
               END AS refusal
          FROM o
    )
    SELECT array_agg(c.category ORDER BY c.n), array_agg(c.organization ORDER BY c.n),
           array_agg(c.tbl ORDER BY c.n),
           (array_agg(format('message %s (category %L, object %s): ', c.n,
                             categories[c.n], object_identifiers[c.n]) || c.refusal ORDER BY c.n)
                FILTER (WHERE c.refusal IS NOT NULL))[1]
      INTO category_ids, organizations, tables, refusal
      FROM checked c;
    IF refusal IS NOT NULL THEN
        RAISE EXCEPTION 'cell % may speak only for objects that live in it: %', quote_literal(cell),
            refusal
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Nothing of the batch was taken.',
                  HINT = 'outbox.organization_cells places organizations in cells; docs/security.md, "What a cell can still do".';
    END IF;
    PERFORM outbox._record_cell_objects(category_ids, object_identifiers, organizations, tables);
END
$$;
