#!/usr/bin/env python3
"""A pg_outbox consumer to copy: claims messages, hands each to handle(),
completes them.  Replace handle() with your code; it must be idempotent (a
message is delivered again when a lease ends before its completion).

    OUTBOX_DSN='dbname=app user=consumer' python3 outbox_consumer.py [--no-listen] [category ...]

Needs psycopg2 (Debian: python3-psycopg2) and a role granted CONSUME on the
categories (outbox.grant_category).  SIGTERM or SIGINT: stops after the
message in hand, completes what was handled and gives the rest back.
--no-listen: poll only, for a connection through a transaction pooler
(PgBouncer's pool_mode = transaction), where LISTEN cannot work.
"""
import collections
import datetime
import json
import os
import select
import signal
import sys

import psycopg2
import psycopg2.extensions

COLUMNS = ("claim", "message_number", "silo", "shard_scope", "shard_identifier",
           "cell_name", "category", "object_identifier", "payload", "first_id", "last_id",
           "coalesced", "lease_until")  # every column of outbox.claimed_message
LEASE_UNTIL = COLUMNS.index("lease_until")
# The same claim as outbox.claim(), as one JSON array, each message an array
# of COLUMNS: writing 13 columns a row cost the server a third of a claim,
# and psycopg2 reading them most of this process's time (bench/consumer).
# Fetched as text and parsed in one call, after the next claim is sent.
CLAIM = "SELECT outbox.claim_json(%s, %s, %s, %s)::text"
NONE = "[]"


def handle(message):
    """Delivers one message (a dict of COLUMNS); raise to fail it."""
    print(json.dumps(message, default=str), flush=True)


class Consumer:
    def __init__(self, dsn, handle, categories=None, batch=1000, lease="30 seconds", poll=5.0,
                 listen=True, silo=None, claim_ahead=False):
        # silo: 'cell' or 'control'; None, the database's own (outbox.silo_mode).  A
        # control database takes the cells' messages its links received with 'cell'.
        # claim_ahead (True or a number n, True being 1): the next claims run in
        # the server, on a connection of their own, one after the other, while
        # this process handles the batch in hand, until n batches wait
        # (bench/consumer).  Their leases run meanwhile, so only for batches
        # handled well within the lease.  More than one evens out claims that
        # cost more than others (those that read a partition of the outbox).
        self.handle, self.categories, self.silo = handle, categories or None, silo
        self.batch, self.lease, self.poll = batch, lease, poll
        self.ahead = int(claim_ahead)
        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True  # each call is its own transaction
        self.cur = self.conn.cursor()
        self.claims = psycopg2.connect(dsn, async_=True) if self.ahead else self.conn
        self.wait()
        self.claims_cur = self.claims.cursor() if self.ahead else self.cur
        self.waiting = collections.deque()  # claimed batches (JSON text), not yet handled
        self.running = False  # a claim runs on self.claims
        self.drained = False  # a claim ahead found nothing: no more until one in turn
        if listen:  # the worker NOTIFYs after commits
            # Behind a transaction pooler the LISTEN would stay on one server
            # connection and its wake-ups reach whichever client uses it next.
            self.claims_cur.execute("LISTEN pg_outbox")
            self.wait()
        self.stopping = False

    def stop(self, *_):
        self.stopping = True

    def wait(self):
        """Until the claims connection's statement is done (at once unless claim_ahead)."""
        while self.claims.async_:
            state = self.claims.poll()
            if state == psycopg2.extensions.POLL_OK:
                return
            select.select([self.claims] if state == psycopg2.extensions.POLL_READ else [],
                          [self.claims] if state == psycopg2.extensions.POLL_WRITE else [], [])

    def run(self):
        wake_r, wake_w = os.pipe()  # a signal ends the wait at once
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.stop)
        while not self.stopping:
            if not self.waiting:
                if not self.running:
                    self.claims.notifies.clear()  # the claim sees what they announced
                    self.claim()
                self.drained = False
                claimed = self.claimed()
                if claimed == NONE:
                    if not self.stopping and not self.claims.notifies:
                        select.select([self.claims, wake_r], [], [], self.poll)
                        self.claims.poll()
                    continue
                self.waiting.append(claimed)
            claimed = self.waiting.popleft()
            self.pump()  # the server claims while this process parses and handles
            self.deliver(json.loads(claimed))
        if self.running:
            self.waiting.append(self.claimed())
        for claimed in self.waiting:
            self.deliver(json.loads(claimed))  # gives them back
        self.conn.close()
        self.claims.close()

    def claim(self):
        self.claims_cur.execute(CLAIM, (self.batch, self.lease, self.categories, self.silo))
        self.running = True

    def claimed(self):
        """The running claim's messages, once it is done."""
        self.wait()
        self.running = False
        return self.claims_cur.fetchone()[0]

    def pump(self):
        """Claiming ahead: takes a claim that is done and sends the next while
        fewer than self.ahead batches wait; never waits itself."""
        if not self.ahead:
            return
        if self.running and self.claims.poll() == psycopg2.extensions.POLL_OK:
            claimed = self.claimed()
            if claimed == NONE:
                self.drained = True
            else:
                self.waiting.append(claimed)
        if not (self.running or self.drained or self.stopping) and len(self.waiting) < self.ahead:
            self.claim()

    def deliver(self, rows):
        """Handles and completes a claimed batch; gives it back when stopping."""
        handled = {}  # claim -> messages handled, in claim order
        failed = None  # the claim of a failed message: the rest of its shard waits
        # One lease end a call of claim_json, parsed once.
        lease = datetime.datetime.fromisoformat(rows[0][LEASE_UNTIL]) if rows else None
        every = max(1, len(rows) // 10)  # claims ahead taken and sent ten times a batch
        handle = self.handle
        for start in range(0, len(rows), every):
            self.pump()
            # Unpacked and written as a dict display: half the time of
            # dict(zip(COLUMNS, row)), a tenth of this process's work a
            # message (bench/consumer).
            for (claim, number, silo, scope, identifier, cell, category, object_identifier,
                 payload, first_id, last_id, coalesced, _) in rows[start:start + every]:
                if claim == failed:
                    continue  # fail() ended its claim
                if claim not in handled:
                    handled[claim] = 0  # a claim's messages come together
                if self.stopping:
                    continue  # given back
                message = {"claim": claim, "message_number": number, "silo": silo,
                           "shard_scope": scope, "shard_identifier": identifier,
                           "cell_name": cell, "category": category,
                           "object_identifier": object_identifier, "payload": payload,
                           "first_id": first_id, "last_id": last_id, "coalesced": coalesced,
                           "lease_until": lease}
                try:
                    handle(message)
                except Exception as error:  # the shard backs off, as after a handler's error
                    failed = claim
                    del handled[claim]
                    self.call_refusable("failure", "SELECT outbox.fail(%s, %s, %s)",
                                        (claim, number, repr(error)[:1000]))
                    continue
                handled[claim] = number
        if handled:
            self.call_refusable("completion", "SELECT outbox.complete(%s, %s)",
                                (list(handled), list(handled.values())))

    def call_refusable(self, what, sql, args):
        """complete() or fail(); refused with 55000 when a lease ended: logged, not fatal
        (the shard's messages are delivered again later)."""
        try:
            self.cur.execute(sql, args)
        except psycopg2.Error as error:
            if error.pgcode != "55000":
                raise
            print("outbox: %s refused:" % what, error.pgerror.strip(), file=sys.stderr)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    listen = "--no-listen" not in arguments
    categories = [a for a in arguments if a != "--no-listen"]
    Consumer(os.environ.get("OUTBOX_DSN", ""), handle, categories, listen=listen).run()
