------------------------------------------------------------------------------
-- Links between clusters (SPEC section 11; docs/clusters.md)
------------------------------------------------------------------------------
-- Control side: the foreign server (postgres_fdw's, or any wrapper's: only
-- its libpq options are used) through which the worker reaches a cell's
-- database, and the role that cell's worker logs in here as.  A cell with
-- a server gets its control-outbox messages there; a cell is known by its
-- role when it calls outbox.receive() here, never by what it says.
-- A link role is held by its OID as well as its name: a role renamed, or
-- dropped and created again under the name, is not the role that was
-- configured, and is refused (outbox._link_peer).
ALTER TABLE outbox.cells ADD COLUMN server name,
    ADD COLUMN link_role name UNIQUE CHECK ((server IS NULL) = (link_role IS NULL)),
    ADD COLUMN link_role_oid oid CHECK ((link_role IS NULL) = (link_role_oid IS NULL));

-- Cell side: this database is the cell cell_name, the control database is
-- reached through server, and control's worker logs in here as link_role.
-- Its cell-outbox messages go there.
CREATE TABLE outbox.control_link (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    server    name    NOT NULL,
    cell_name text    NOT NULL,
    link_role name    NOT NULL,
    link_role_oid oid NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('outbox.control_link', '');

-- Receiving side: the batches a sender (origin: 'control', or the sending
-- cell's name, as its link role says) handed over and has not
-- acknowledged yet, with the ids of the outbox rows they carried there and
-- the sender's receipt for them (outbox.link_secret).  A batch is written here in the
-- transaction that puts its messages in the local outbox.  A sender that
-- lost the answer (it crashed, or the connection broke) asks for these
-- before it sends anything else, and deletes those rows instead of sending
-- them again: each batch is taken once.  The sender acknowledges a batch in
-- its next one, once its own deletion has committed; then it goes.
CREATE TABLE outbox.inbox (
    origin      text        NOT NULL,
    batch       bigint      NOT NULL, -- the sender's random token
    row_ids     bigint[]    NOT NULL, -- the sender's outbox rows it carried
    messages    int         NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    receipt     text        NOT NULL,
    PRIMARY KEY (origin, batch)
);
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox', '');

-- Receiving side: each sender's current connection, named by the random
-- session token its outbox.received() call brought.  A batch of an older
-- connection (still running here after its sender gave up on it) is
-- refused; outbox.received() waits for one already running to end, so
-- that what it answers includes it.
CREATE TABLE outbox.inbox_sessions (
    origin       text        PRIMARY KEY,
    session      bigint      NOT NULL,
    connected_at timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_sessions', '');

-- Sending side: how each link is doing (the worker writes it).
CREATE TABLE outbox.link_status (
    destination     text        PRIMARY KEY, -- a cell's name, or 'control'
    server          name        NOT NULL,
    messages_sent   bigint      NOT NULL DEFAULT 0, -- taken by the other side
    -- taken there, but the answer was lost: found in its inbox, not sent again
    recovered       bigint      NOT NULL DEFAULT 0,
    last_sent_at    timestamptz,
    failures        int         NOT NULL DEFAULT 0, -- in a row
    last_error      text,
    last_error_at   timestamptz,
    next_attempt_at timestamptz,
    -- batches the other side's inbox holds whose receipt no secret of this
    -- side recognises (outbox.link_unrecognised lists them)
    unrecognised    int         NOT NULL DEFAULT 0
);

-- Sending side: the batches that a destination's outbox.received() answered
-- with a receipt that no secret of this side recognises (a lost or
-- re-created outbox.link_secret, a restore from an old backup, a rotation
-- whose overlap ended): this side cannot tell whether it sent them, so it
-- deletes none of their rows, and the link goes on.  The worker asks again
-- each round while some are listed.  outbox.give_up_link_batch() has the
-- destination forget one (given_up_at; it goes with the next batch as an
-- acknowledgement); a batch the destination no longer holds leaves here.
CREATE TABLE outbox.link_unrecognised (
    destination   text        NOT NULL,
    batch         bigint      NOT NULL,
    messages      int         NOT NULL,
    row_ids       bigint[]    NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    given_up_at   timestamptz,
    PRIMARY KEY (destination, batch)
);

-- Sending side: the key of the receipts this side gives with each batch
-- (an HMAC of the destination, the batch and its row ids).  Recovery
-- deletes a batch's rows only when the receipt the other side hands back
-- is this side's for that destination: a peer cannot make this side delete
-- rows it never sent there.  Written by the configuration functions when
-- the first link is made (not here: a restore would then hold two), and
-- dumped with the configuration: a restored database still recognises its
-- receipts in its peers' inboxes.
-- During a rotation (outbox.rotate_link_secret) the secret before it is
-- kept as previous until previous_until: receipts of batches sent before
-- the rotation are still recognised for that long.
CREATE TABLE outbox.link_secret (
    singleton      boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    secret         bytea       NOT NULL CHECK (length(secret) >= 16),
    previous       bytea       CHECK (length(previous) >= 16),
    previous_until timestamptz CHECK ((previous IS NULL) = (previous_until IS NULL))
);
SELECT pg_catalog.pg_extension_config_dump('outbox.link_secret', '');
