"""A hostile cell for a minute (issue 46; run by hostile_peer.sh).

Cell eu is compromised: this process logs in to control as eu's link role
and calls outbox.received() and outbox.receive() with arbitrary well-formed
batches (random sessions, tokens, acknowledgements, scopes, categories,
shards, objects of both cells and of none, payloads, tombstones and
present), while eu's own outbox.received() answers control's worker with
random batches (hostile_peer.sh replaces it).  Meanwhile the honest cell us
renames, deletes and writes again its organizations, and control writes
users for both cells.

Then, once everything drained, control's and us's data must be exactly what
they would be without the hostile peer: control's last message of each of
us's organizations carries its row as us has it (or its deletion), control
holds a tombstone for exactly the organizations us deleted and did not
write again, no message of the hostile peer reached a handler for an object
of us's, and us applied each of control's users once.  No backend crashed.

Environment: CONTROL, US, EU (libpq connection strings of the superuser),
HOSTILE (control, as eu's link role), SEED, SECONDS.
"""
import os
import random
import sys
import threading
import time

import psycopg2

SEED = int(os.environ.get("SEED", "46"))
SECONDS = float(os.environ.get("SECONDS", "60"))
US_ORGS = range(1, 41)
EU_ORGS = range(1001, 1041)
stop = threading.Event()
stats = {"taken": 0, "refused": 0, "other_errors": 0, "received": 0, "us_writes": 0, "users": 0}
errors = []


def connect(dsn):
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn


def hostile(rng):
    conn = connect(os.environ["HOSTILE"])
    cur = conn.cursor()
    session = rng.randrange(1, 2**62)
    pools = [list(US_ORGS), list(EU_ORGS), [rng.randrange(0, 5000) for _ in range(40)]]
    while not stop.is_set():
        try:
            if rng.random() < 0.15:
                session = rng.choice([session, rng.randrange(1, 2**62)])
                cur.execute("SELECT * FROM outbox.received(1, %s)", (session,))
                cur.fetchall()
                stats["received"] += 1
            n = rng.randrange(1, 20)
            # A third of the batches lie about eu's own organizations only:
            # taken, as they may be.
            own = rng.random() < 0.3
            shards = [rng.choice(pools[1] if own else rng.choice(pools)) for _ in range(n)]
            objects = [s if own or rng.random() < 0.5 else rng.choice(rng.choice(pools))
                       for s in shards]
            tables = [None, None, "organization"] + ["member", "auth_user", "project"] * (not own)
            gone = [rng.choice(tables) for _ in range(n)]
            there = [None if g else rng.choice(tables) for g in gone]
            cur.execute(
                "SELECT outbox.receive(1, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb[], %s,"
                " %s, %s)",
                (rng.choice([session, session, rng.randrange(1, 2**62)]),
                 rng.randrange(1, 2**62), "%064x" % rng.getrandbits(256),
                 [rng.randrange(1, 10**6) for _ in range(rng.randrange(0, 5))],
                 [rng.choice(["Organization"] * (3 if own else 2) + ["User"] * (not own))
                  for _ in range(n)],
                 shards,
                 [rng.choice(["eu", "eu", "eu"] + ["us"] * (not own)) for _ in range(n)],
                 [rng.choice(["ORGANIZATION_UPDATE"] + ["USER_UPDATE"] * (not own))
                  for _ in range(n)],
                 objects,
                 [rng.choice(['{"name": "hostile"}', None]) for _ in range(n)],
                 gone,
                 [rng.randrange(1, 10**6) for _ in range(rng.randrange(0, 3))],
                 there if rng.random() < 0.7 else None))
            cur.fetchall()
            stats["taken"] += 1
        except psycopg2.Error as e:
            if e.pgcode in ("42501", "55000", "22023", "42704", "2202E"):
                stats["refused"] += 1
            else:
                stats["other_errors"] += 1
                errors.append("%s %s" % (e.pgcode, e.pgerror))
            if conn.closed:
                conn = connect(os.environ["HOSTILE"])
                cur = conn.cursor()
        time.sleep(rng.random() * 0.02)


def honest_us(rng):
    conn = connect(os.environ["US"])
    cur = conn.cursor()
    while not stop.is_set():
        org = rng.choice(US_ORGS)
        op = rng.random()
        if op < 0.6:
            cur.execute("UPDATE organization SET name = %s WHERE id = %s",
                        ("us org %d v%d" % (org, rng.randrange(10**6)), org))
        elif op < 0.8:
            cur.execute("DELETE FROM organization WHERE id = %s", (org,))
        else:
            cur.execute("INSERT INTO organization VALUES (%s, %s) ON CONFLICT DO NOTHING",
                        (org, "us org %d again" % org))
        stats["us_writes"] += 1
        time.sleep(0.03)


def control_users(rng):
    conn = connect(os.environ["CONTROL"])
    cur = conn.cursor()
    first = 1
    while not stop.is_set():
        count = rng.randrange(1, 50)
        cur.execute("INSERT INTO auth_user SELECT g, 'user ' || g FROM generate_series(%s, %s) g",
                    (first, first + count - 1))
        first += count
        stats["users"] = first - 1
        time.sleep(0.2)


def one(dsn, sql):
    conn = connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute(sql)
        return cur.fetchall()
    finally:
        conn.close()


def wait_drained(limit):
    """us's outbox and control's rows of us empty, and us applied every user.
    (The hostile peer's own messages may wait: a category control has no
    handler for, in one of eu's shards, waits visibly.)"""
    deadline = time.time() + limit
    while time.time() < deadline:
        left = one(os.environ["CONTROL"],
                   "SELECT (SELECT count(*) FROM outbox.control_outbox WHERE cell_name = 'us')"
                   " + (SELECT count(*) FROM outbox.cell_outbox WHERE shard_identifier"
                   " BETWEEN 1 AND 40)")[0][0]
        left += one(os.environ["US"], "SELECT count(*) FROM outbox.cell_outbox")[0][0]
        users = one(os.environ["US"],
                    "SELECT count(DISTINCT object) FROM applied WHERE category = 1")[0][0]
        if left == 0 and users == stats["users"]:
            return True
        time.sleep(0.5)
    return False


def main():
    print("hostile peer: seed %d, %.0f s" % (SEED, SECONDS))
    threads = [threading.Thread(target=f, args=(random.Random(SEED * 10 + i),))
               for i, f in enumerate([hostile, honest_us, control_users])]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join()
    print("hostile peer: %(taken)d batches taken, %(refused)d refused, %(other_errors)d other"
          " errors, %(received)d received() calls; us wrote %(us_writes)d times, control"
          " %(users)d users" % stats)
    failures = 0

    def check(name, ok, detail=""):
        nonlocal failures
        print("%s - %s%s" % ("ok" if ok else "not ok", name, "" if ok else ": " + detail))
        failures += 0 if ok else 1

    check("the hostile peer was refused, and sent well-formed batches only",
          stats["refused"] > 0 and stats["other_errors"] == 0, "; ".join(errors[:5]))
    check("everything drains", wait_drained(120))
    us_rows = dict(one(os.environ["US"], "SELECT id, name FROM organization WHERE id <= 40"))
    last = dict(one(os.environ["CONTROL"],
                    "SELECT DISTINCT ON (object) object, payload->>'name' FROM applied"
                    " WHERE category = 0 AND object BETWEEN 1 AND 40 ORDER BY object, n DESC"))
    # (A deletion's message carries the row as it was last: its tombstone
    # says it is gone, checked below.)
    wrong = [o for o in us_rows if last.get(o) != us_rows[o]]
    check("control's last message of each of us's organizations is us's row", not wrong,
          "; ".join("%d: control %r, us %r" % (o, last.get(o), us_rows.get(o)) for o in wrong[:5]))
    hostile_applied = one(os.environ["CONTROL"],
                          "SELECT count(*) FROM applied WHERE payload->>'name' = 'hostile'"
                          " AND object BETWEEN 1 AND 40")[0][0]
    check("no message of the hostile peer reached a handler for us's objects",
          hostile_applied == 0, "%d" % hostile_applied)
    tombstones = {r[0] for r in one(os.environ["CONTROL"],
                                    "SELECT object_identifier FROM outbox.control_tombstone"
                                    " WHERE table_name = 'organization'"
                                    " AND object_identifier BETWEEN 1 AND 40")}
    expected = {o for o in US_ORGS if o not in us_rows}
    check("control's tombstones of us's organizations are exactly those us deleted",
          tombstones == expected, "extra %s, missing %s" % (sorted(tombstones - expected)[:5],
                                                           sorted(expected - tombstones)[:5]))
    other = one(os.environ["CONTROL"],
                "SELECT count(*) FROM outbox.control_tombstone t WHERE NOT EXISTS ("
                " SELECT FROM outbox.cell_object_tables k"
                " JOIN outbox.cell_objects o ON o.category = k.category"
                " JOIN outbox.organization_cells c ON c.organization = o.organization"
                " WHERE k.table_key = t.table_name AND o.object_identifier = t.object_identifier)"
                )[0][0]
    check("every tombstone is of an object of an organization that lives in a cell",
          other == 0, "%d" % other)
    users = one(os.environ["US"], "SELECT count(*), count(DISTINCT object) FROM applied"
                                  " WHERE category = 1")[0]
    check("us applied each of control's %d users once" % stats["users"],
          tuple(users) == (stats["users"], stats["users"]), "%s" % (users,))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
