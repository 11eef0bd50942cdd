-- What bench/drain/run.sh and depth.sh set up: a no-op PL/pgSQL handler,
-- outbox.drain() in a loop, and PgQ's consumer with the same kind of no-op.
CREATE EXTENSION pg_outbox;
CREATE EXTENSION pgq;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 1);
CREATE FUNCTION noop(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END $$;
SELECT outbox.register_handler('MEMBER_UPDATE', 'noop(outbox.message)');
-- PgQ: a queue, a consumer, the same kind of no-op per event.
SELECT pgq.create_queue('bench');
SELECT pgq.register_consumer('bench', 'c');
CREATE FUNCTION noop_event(ev_id bigint, ev_data text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END $$;
-- outbox.drain() in a loop in one session (its pass goes on from call to
-- call), each call in its own transaction.
CREATE PROCEDURE drain_all(INOUT n bigint DEFAULT 0) LANGUAGE plpgsql AS $$
DECLARE
    got bigint;
BEGIN
    n := 0;
    LOOP
        got := outbox.drain('cell');
        EXIT WHEN got = 0;
        n := n + got;
        COMMIT;
    END LOOP;
END $$;
CREATE FUNCTION pgq_consume() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    batch bigint;
    ev record;
    n bigint := 0;
BEGIN
    LOOP
        batch := pgq.next_batch('bench', 'c');
        EXIT WHEN batch IS NULL;
        FOR ev IN SELECT * FROM pgq.get_batch_events(batch) LOOP
            PERFORM noop_event(ev.ev_id, ev.ev_data);
            n := n + 1;
        END LOOP;
        PERFORM pgq.finish_batch(batch);
    END LOOP;
    RETURN n;
END $$;
