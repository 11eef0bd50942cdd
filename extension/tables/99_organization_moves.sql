------------------------------------------------------------------------------
-- Moving an organization between cells (SPEC section 12; relocation, part 3)
------------------------------------------------------------------------------
-- One row per move in each database that takes part: on control (side
-- control) the move that its worker drives, step by step, over the links
-- (extension/functions/69_relocation/); in the source cell (side
-- source) its change log and fence; in the target cell (side target) its
-- fence until the cutover.
--   fenced: this cell refuses the organization's writes (the source from
--     the cutover on, for good; the target until the cutover);
--   changes: control's count of the change log entries the catch-up has
--     still to apply, as the source last said (the lag);
--   in_flight: the source's transactions that were running once it was
--     fenced (their virtual transaction ids), waited for before the last
--     catch-up; outbox_mark: the last outbox row the source wrote before
--     that, delivered before its rows are deleted;
--   plan: the source's (what the trigger and the catch-up need: tables,
--     their primary keys and references, in export order).
CREATE TABLE outbox.organization_moves (
    relocation   uuid        PRIMARY KEY,
    organization bigint      NOT NULL,
    side         text        NOT NULL CHECK (side IN ('control', 'source', 'target')),
    mode         text        NOT NULL DEFAULT 'move' CHECK (mode IN ('move', 'fork')),
    from_cell    text        NOT NULL,
    to_cell      text        NOT NULL,
    state        text        NOT NULL DEFAULT 'moving'
                     CHECK (state IN ('moving', 'paused', 'failed', 'complete', 'cancelled')),
    step         text        NOT NULL,
    fenced       boolean     NOT NULL DEFAULT false,
    rows_done    bigint      NOT NULL DEFAULT 0,
    rows_total   bigint      NOT NULL DEFAULT 0,
    changes      bigint,
    changes_applied bigint   NOT NULL DEFAULT 0,
    in_flight    text[],
    outbox_mark  bigint,
    plan         jsonb,
    fenced_at    timestamptz,
    lifted_at    timestamptz,
    error        text,
    failures     int         NOT NULL DEFAULT 0,
    retry_at     timestamptz,
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at  timestamptz
);
-- One move of an organization at a time, on each side.
CREATE UNIQUE INDEX ON outbox.organization_moves (organization, side)
    WHERE state NOT IN ('complete', 'cancelled');

-- The organization's rows as far as a cell taking part in a move knows:
-- the source's export and what its catch-up found since, the target's
-- rows written so far.  The fence refuses a write to one of them (present),
-- or one that refers to one of them.  A row that left the organization (it
-- was deleted, or now refers elsewhere) stays, not present: the catch-up
-- that found it gone gives its deletion again when it is read again.
-- No foreign key to organization_moves: the export and the copy write a
-- member for every row of the organization, and the key's check for each
-- took two thirds of the time the target spent staging a chunk, and as
-- long for each row of the source's export (issue 45).  Only the move's
-- own steps write members, for the move whose row they hold; a cancel
-- deletes them (no move's row is ever deleted).
CREATE TABLE outbox.move_members (
    relocation uuid    NOT NULL,
    model      text    NOT NULL,
    pk         bigint  NOT NULL,
    present    boolean NOT NULL DEFAULT true,
    PRIMARY KEY (relocation, model, pk)
);

-- The source's change log: every row of an Organization-scoped table that a
-- statement changed while the move runs, whoever's (which rows are the
-- organization's is decided when the catch-up reads them).  Written by the
-- statement's own transaction, so that a change committed is logged and a
-- change rolled back is not; read and forgotten by the catch-up once the
-- target applied it.
CREATE TABLE outbox.move_changes (
    relocation uuid   NOT NULL REFERENCES outbox.organization_moves ON DELETE CASCADE,
    seq        bigint GENERATED ALWAYS AS IDENTITY,
    model      text   NOT NULL,
    pk         bigint NOT NULL,
    PRIMARY KEY (relocation, seq)
);
