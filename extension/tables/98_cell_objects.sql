------------------------------------------------------------------------------
-- Which cell may speak for a cell-silo object (control side; issue 46)
------------------------------------------------------------------------------
-- Control takes a cell's message, tombstone or present only for an object
-- that lives in that cell (outbox._check_cell_objects, docs/security.md).
-- An object's organization comes from the message's shard: a scope listed
-- here keys its shards by organization (the shard identifier is the
-- organization's id, as Sentry's ORGANIZATION_SCOPE and the other scopes of
-- its cell outboxes).  A cell's message of a scope not listed is refused:
-- control could not tell whose it is.
CREATE TABLE outbox.organization_scopes (
    scope int PRIMARY KEY REFERENCES outbox.scopes (id)
);

CREATE TABLE outbox.organization_root (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    category  int     NOT NULL REFERENCES outbox.categories (id),
    table_key text    NOT NULL
);

-- What control recorded of each cell object it took: the organization of
-- its last message.  A later message, tombstone or present of the object
-- from a cell where that organization does not live is refused, whatever
-- shard it claims.  Kept after the object's deletion: a tombstone cannot be
-- erased by another cell.
CREATE TABLE outbox.cell_objects (
    category          int    NOT NULL,
    object_identifier bigint NOT NULL,
    organization      bigint NOT NULL,
    PRIMARY KEY (category, object_identifier)
);

-- The category of each cell table that tombstones and present named, as
-- first seen (the root's table is the root's category's): a message of
-- another category cannot name the table, so a tombstone of one object
-- cannot be passed off as another's.
CREATE TABLE outbox.cell_object_tables (
    table_key text PRIMARY KEY,
    category  int  NOT NULL
);

SELECT pg_catalog.pg_extension_config_dump('outbox.organization_scopes', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.organization_root', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.cell_objects', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.cell_object_tables', '');
