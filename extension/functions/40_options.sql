------------------------------------------------------------------------------
-- Options and the version gate
------------------------------------------------------------------------------
-- Checks an option's value for its kind; returns the kind.
CREATE OR REPLACE FUNCTION outbox._check_option(key text, value jsonb, source text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kind text := outbox._option_kind(key);
BEGIN
    IF value IS NULL THEN
        RETURN kind;
    END IF;
    IF kind = 'replication_version' THEN
        IF jsonb_typeof(value) <> 'number' OR value::numeric <> trunc(value::numeric)
           OR value::numeric < 0 OR value::numeric > 2147483647 THEN
            RAISE EXCEPTION '% for % must be an integer from 0 to 2147483647, not %',
                source, key, value USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSIF jsonb_typeof(value) <> 'null' AND (jsonb_typeof(value) <> 'array' OR EXISTS (
            SELECT FROM jsonb_array_elements(value) e WHERE jsonb_typeof(e) <> 'string')) THEN
        RAISE EXCEPTION '% for % must be a JSON array of cell names, not %', source, key, value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN kind;
END
$$;

CREATE OR REPLACE FUNCTION outbox.set_option(key text, value jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(value, 'value');
    PERFORM outbox._check_option(key, value, 'value');
    INSERT INTO outbox.options AS o (key, value) VALUES (key, value)
        ON CONFLICT ON CONSTRAINT options_pkey DO UPDATE SET value = excluded.value;
END
$$;

-- The GUC of the same name (postgresql.conf, ALTER SYSTEM/DATABASE/ROLE or
-- SET) when set, else the options table, else the default.
CREATE OR REPLACE FUNCTION outbox.get_option(key text) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kind text := outbox._check_option(key, NULL, 'value');
    setting text := current_setting(key, true);
    value jsonb;
BEGIN
    -- A placeholder GUC that was SET and then RESET reads as ''.
    IF setting IS NOT NULL AND setting <> '' THEN
        BEGIN
            value := setting::jsonb;
        EXCEPTION WHEN invalid_text_representation THEN
            RAISE EXCEPTION 'setting % = % is not JSON', key, quote_literal(setting)
                USING ERRCODE = 'invalid_parameter_value';
        END;
        PERFORM outbox._check_option(key, value, 'setting');
        RETURN value;
    END IF;
    SELECT o.value INTO value FROM outbox.options o WHERE o.key = get_option.key;
    IF FOUND THEN
        RETURN value;
    END IF;
    RETURN CASE kind WHEN 'replication_version' THEN '0'::jsonb END;
END
$$;

CREATE OR REPLACE FUNCTION outbox.unset_option(key text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._check_option(key, NULL, 'value');
    DELETE FROM outbox.options o WHERE o.key = unset_option.key;
END
$$;

-- min(gate option, coded version); the coded version when force_synchronous.
CREATE OR REPLACE FUNCTION outbox.find_replication_version(tbl regclass,
    force_synchronous boolean DEFAULT false) RETURNS int
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r outbox.registered_tables := outbox._registered(tbl);
BEGIN
    PERFORM outbox._require(force_synchronous, 'force_synchronous');
    IF force_synchronous THEN
        RETURN r.replication_version;
    END IF;
    RETURN least(outbox.get_option(format('outbox_replication.%s.replication_version',
                                          r.table_key))::int,
                 r.replication_version);
END
$$;

-- The cells a backfill of tbl writes to: the registered cells, or those of
-- them that outbox_replication.<table_key>.backfill.target_cells lists (a
-- listed cell that is not registered gets nothing).  The one resolver:
-- process_backfill_batch reads it too.
CREATE OR REPLACE FUNCTION outbox.target_cells(tbl regclass) RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r outbox.registered_tables := outbox._registered(tbl);
    cells jsonb := outbox.get_option(format('outbox_replication.%s.backfill.target_cells',
                                            r.table_key));
BEGIN
    RETURN ARRAY(SELECT c.name FROM outbox.cells c
                  WHERE cells IS NULL OR jsonb_typeof(cells) = 'null'
                     OR c.name IN (SELECT jsonb_array_elements_text(cells))
                  ORDER BY c.name);
END
$$;
