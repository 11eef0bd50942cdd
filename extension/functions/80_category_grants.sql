------------------------------------------------------------------------------
-- Category grants
------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox._check_privilege_name(privilege text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._require(privilege, 'privilege');
    IF upper(privilege) NOT IN ('REGISTER', 'CONSUME') THEN
        RAISE EXCEPTION 'privilege must be ''REGISTER'' or ''CONSUME'', not %',
            quote_literal(privilege) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN upper(privilege);
END
$$;

CREATE OR REPLACE FUNCTION outbox.grant_category(category text, role regrole,
    privilege text DEFAULT 'REGISTER') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int := outbox._category_id(category);
BEGIN
    PERFORM outbox._require(role, 'role');
    privilege := outbox._check_privilege_name(privilege);
    INSERT INTO outbox.category_grants AS g (category, role, privilege)
    VALUES (category_id, role, privilege) ON CONFLICT DO NOTHING;
END
$$;

-- Revoking REGISTER is refused while the role (or a member that holds it
-- through the role alone) owns tables registered under the category:
-- registrations must keep the grant they were made with.
CREATE OR REPLACE FUNCTION outbox.revoke_category(category text, role regrole,
    privilege text DEFAULT 'REGISTER') RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    category_id int := outbox._category_id(category);
    still_registered text;
BEGIN
    PERFORM outbox._require(role, 'role');
    privilege := outbox._check_privilege_name(privilege);
    IF privilege = 'REGISTER' THEN
        SELECT string_agg(r.relid::text, ', ' ORDER BY r.table_key) INTO still_registered
          FROM outbox.registered_tables r
          JOIN pg_class c ON c.oid = r.relid
          JOIN pg_roles o ON o.oid = c.relowner
         WHERE r.category = category_id AND NOT o.rolsuper
           AND pg_has_role(c.relowner, role, 'USAGE')
           AND NOT EXISTS (SELECT FROM outbox.category_grants g
                            WHERE g.category = category_id AND g.privilege = 'REGISTER'
                              AND g.role <> revoke_category.role
                              AND pg_has_role(c.relowner, g.role, 'USAGE'));
        IF still_registered IS NOT NULL THEN
            RAISE EXCEPTION 'role % owns tables registered under category %: %', role,
                quote_literal(category), still_registered
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = 'Unregister them with outbox.unregister_table() first.';
        END IF;
    END IF;
    DELETE FROM outbox.category_grants g
     WHERE g.category = category_id AND g.role = revoke_category.role
       AND g.privilege = revoke_category.privilege;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'role % holds no % privilege on category %', role, privilege,
            quote_literal(category) USING ERRCODE = 'undefined_object';
    END IF;
    -- Fences the claims of the category made by roles that no longer hold
    -- CONSUME on it: their shards are due again, and their tokens complete
    -- nothing (outbox.complete() checks the grant too).
    IF privilege = 'CONSUME' THEN
        DELETE FROM outbox.consumer_claims l
         WHERE category_id = ANY (l.categories)
           AND NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = l.consumer AND r.rolsuper)
           AND NOT EXISTS (SELECT FROM outbox.category_grants g
                            WHERE g.category = category_id AND g.privilege = 'CONSUME'
                              AND pg_has_role(l.consumer, g.role, 'USAGE'));
    END IF;
END
$$;

-- Whether caller may register tbl under category (NULL: tbl's registered
-- category).  Called by the C gate of register_table, unregister_table and
-- set_replication_version for callers that are not superusers.  An unknown
-- category or table is left to the body to report.
CREATE OR REPLACE FUNCTION outbox._check_register_privilege(caller oid, tbl regclass, category text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cat record;
BEGIN
    IF category IS NULL THEN
        SELECT c.id, c.name INTO cat
          FROM outbox.registered_tables r JOIN outbox.categories c ON c.id = r.category
         WHERE r.relid = tbl;
    ELSE
        SELECT c.id, c.name INTO cat FROM outbox.categories c
         WHERE c.name = _check_register_privilege.category;
    END IF;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.category_grants g
                    WHERE g.category = cat.id AND g.privilege = 'REGISTER'
                      AND pg_has_role(caller, g.role, 'USAGE')) THEN
        RAISE EXCEPTION 'role % may not register tables under category %', caller::regrole,
            quote_literal(cat.name)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('The extension owner grants it: SELECT outbox.grant_category(%L, %L);',
                                cat.name, caller::regrole);
    END IF;
END
$$;
