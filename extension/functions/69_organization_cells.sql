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
    IF NOT EXISTS (SELECT FROM outbox.cells c WHERE c.name = cell) THEN
        RAISE EXCEPTION 'cell % is not registered', quote_literal(cell)
            USING ERRCODE = 'undefined_object',
                  HINT = format('SELECT outbox.register_cell(%L);', cell);
    END IF;
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
