------------------------------------------------------------------------------
-- Consumers outside the database (docs/consumers.md)
------------------------------------------------------------------------------
-- Executable by every role (90_privileges.sql): each checks in C that the
-- calling role holds CONSUME on the categories it touches
-- (outbox.grant_category), and works as the extension's owner.

-- Up to max_messages due messages of whole shards, in shard order, each
-- shard under a lease of its own (its claim token) until now + lease;
-- cell_name: the control messages of that cell only.
CREATE OR REPLACE FUNCTION outbox.claim(max_messages int, lease interval,
    categories text[] DEFAULT NULL, silo text DEFAULT NULL, cell_name text DEFAULT NULL)
    RETURNS SETOF outbox.claimed_message
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_claim';

-- The same claim, its messages as one JSON array, each message an array of
-- outbox.claimed_message's columns in their order (lease_until in ISO 8601,
-- as to_json writes it): one value to parse instead of 13 columns a row.
CREATE OR REPLACE FUNCTION outbox.claim_json(max_messages int, lease interval,
    categories text[] DEFAULT NULL, silo text DEFAULT NULL, cell_name text DEFAULT NULL)
    RETURNS json
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_claim_json';

-- Delivers the first through[i] messages of claims[i] (NULL: all of them)
-- and ends the claims; returns the messages delivered.  All or nothing: a
-- claim that is not held, or whose lease has passed, is an ERROR.
CREATE OR REPLACE FUNCTION outbox.complete(claims bigint[], through int[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_complete';

-- The messages before message_number were delivered; that one failed
-- with error: the shard backs off (or, at max_attempts, the message goes to
-- the dead letters), as after a handler's failure.  Ends the claim.
CREATE OR REPLACE FUNCTION outbox.fail(claim bigint, message_number int, error text)
    RETURNS void
    LANGUAGE c AS 'MODULE_PATHNAME', 'outbox_fail';
