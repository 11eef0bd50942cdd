------------------------------------------------------------------------------
-- Consumers outside the database (docs/consumers.md)
------------------------------------------------------------------------------
-- One row per shard that a consumer holds or last held: outbox.claim()
-- writes it, and outbox.complete() or outbox.fail() delete it, or, when
-- the worker may want the shard's turn, leave it released (its lease_until
-- then the time it ended, its rows forgotten).  While lease_until is
-- ahead, nobody else drains the shard; once it has passed, the shard is due
-- again (a later claim replaces the row), and the token no longer completes
-- anything.  The same consumer claims the shard again only once the others
-- have had it (docs/consumers.md, "Turns").  handed_out keeps the claimed
-- rows message by message (where the claim found them, and their ids) and
-- each message's category, object and oldest row's time, encoded in one
-- bytea (src/consumers/handed_out.hpp), so that completing k messages
-- deletes exactly the rows that were handed out, never a row committed
-- after the claim.  Not dumped: a lease means nothing in a restored
-- database.
CREATE SEQUENCE outbox.consumer_claims_claim_seq;
CREATE TABLE outbox.consumer_claims (
    claim            bigint        PRIMARY KEY,
    silo             text          NOT NULL CHECK (silo IN ('cell', 'control')),
    shard_scope      int           NOT NULL,
    shard_identifier bigint        NOT NULL,
    cell_name        text          NOT NULL DEFAULT '',
    consumer         regrole       NOT NULL,
    claimed_at       timestamptz   NOT NULL,
    lease_until      timestamptz   NOT NULL,
    categories       int[]         NOT NULL,
    handed_out       bytea         NOT NULL,
    released         boolean       NOT NULL DEFAULT false,
    UNIQUE (silo, shard_scope, shard_identifier, cell_name)
);
-- Uncompressed (varints hardly compress, and pglz on every claim's leases
-- cost it more than the toast rows did), and in line up to a page: a lease
-- of a few thousand one-row messages needs no toast rows at all.
ALTER TABLE outbox.consumer_claims ALTER handed_out SET STORAGE EXTERNAL,
    SET (toast_tuple_target = 8160);

-- What outbox.claim() returns: one coalesced message of a claimed shard.
CREATE TYPE outbox.claimed_message AS (
    claim             bigint,   -- the shard's claim token
    message_number    int,      -- its place in the claim, from 1
    silo              text,
    shard_scope       int,
    shard_identifier  bigint,
    cell_name         text,     -- control silo only
    category          text,
    object_identifier bigint,
    payload           jsonb,    -- the newest row's
    first_id          bigint,
    last_id           bigint,
    coalesced         int,      -- outbox rows delivered as this message
    lease_until       timestamptz
);
