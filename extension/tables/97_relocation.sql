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
