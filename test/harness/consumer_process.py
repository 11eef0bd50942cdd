#!/usr/bin/env python3
"""consumer/outbox_consumer.py as test/integration/consumers.sh runs it: the
Consumer class with a handler that records each delivery in the table
delivered (through its own connection, RECORD_DSN), sleeps DELAY seconds, and
fails for the objects in FAIL_OBJECTS (after FAIL_AFTER seconds).  With
RECORD_OBJECTS, it records the deliveries of those objects only (a consumer
at full speed: a recorded delivery costs a round trip).
Configured by the environment: NAME, OUTBOX_DSN, RECORD_DSN, CATEGORIES
(comma-separated), BATCH, LEASE, POLL, DELAY, FAIL_OBJECTS, FAIL_AFTER,
RECORD_OBJECTS, CLAIM_AHEAD (claim_ahead: the batches claimed ahead)."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "consumer"))
import psycopg2  # noqa: E402
from outbox_consumer import Consumer  # noqa: E402

env = os.environ.get
name = env("NAME", "consumer")
delay = float(env("DELAY", "0"))
fail = {int(o) for o in env("FAIL_OBJECTS", "").split(",") if o}
fail_after = float(env("FAIL_AFTER", "0"))
only = {int(o) for o in env("RECORD_OBJECTS", "").split(",") if o}
record = psycopg2.connect(env("RECORD_DSN", ""))
record.autocommit = True
recorder = record.cursor()


def handle(message):
    started = time.time()
    if message["object_identifier"] in fail:
        time.sleep(fail_after)
        raise RuntimeError("receiver refused object %d" % message["object_identifier"])
    time.sleep(delay)
    if only and message["object_identifier"] not in only:
        return
    payload = message["payload"] or {}
    recorder.execute(
        "INSERT INTO delivered (consumer, shard, object, seq, written_at, started, finished)"
        " VALUES (%s, %s, %s, %s, %s, to_timestamp(%s), to_timestamp(%s))",
        (name, message["shard_identifier"], message["object_identifier"], payload.get("seq"),
         payload.get("written_at"), started, time.time()))


categories = [c for c in env("CATEGORIES", "").split(",") if c]
Consumer(env("OUTBOX_DSN", ""), handle, categories, batch=int(env("BATCH", "1000")),
         lease=env("LEASE", "30 seconds"), poll=float(env("POLL", "5")),
         claim_ahead=int(env("CLAIM_AHEAD", "0"))).run()
