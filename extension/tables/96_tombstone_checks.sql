------------------------------------------------------------------------------
-- Tombstone checks to try again (SPEC section 9: one tenant cannot stop the
-- others; nothing is lost)
------------------------------------------------------------------------------
-- A delivered message of a table that is its category's only one asks
-- whether its row is gone (a tombstone).  When that read fails for a reason
-- of the table's (its lock or its owner's code passed outbox.owner_lock_timeout
-- or outbox.owner_code_timeout, the owner made it unreadable, the owner's
-- code failed), the message is delivered all the same and its object waits
-- here; the worker asks again, and records the tombstone once the read
-- succeeds.  control: the row is a control table's (its tombstone goes to
-- cell_tombstone).
CREATE TABLE outbox.tombstone_checks (
    table_key         text        NOT NULL,
    control           boolean     NOT NULL,
    object_identifier bigint      NOT NULL,
    error             text        NOT NULL,
    first_failed_at   timestamptz NOT NULL DEFAULT now(),
    attempts          int         NOT NULL DEFAULT 1,
    PRIMARY KEY (table_key, control, object_identifier)
);
SELECT pg_catalog.pg_extension_config_dump('outbox.tombstone_checks', '');
