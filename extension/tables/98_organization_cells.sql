------------------------------------------------------------------------------
-- Where each organization lives (SPEC section 12; relocation, part 3)
------------------------------------------------------------------------------
-- Control's record of the cell that holds each organization: what clients
-- route an organization's requests by (outbox.organization_cell), and what
-- a move between cells flips at its cutover.  An organization not listed
-- lives nowhere yet, as far as control knows.
CREATE TABLE outbox.organization_cells (
    organization bigint      PRIMARY KEY,
    cell         text        NOT NULL REFERENCES outbox.cells (name),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON outbox.organization_cells (cell);

SELECT pg_catalog.pg_extension_config_dump('outbox.organization_cells', '');
