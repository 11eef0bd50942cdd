------------------------------------------------------------------------------
-- Category grants
------------------------------------------------------------------------------
-- REGISTER: the role may register tables it owns under the category.
-- CONSUME: the role may claim and complete the category's messages from
-- outside the database.  Neither implies the other; members of a role
-- inherit its grants.
CREATE TABLE outbox.category_grants (
    category  int     NOT NULL REFERENCES outbox.categories (id),
    role      regrole NOT NULL,
    privilege text    NOT NULL CHECK (privilege IN ('REGISTER', 'CONSUME')),
    PRIMARY KEY (category, role, privilege)
);
SELECT pg_catalog.pg_extension_config_dump('outbox.category_grants', '');
