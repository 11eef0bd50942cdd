------------------------------------------------------------------------------
-- Relocation scopes (SPEC section 12; Sentry's __relocation_scope__)
------------------------------------------------------------------------------
-- A table's scopes: one of Excluded, User, Organization, Config, Global, or
-- a set of several decided per row by scope_function (row in, scope out).
-- The rules of a set (no Excluded, a function) are checked by
-- outbox.set_relocation_scope and reported by outbox.check_models() when a
-- row breaks them anyway (a dropped function, a hand edit, an old dump).
-- plain_columns: integer columns named *_id that are values, not
-- references, so that check_models does not report them as unregistered
-- cross-silo columns.
CREATE TABLE outbox.relocation_scopes (
    relid          regclass     PRIMARY KEY,
    scopes         text[]       NOT NULL CHECK (cardinality(scopes) > 0 AND scopes <@
                       ARRAY['Excluded', 'User', 'Organization', 'Config', 'Global']),
    scope_function regprocedure,
    plain_columns  name[]       NOT NULL DEFAULT '{}'
);

-- The table whose rows define an export of a scope: Organization's root is
-- the organization table, User's the users table.
CREATE TABLE outbox.relocation_roots (
    scope text     PRIMARY KEY CHECK (scope IN ('User', 'Organization')),
    relid regclass NOT NULL
);

SELECT pg_catalog.pg_extension_config_dump('outbox.relocation_scopes', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.relocation_roots', '');

------------------------------------------------------------------------------
-- Relocation, part 2: imports (extension/functions/69_relocation/2*_import_*.sql)
------------------------------------------------------------------------------
-- The export to import, as outbox.export_organizations (or export_users)
-- wrote it, manifest row included, loaded by COPY under a uuid the operator
-- picks:  \copy outbox.relocation_rows FROM 'org.tsv'  after exporting with
--   COPY (SELECT '<uuid>', e.* FROM outbox.export_organizations('{1}') e) TO ...
CREATE TABLE outbox.relocation_rows (
    relocation uuid   NOT NULL,
    ordinal    bigint NOT NULL,
    model      text   NOT NULL,
    pk         bigint,
    fields     jsonb  NOT NULL,
    PRIMARY KEY (relocation, ordinal)
);

-- One row per relocation imported here (outbox.relocations shows it).
-- plan: what the import computed from the manifest and this database's
-- catalog (tables, columns, references), again on every resumed CALL.
CREATE TABLE outbox.relocation_state (
    relocation        uuid        PRIMARY KEY,
    scope             text        NOT NULL CHECK (scope IN ('User', 'Organization')),
    roots             bigint[]    NOT NULL,
    source            text        NOT NULL,
    target            text        NOT NULL,
    users_relocation  uuid,
    state             text        NOT NULL CHECK (state IN ('importing', 'paused', 'failed',
                          'imported', 'complete', 'mismatched', 'cancelled')),
    step              text,
    rows_done         bigint      NOT NULL DEFAULT 0,
    rows_total        bigint      NOT NULL,
    plan              jsonb,
    -- new: keys from the target's sequences (an import, a fork); kept: the
    -- source's (a move: the cells keep their id ranges apart).
    keys              text        NOT NULL DEFAULT 'new' CHECK (keys IN ('new', 'kept')),
    error             text,
    started_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at       timestamptz
);

-- Sentry's ImportChunk: a chunk is recorded in the transaction that wrote
-- it, so a chunk done is never done again, and a chunk lost to a crash left
-- nothing behind.  step insert: rows first_ordinal..last_ordinal of the
-- export written; step deferred: the cycle-breaking columns of those rows
-- set.
CREATE TABLE outbox.import_chunks (
    relocation    uuid        NOT NULL REFERENCES outbox.relocation_state ON DELETE CASCADE,
    step          text        NOT NULL CHECK (step IN ('insert', 'deferred')),
    table_key     text        NOT NULL,
    first_ordinal bigint      NOT NULL,
    last_ordinal  bigint      NOT NULL,
    rows_written  bigint      NOT NULL,
    done_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (relocation, step, first_ordinal)
);

-- Old primary key to new, per relocation and table key.  A User import's
-- map, copied from control into a cell, rewrites the cells' cross-silo
-- values (import_organizations(..., users_relocation)).
CREATE TABLE outbox.relocation_pk_map (
    relocation uuid   NOT NULL,
    table_key  text   NOT NULL,
    old        bigint NOT NULL,
    new        bigint NOT NULL,
    replaced   jsonb, -- the row a collision hook wrote instead (the compare expects it)
    PRIMARY KEY (relocation, table_key, old)
);

-- What outbox.compare_relocation found; none: the import is complete.
CREATE TABLE outbox.relocation_findings (
    relocation  uuid   NOT NULL REFERENCES outbox.relocation_state ON DELETE CASCADE,
    table_key   text   NOT NULL,
    pk          bigint,
    finding     text   NOT NULL CHECK (finding IN ('missing', 'extra', 'field', 'count')),
    column_name text,
    expected    jsonb,
    actual      jsonb
);
CREATE INDEX ON outbox.relocation_findings (relocation);

-- A table owner's answer to a unique collision in an import (Sentry's
-- write_relocation_import): (relocation uuid, row jsonb) RETURNS jsonb,
-- the row to write instead, run as the table's owner.
CREATE TABLE outbox.relocation_collision_hooks (
    relid regclass     PRIMARY KEY,
    hook  regprocedure NOT NULL
);

SELECT pg_catalog.pg_extension_config_dump('outbox.relocation_collision_hooks', '');
