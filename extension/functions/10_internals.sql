------------------------------------------------------------------------------
-- C++ internals
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox.capture_statement() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_capture_statement';
CREATE OR REPLACE FUNCTION outbox.capture_row() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_capture_row';
CREATE OR REPLACE FUNCTION outbox._in_logical_apply() RETURNS boolean
    LANGUAGE c STABLE PARALLEL SAFE AS 'MODULE_PATHNAME', 'outbox__in_logical_apply';
CREATE OR REPLACE FUNCTION outbox.capture_truncate() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_capture_truncate';
CREATE OR REPLACE FUNCTION outbox._invalidate_cache() RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__invalidate_cache';
CREATE OR REPLACE FUNCTION outbox._option_kind(key text) RETURNS text
    LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox__option_kind';
CREATE OR REPLACE FUNCTION outbox._valid_table_key(table_key text) RETURNS boolean
    LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox__valid_table_key';
CREATE OR REPLACE FUNCTION outbox._boundary_selftest(mode text) RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox__boundary_selftest';

------------------------------------------------------------------------------
-- Argument checks shared by the SQL functions
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox._require(arg anyelement, arg_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF arg IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', arg_name USING ERRCODE = 'null_value_not_allowed';
    END IF;
END
$$;

-- Scope, category and cell names: plain words, so that they read the same in
-- SQL, logs and metrics.
CREATE OR REPLACE FUNCTION outbox._check_name(value text, arg_name text, pattern text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(value, arg_name);
    IF value !~ pattern OR length(value) > 63 THEN
        RAISE EXCEPTION '% % is not a valid name', arg_name, quote_literal(value)
            USING ERRCODE = 'invalid_name',
                  HINT = format('Use at most 63 characters matching %s.', pattern);
    END IF;
END
$$;

-- The id of the registered scope, or an error naming it.
CREATE OR REPLACE FUNCTION outbox._scope_id(scope text) RETURNS int
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_id int;
BEGIN
    PERFORM outbox._require(scope, 'scope');
    SELECT s.id INTO found_id FROM outbox.scopes s WHERE s.name = _scope_id.scope;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'scope % is not registered', quote_literal(scope)
            USING ERRCODE = 'undefined_object', HINT = 'Register it with outbox.register_scope().';
    END IF;
    RETURN found_id;
END
$$;

-- The id of the registered category, or an error naming it.
CREATE OR REPLACE FUNCTION outbox._category_id(category text) RETURNS int
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

-- cell (the argument arg_name) is a registered cell, or an error naming it.
CREATE OR REPLACE FUNCTION outbox._require_cell(cell text, arg_name text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(cell, arg_name);
    IF NOT EXISTS (SELECT FROM outbox.cells c WHERE c.name = _require_cell.cell) THEN
        RAISE EXCEPTION '%cell % is not registered',
            CASE WHEN arg_name <> 'cell' THEN arg_name || ': ' ELSE '' END, quote_literal(cell)
            USING ERRCODE = 'undefined_object',
                  HINT = format('SELECT outbox.register_cell(%L);', cell);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION outbox._check_id(id int, arg_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF id < 0 THEN
        RAISE EXCEPTION '% must be zero or positive, not %', arg_name, id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
