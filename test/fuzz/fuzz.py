#!/usr/bin/python3
"""Bounded, seeded, randomized bad-input run against every SQL function of
pg_outbox (every function of schema outbox, found at run time in pg_proc,
internal "_" ones included), from several roles, while a mutator thread drops
and recreates what the calls refer to.

The rule under test: bad input from any role gets an ERROR (or a WARNING),
never a crash of the server and never an internal error (SQLSTATE class XX).

    /usr/bin/python3 test/fuzz/fuzz.py [--calls N] [--seed S] [--duration SEC]
        [--server-log PATH] [--redis-port P] [--report-internal-only]

Connection: PGHOST, PGPORT, PGDATABASE, PGUSER (a superuser) as for psql.
Defaults from the environment: FUZZ_CALLS, FUZZ_SEED, FUZZ_DURATION,
FUZZ_SERVER_LOG (else $CLUSTER_DIR/server.log), REDIS_PORT.  Run it only
against a throwaway cluster: it creates roles fz_owner, fz_app, fz_monitor
and fz_* tables, registers them, and may crash the server.

Prints a summary and one machine-readable line
    fuzz-result calls=N roles=R functions=F/T crashes=C internal=I hangs=H
                restarts=X postmaster_restarted=0|1 server_up=0|1 suspicious=S
and exits 1 on a crash, a hang or a restart, and on an internal error unless
--report-internal-only; 2 when it could not run at all.

Each transaction's statements come from the seed; what they meet (OIDs, the
mutator's timing, the worker) does not, so two runs with one seed make the
same calls but may not get the same results.
"""
import argparse
import collections
import os
import random
import re
import socket
import sys
import threading
import time

import psycopg2
import psycopg2.extensions

INT4_MAX, INT4_MIN = 2**31 - 1, -2**31
INT8_MAX, INT8_MIN = 2**63 - 1, -2**63

ROLE_OWNER, ROLE_APP, ROLE_MONITOR = "fz_owner", "fz_app", "fz_monitor"
ROLE_PASSWORD = "fz_password"

# SQLSTATEs an argument check or a cast gives before the function does any
# real work; a call that ends in one of these did not get past the checks.
SHALLOW = {
    "22004": "NULL argument",
    "42501": "privilege",
    "42883": "no such function/signature",
    "42725": "ambiguous function",
    "42804": "datatype mismatch",
    "42846": "cannot cast",
    "22P02": "invalid text representation",
    "22003": "out of range",
    "0A000": "not supported (trigger function called directly)",
}

# Internal errors raised on purpose: the boundary self-test exists to raise a
# C++ exception as XX000.  Reported, not counted as a failure.
EXPECTED_INTERNAL = [
    ("_boundary_selftest", "raised on purpose by the boundary self-test"),
]

SQLSTATE_CLASSES = {
    "00": "ok", "01": "warning", "08": "connection", "0A": "feature not supported",
    "21": "cardinality", "22": "data exception", "23": "integrity constraint",
    "25": "invalid transaction state", "28": "authorization", "2B": "dependent objects",
    "39": "external routine invocation", "3B": "savepoint", "40": "rollback",
    "42": "syntax error or access rule", "53": "insufficient resources",
    "54": "program limit", "55": "object not in prerequisite state",
    "57": "operator intervention", "58": "system error", "F0": "config file",
    "HV": "fdw", "P0": "plpgsql", "XX": "INTERNAL",
}


def q(s):
    """A standard SQL string literal."""
    return "'" + s.replace("'", "''") + "'"


def qi(s):
    return '"' + s.replace('"', '""') + '"'


class Arg:
    __slots__ = ("sql", "label")

    def __init__(self, sql, label):
        self.sql = sql
        self.label = label


# ---------------------------------------------------------------- connections

class Connection(psycopg2.extensions.connection):
    """A connection that remembers its backend's PID."""
    fz_pid = None


class Server:
    def __init__(self, args):
        self.host = os.environ.get("PGHOST")
        self.port = os.environ.get("PGPORT")
        self.dbname = os.environ.get("PGDATABASE", "postgres")
        self.superuser = os.environ.get("PGUSER", "postgres")
        self.timeout_ms = args.statement_timeout

    def connect(self, role, wait=30.0):
        """A connection as role, autocommit; waits for a restarting server."""
        deadline = time.time() + wait
        while True:
            try:
                conn = psycopg2.connect(
                    host=self.host, port=self.port, dbname=self.dbname, user=role,
                    password=None if role == self.superuser else ROLE_PASSWORD,
                    connect_timeout=5, application_name="fz_" + role,
                    connection_factory=Connection,
                    options="-c statement_timeout=%d -c lock_timeout=%d "
                            "-c idle_in_transaction_session_timeout=60000"
                            % (self.timeout_ms, max(500, self.timeout_ms // 2)))
                conn.autocommit = True
                cur = conn.cursor()
                cur.execute("SELECT pg_backend_pid()")
                conn.fz_pid = cur.fetchone()[0]
                return conn
            except psycopg2.OperationalError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)


def lost(conn, exc=None):
    """Whether the connection is gone (backend died or server crashed)."""
    if conn is None or conn.closed:
        return True
    if exc is not None and isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)) \
            and exc.pgcode is None:
        return True
    return False


# ------------------------------------------------------------------ server log

CRASH_RE = re.compile(
    r"(?P<what>server process|background worker \"[^\"]*\"|[a-z ]+ process) "
    r"\(PID (?P<pid>\d+)\) (?P<how>was terminated by (?:signal|exception)[^\n]*"
    r"|exited with exit code (?P<code>\d+))")


class LogScanner:
    """Reads new lines of the server log and picks out crashes."""

    def __init__(self, path):
        self.path = path if path and os.path.exists(path) else None
        self.offset = os.path.getsize(self.path) if self.path else 0
        self.lock = threading.Lock()
        self.events = []     # dicts: pid, how, statement, line
        self.reinits = 0
        self.panics = []

    def scan(self):
        if not self.path:
            return []
        with self.lock:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.offset)
                    data = f.read()
            except OSError as e:
                self.panics.append("server log unreadable: %s" % e)
                self.path = None
                return []
            # Only whole lines.
            end = data.rfind(b"\n") + 1
            self.offset += end
            lines = data[:end].decode("utf-8", "replace").split("\n")
            new = []
            for i, line in enumerate(lines):
                m = CRASH_RE.search(line)
                if m:
                    code = m.group("code")
                    if code is not None and (code in ("0", "1") and "worker" in m.group("what")
                                             or code == "0"):
                        continue  # a background worker's ERROR exit is not a crash
                    if code == "1" and m.group("what") == "server process":
                        continue
                    stmt = ""
                    if i + 1 < len(lines) and "Failed process was running:" in lines[i + 1]:
                        stmt = lines[i + 1].split("Failed process was running:", 1)[1].strip()
                    ev = {"pid": int(m.group("pid")), "how": m.group("how"),
                          "what": m.group("what"), "statement": stmt, "line": line.strip()}
                    self.events.append(ev)
                    new.append(ev)
                elif "all server processes terminated; reinitializing" in line:
                    self.reinits += 1
                elif re.search(r"\b(PANIC|TRAP):", line) or "terminate called after" in line:
                    self.panics.append(line.strip())
            return new


# ---------------------------------------------------------------- the fixture

MANY_COLUMNS = [
    ("c01", "text"), ("c02", "integer"), ("c03", "bigint"), ("c04", "numeric"),
    ("c05", "double precision"), ("c06", "boolean"), ("c07", "jsonb"), ("c08", "json"),
    ("c09", "bytea"), ("c10", "timestamptz"), ("c11", "date"), ("c12", "interval"),
    ("c13", "uuid"), ("c14", "integer[]"), ("c15", "text[]"), ("c16", "inet"),
    ("c17", "name"), ("c18", '"char"'), ("c19", "varchar(10)"), ("c20", "money"),
    ("c21", "point"), ("c22", "tsvector"), ("c23", "smallint"), ("c24", "real"),
    ("c25", "time"), ("c26", "bit varying"), ("c27", "int4range"), ("c28", "xml"),
    ("Weird Col", "text"), ('quo"te', "text"), ("select", "text"), ("ümlaut", "text"),
] + [("c%02d" % i, "text") for i in range(33, 61)]

FIXTURE_TABLES = ["fz_plain", "fz_big", "fz_part", "fz_ctl_text", "fz_ctl_name", "fz_ctl_fan",
                  "fz_many", "fz_owned1", "fz_owned2", "fz_unreg", "fz_noid", "fz_m1", "fz_m2",
                  "fz_m3", "fz_sink", "fz_dropped"]

# table -> (category, register_table arguments after tbl and category)
REGISTRATIONS = {
    "fz_plain": ("FZ_PLAIN", "shard_column => 'org', payload_columns => '{label}'"),
    "fz_big": ("FZ_BIG", "shard_column => 'org', payload_columns => '{note}', "
                         "replication_version => 2"),
    "fz_part": ("FZ_PART", "shard_column => 'org', payload_columns => '{label}'"),
    "fz_ctl_text": ("FZ_CTL_TEXT", "'control', shard_column => 'user_id', cell_column => 'cell', "
                                   "payload_columns => '{secret}'"),
    "fz_ctl_name": ("FZ_CTL_NAME", "'control', shard_column => 'user_id', cell_column => 'cell'"),
    "fz_ctl_fan": ("FZ_CTL_FAN", "'control', shard_column => 'user_id', "
                                 "payload_columns => '{token}'"),
    "fz_many": ("FZ_MANY", "shard_column => 'org', table_key => 'fz_many_key', payload_columns => "
                "ARRAY[%s]::name[]" % ", ".join(q(c) for c, _ in MANY_COLUMNS)),
    "fz_m1": ("FZ_M", "shard_column => 'org', payload_columns => '{label}'"),
    "fz_m2": ("FZ_M", "shard_column => 'org', payload_columns => '{label}'"),
    "fz_m3": ("FZ_M", "'control', shard_column => 'org', payload_columns => '{label}'"),
}

HANDLERS = {
    "FZ_PLAIN": "fz_handler(outbox.message)",
    "FZ_PART": "fz_handler(outbox.message)",
    "FZ_MANY": "fz_handler_writes(outbox.message)",
    "FZ_CTL_TEXT": "fz_handler_drop(outbox.message)",
    "FZ_CTL_FAN": "fz_handler_reregister(outbox.message)",
    "FZ_M": "fz_handler(outbox.message)",
    "FZ_CTL_NAME": "fz_handler(outbox.message)",
}


def many_row(i):
    vals = ["'text %d'" % i, str(i), str(INT8_MAX - i), "'%s'" % ("1e300" if i % 2 else "NaN"),
            "'%s'" % ("Infinity" if i % 3 == 0 else "-0"), "true", "'{\"k\": [%d, null]}'" % i,
            "'[1, 2.5e10, \"x\"]'", "'\\xdeadbeef'", "'infinity'", "'epoch'", "'1 day'",
            "gen_random_uuid()", "'{1,NULL,3}'", "'{\"a b\",NULL}'", "'::1'", "'nm'", "'x'",
            "'short'", "'12.34'", "'(1,2)'", "'a fat cat'", "-32768", "'NaN'", "'24:00'",
            "B'1011'", "'[1,10)'", "'<a>x</a>'", "'w'", "'q'", "'s'", "'ü'"]
    vals += ["repeat('x', %d)" % (10000 if i == 3 else i)] * (len(MANY_COLUMNS) - len(vals))
    return "(%d, %d, %s)" % (i, i % 3, ", ".join("NULL" if (i + k) % 11 == 0 else v
                                                  for k, v in enumerate(vals)))


def table_ddl(name):
    """CREATE TABLE and rows (inserted before registration) of a table the
    mutator may drop and make again."""
    if name == "fz_m3":
        return ["CREATE TABLE fz_m3 (id bigint PRIMARY KEY, org int NOT NULL, label text)",
                "INSERT INTO fz_m3 SELECT g, g % 4, 'm3 ' || g FROM generate_series(1, 60) g"]
    if name in ("fz_m1", "fz_m2"):
        return ["CREATE TABLE %s (id int PRIMARY KEY, org int NOT NULL, label text)" % name,
                "INSERT INTO %s SELECT g, g %% 5, '%s ' || g FROM generate_series(1, 80) g"
                % (name, name)]
    return {
        "fz_plain": [
            "CREATE TABLE fz_plain (id int PRIMARY KEY, org int NOT NULL, label text)",
            "INSERT INTO fz_plain SELECT g, g % 7, 'row ' || g FROM generate_series(1, 300) g"],
        "fz_big": [
            "CREATE TABLE fz_big (id bigint PRIMARY KEY, org bigint NOT NULL, note text)",
            "INSERT INTO fz_big VALUES (%d, 1, 'min'), (-1, 1, ''), (0, 0, NULL), (1, 1, 'one'), "
            "(2147483647, 2, 'i4max'), (%d, 3, 'max-1'), (%d, %d, 'max')"
            % (INT8_MIN, INT8_MAX - 1, INT8_MAX, INT8_MIN)],
        "fz_ctl_text": [
            "CREATE TABLE fz_ctl_text (id int PRIMARY KEY, user_id int NOT NULL, "
            "cell text NOT NULL, secret text)",
            "INSERT INTO fz_ctl_text SELECT g, g % 3, "
            "(ARRAY['cell_a','cell_b','nowhere'])[g % 3 + 1], 's' || g "
            "FROM generate_series(1, 90) g"],
        "fz_ctl_name": [
            "CREATE TABLE fz_ctl_name (id int PRIMARY KEY, user_id int NOT NULL, "
            "cell name NOT NULL)",
            "INSERT INTO fz_ctl_name SELECT g, g % 3, "
            "(ARRAY['cell_a','cell_b','nowhere'])[g % 3 + 1] FROM generate_series(1, 90) g"],
        "fz_ctl_fan": [
            "CREATE TABLE fz_ctl_fan (id bigint PRIMARY KEY, user_id bigint NOT NULL, token text)",
            "INSERT INTO fz_ctl_fan SELECT g, g % 4, md5(g::text) FROM generate_series(1, 50) g"],
        "fz_many": [
            "CREATE TABLE fz_many (id int PRIMARY KEY, org smallint NOT NULL, %s)"
            % ", ".join("%s %s" % (qi(c), t) for c, t in MANY_COLUMNS),
            "INSERT INTO fz_many VALUES %s" % ", ".join(many_row(i) for i in range(1, 41))],
    }[name]


RECREATABLE = ["fz_m1", "fz_m2", "fz_m3", "fz_plain", "fz_big", "fz_ctl_text", "fz_ctl_name",
               "fz_ctl_fan", "fz_many"]


def register_sql(table):
    category, rest = REGISTRATIONS[table]
    return "SELECT outbox.register_table(%s, %s, %s)" % (q(table), q(category), rest)


def handler_sql(name):
    body = {
        "fz_handler": """
            INSERT INTO fz_sink VALUES (m.silo, m.category, m.object_identifier, m.payload);
            IF m.object_identifier % 13 = 0 THEN
                RAISE EXCEPTION 'fz handler fails on purpose for %', m.object_identifier;
            END IF;""",
        "fz_handler_drop": """
            INSERT INTO fz_sink VALUES (m.silo, m.category, m.object_identifier, m.payload);""",
        "fz_handler_recurse": """
            PERFORM outbox.drain();
            PERFORM outbox.process_backfill_batch('fz_plain', 3, true);""",
        "fz_handler_writes": """
            INSERT INTO fz_plain (id, org, label) VALUES (m.object_identifier + 1000000, 1, 'h')
                ON CONFLICT (id) DO UPDATE SET label = 'again';""",
        "fz_handler_reregister": """
            PERFORM outbox.register_handler(
                (SELECT c.name FROM outbox.categories c WHERE c.id = m.category),
                'fz_handler_reregister(outbox.message)');
            PERFORM outbox.unregister_cell('fz_cell_churn');""",
    }[name]
    return ("CREATE OR REPLACE FUNCTION %s(m outbox.message) RETURNS void LANGUAGE plpgsql "
            "AS $fz$ BEGIN %s END $fz$" % (name, body))


def fixture_statements():
    su = []
    a = su.append
    # Roles.
    for role in (ROLE_OWNER, ROLE_APP, ROLE_MONITOR):
        a("CREATE ROLE %s LOGIN PASSWORD %s" % (role, q(ROLE_PASSWORD)))
    a("GRANT pg_monitor TO fz_monitor")
    a("GRANT USAGE ON SCHEMA outbox TO fz_owner")
    # Registry.
    for s in ("FZ_ORG", "FZ_USER"):
        a("SELECT outbox.register_scope(%s)" % q(s))
    for c, s in (("FZ_PLAIN", "FZ_ORG"), ("FZ_BIG", "FZ_ORG"), ("FZ_PART", "FZ_ORG"),
                 ("FZ_CTL_TEXT", "FZ_USER"), ("FZ_CTL_NAME", "FZ_USER"),
                 ("FZ_CTL_FAN", "FZ_USER"), ("FZ_MANY", "FZ_ORG"), ("FZ_OWNED", "FZ_ORG"),
                 ("FZ_M", "FZ_ORG")):
        a("SELECT outbox.register_category(%s, %s)" % (q(c), q(s)))
    for cell in ("cell_a", "cell_b", "cell_c"):
        a("SELECT outbox.register_cell(%s)" % q(cell))
    # Tables: rows first, registration after (capture is what DML calls test).
    for t in ("fz_plain", "fz_big"):
        su.extend(table_ddl(t))
    a("CREATE TABLE fz_part (id int NOT NULL, org int NOT NULL, label text, PRIMARY KEY (id)) "
      "PARTITION BY RANGE (id)")
    a("CREATE TABLE fz_part_p0 PARTITION OF fz_part FOR VALUES FROM (MINVALUE) TO (100)")
    a("CREATE TABLE fz_part_p1 PARTITION OF fz_part FOR VALUES FROM (100) TO (200)")
    a("CREATE TABLE fz_part_p2 PARTITION OF fz_part FOR VALUES FROM (200) TO (300)")
    a("CREATE TABLE fz_part_def PARTITION OF fz_part DEFAULT")
    a("INSERT INTO fz_part SELECT g, g % 5, 'p' || g FROM generate_series(-10, 400) g")
    for t in ("fz_ctl_text", "fz_ctl_name", "fz_ctl_fan", "fz_many"):
        su.extend(table_ddl(t))
    a("CREATE TABLE fz_owned1 (id int PRIMARY KEY, org int NOT NULL, label text)")
    a("INSERT INTO fz_owned1 SELECT g, g, 'o' FROM generate_series(1, 30) g")
    a("CREATE TABLE fz_owned2 (id bigint PRIMARY KEY, org int NOT NULL, cell text NOT NULL)")
    a("ALTER TABLE fz_owned1 OWNER TO fz_owner")
    a("ALTER TABLE fz_owned2 OWNER TO fz_owner")
    a("CREATE TABLE fz_unreg (id int PRIMARY KEY, org int NOT NULL, label text, cell text NOT NULL)")
    a("INSERT INTO fz_unreg SELECT g, g, 'u', 'cell_a' FROM generate_series(1, 20) g")
    a("CREATE TABLE fz_noid (x int, org int NOT NULL)")
    for t in ("fz_m1", "fz_m2", "fz_m3"):
        su.extend(table_ddl(t))
    a("CREATE TABLE fz_dropped (id int PRIMARY KEY)")
    a("CREATE VIEW fz_view AS SELECT id, org FROM fz_plain")
    a("CREATE SEQUENCE fz_seq")
    a("CREATE MATERIALIZED VIEW fz_mat AS SELECT id FROM fz_plain")
    a("CREATE TYPE fz_type AS (a int, b text)")
    a("CREATE TABLE fz_sink (silo text, category int, object bigint, payload jsonb)")
    for table in REGISTRATIONS:
        su.append(register_sql(table))
    # Handlers, and functions that are not.
    for h in ("fz_handler", "fz_handler_drop", "fz_handler_recurse", "fz_handler_writes",
              "fz_handler_reregister"):
        a(handler_sql(h))
    a("CREATE FUNCTION fz_not_handler(i int) RETURNS int LANGUAGE sql AS 'SELECT i'")
    a("CREATE FUNCTION fz_setof_handler(m outbox.message) RETURNS SETOF void LANGUAGE sql "
      "AS 'SELECT'")
    a("CREATE PROCEDURE fz_proc_handler(m outbox.message) LANGUAGE sql AS 'SELECT 1'")
    a("CREATE FUNCTION fz_dropped_fn(m outbox.message) RETURNS void LANGUAGE sql AS 'SELECT'")
    for cat, h in HANDLERS.items():
        a("SELECT outbox.register_handler(%s, %s)" % (q(cat), q(h)))
    # Gates open so that backfill has work; a cursor near the end of fz_big.
    for t, key, coded, opt in (("fz_plain", "fz_plain", 3, 3), ("fz_big", "fz_big", 2, 2),
                               ("fz_part", "fz_part", 2, 2), ("fz_ctl_text", "fz_ctl_text", 2, 2),
                               ("fz_ctl_name", "fz_ctl_name", 2, 2),
                               ("fz_ctl_fan", "fz_ctl_fan", 2, 2),
                               ("fz_many", "fz_many_key", 2, 1)):
        a("SELECT outbox.set_replication_version(%s, %d)" % (q(t), coded))
        a("SELECT outbox.set_option(%s, %s)"
          % (q("outbox_replication.%s.replication_version" % key), q(str(opt))))
    a("SELECT outbox.set_option('outbox_replication.fz_ctl_fan.backfill.target_cells', "
      "'[\"cell_a\", \"cell_b\", \"nowhere\"]')")
    a("SELECT outbox.set_option('outbox_replication.fz_ctl_text.backfill.target_cells', "
      "'[\"cell_b\"]')")
    a("SELECT outbox.set_processing_state('fz_big', %d, 2)" % (INT8_MAX - 1))
    # Privileges.
    a("GRANT INSERT, UPDATE, DELETE ON %s TO fz_app" % ", ".join(
        t for t in FIXTURE_TABLES if t not in ("fz_dropped", "fz_sink")))
    a("GRANT INSERT, UPDATE, DELETE ON fz_part_p0, fz_part_p1, fz_part_def TO fz_app")
    # Some outbox rows for drain and shard_depth (safe tables; capture of the
    # others is what the fuzzed DML is for).
    a("UPDATE fz_plain SET label = label || '!' WHERE id % 10 = 0")
    a("UPDATE fz_part SET label = label || '!' WHERE id % 10 = 0")
    a("UPDATE fz_ctl_fan SET token = 'boom' WHERE id % 7 = 0")
    a("DROP TABLE fz_dropped")
    a("DROP FUNCTION fz_dropped_fn(outbox.message)")
    return su


# ------------------------------------------------------------------- the pools

class Pools:
    """What the generators draw names and OIDs from, refreshed from the server."""

    def __init__(self):
        self.lock = threading.Lock()
        self.dropped_rel_oids = []
        self.dropped_fn_oids = []
        self.dropped_role_oids = []
        self.tables = []          # (relname, oid, table_key, silo)
        self.all_tables = []
        self.invalid_utf8 = set()
        self.partitions = []      # (relname, oid)
        self.others = []          # (sql for a regclass)
        self.columns = {}         # relname -> [column names]
        self.categories = []      # (name, id)
        self.scopes = []
        self.cells = []
        self.shards = []          # (silo, scope, shard, cell)
        self.handlers = []        # regprocedure text
        self.fn_oids = []
        self.role_oids = []
        self.row_ids = [INT8_MIN, -1, 0, 1, 2147483647, INT8_MAX - 1, INT8_MAX]
        self.literals = []        # string literals from plpgsql/sql bodies

    def refresh(self, cur):
        cur.execute("""
            SELECT c.relname, c.oid::bigint, r.table_key, r.silo
              FROM outbox.registered_tables r JOIN pg_class c ON c.oid = r.relid""")
        tables = cur.fetchall()
        cur.execute("""
            SELECT c.relname, c.oid::bigint FROM pg_class c
             WHERE c.relname LIKE 'fz\\_%' AND c.relkind IN ('r', 'p')
               AND c.relnamespace = 'public'::regnamespace""")
        all_tables = cur.fetchall()
        cur.execute("""
            SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
             WHERE c.relname LIKE 'fz\\_%' AND a.attnum > 0 AND NOT a.attisdropped
               AND c.relnamespace = 'public'::regnamespace""")
        columns = collections.defaultdict(list)
        for rel, att in cur.fetchall():
            columns[rel].append(att)
        cur.execute("SELECT name, id FROM outbox.categories")
        categories = cur.fetchall()
        cur.execute("SELECT name, id FROM outbox.scopes")
        scopes = cur.fetchall()
        cur.execute("SELECT name FROM outbox.cells")
        cells = [r[0] for r in cur.fetchall()]
        cur.execute("""
            (SELECT DISTINCT 'cell', shard_scope, shard_identifier, NULL::bytea
               FROM outbox.cell_outbox LIMIT 30)
            UNION ALL
            (SELECT DISTINCT 'control', shard_scope, shard_identifier, cell_name::bytea
               FROM outbox.control_outbox LIMIT 30)""")
        shards = []
        for silo, scope, shard, cell in cur.fetchall():
            if cell is not None:
                try:
                    cell = bytes(cell).decode("utf-8")
                except UnicodeDecodeError:
                    # Capture wrote bytes that are not UTF-8 (found in 0.4.0:
                    # a cell column of type name).
                    self.invalid_utf8.add(bytes(cell)[:40])
                    continue
            shards.append((silo, scope, shard, cell))
        cur.execute("SELECT handler::text FROM outbox.handlers")
        handlers = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT oid::bigint FROM pg_proc WHERE proname LIKE 'fz\\_%'")
        fn_oids = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT oid::bigint FROM pg_roles WHERE rolname LIKE 'fz\\_%' "
                    "OR rolname IN ('pg_monitor', current_user)")
        role_oids = [r[0] for r in cur.fetchall()]
        with self.lock:
            self.tables = tables
            self.all_tables = all_tables
            self.columns = dict(columns)
            self.categories = categories
            self.scopes = scopes
            self.cells = cells
            self.shards = shards
            self.handlers = handlers
            self.fn_oids = fn_oids
            self.role_oids = role_oids

    def static(self, cur):
        cur.execute("""
            SELECT c.relname, c.oid::bigint FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE c.relname LIKE 'fz\\_%'""")
        self.partitions = cur.fetchall()
        cur.execute("""
            SELECT t.oid::bigint FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid
             WHERE c.relname = 'fz_many'""")
        toast = [r[0] for r in cur.fetchall()]
        self.others = (["'fz_view'::regclass", "'fz_seq'::regclass", "'fz_mat'::regclass",
                        "'fz_type'::regclass", "'fz_plain_pkey'::regclass",
                        "'fz_noid'::regclass", "'fz_unreg'::regclass", "'fz_sink'::regclass",
                        "'pg_class'::regclass", "'pg_catalog.pg_proc'::regclass",
                        "'outbox.cell_outbox'::regclass", "'outbox.control_outbox'::regclass",
                        "'outbox.registered_tables'::regclass", "'outbox.options'::regclass",
                        "'information_schema.tables'::regclass"]
                       + ["%d::oid::regclass" % o for o in toast])
        cur.execute("""
            SELECT DISTINCT m[1] FROM pg_proc p,
                   regexp_matches(p.prosrc, '''([^'']{1,60})''', 'g') m
             WHERE p.pronamespace = 'outbox'::regnamespace""")
        self.literals = [r[0] for r in cur.fetchall()]

    def snapshot(self):
        with self.lock:
            return dict(tables=list(self.tables), all_tables=list(self.all_tables),
                        columns=dict(self.columns), categories=list(self.categories),
                        scopes=list(self.scopes), cells=list(self.cells),
                        shards=list(self.shards), handlers=list(self.handlers),
                        fn_oids=list(self.fn_oids), role_oids=list(self.role_oids),
                        dropped_rel=list(self.dropped_rel_oids),
                        dropped_fn=list(self.dropped_fn_oids),
                        dropped_role=list(self.dropped_role_oids))


# ---------------------------------------------------------------- generators

WEIRD_TEXT = [
    "", " ", "x", "a" * 63, "a" * 64, "a" * 10000, "'", "''", "\"", "\\", "x'; DROP TABLE fz_plain; --",
    "'); DELETE FROM outbox.cells; --", "%s%n%x%%", "ü ñ 😀 中文", "\u202eevil", "tab\there",
    "line\nbreak", "NULL", "null", "1", "-1", "1e30", "$$", "$fz$", "%", "_", ".*", "(", "[",
    "(a+)+$", "a{1000}{1000}", "\\d", "*", "public.fz_plain", "\"fz_plain\"", "FZ_PLAIN",
    "outbox_replication.", "outbox_replication..replication_version",
    "outbox_replication.fz_plain.replication_version",
    "outbox_replication.FZ_PLAIN.replication_version",
    "outbox_replication.fz_plain.backfill.target_cells",
    "outbox_replication.fz_plain.backfill.target_cells.x",
    "outbox_replication.fz_plain.replication_version.x",
    "outbox_replication.%s.replication_version" % ("k" * 63),
    "outbox_replication.%s.replication_version" % ("k" * 64),
    "outbox_replication.fz_plain'--.replication_version", "outbox.silo_mode",
    "outbox_backfill.fz_plain", "cell", "control", "monolith", "CELL", " cell", "cell ",
    "redis", "table", "cpp_exception", "pg_error", "live_probes", "^[a-z_][a-z0-9_]*$",
    "value", "tbl", "\x7f", "\u00a0", "\U0010ffff",
]

INT_SPECIAL = [0, 1, -1, 2, 3, 5, 7, 10, 100, 1000, 10000, INT4_MAX, INT4_MIN, INT4_MAX - 1]
BIGINT_SPECIAL = INT_SPECIAL + [INT8_MAX, INT8_MIN, INT8_MAX - 1, INT8_MIN + 1, 2**31, -2**31 - 1,
                                2**53, 2**62]
BAD_NUMBER_TEXT = ["1e30", "", "abc", "2147483648", "-2147483649", "9223372036854775808",
                   " 7 ", "0x10", "NaN", "--1", "1.5", "+3", "١٢"]
JSONB_VALUES = [
    "0", "1", "2", "3", "-1", "1.5", "1e30", "1" + "0" * 400, "-0", "2147483647", "2147483648",
    "1e-400", "\"2\"", "\"x\"", "\"%s\"" % ("s" * 10000), "true", "false", "null", "[]", "{}",
    "[1]", "[null]", "[\"cell_a\"]", "[\"cell_a\", \"cell_b\"]", "[\"cell_a\", \"nowhere\"]",
    "[\"cell_a\", 1]", "[\"\"]", "[\"'; DROP TABLE fz_plain; --\"]", "{\"cell_a\": 1}",
    "[[\"cell_a\"]]", "{\"a\": [1, {\"b\": null}]}", "[" + ",".join(["\"cell_a\""] * 2000) + "]",
]
REGEX_PATTERNS = ["^[A-Za-z_][A-Za-z0-9_]*$", "", ".*", "(", "[", "(a+)+$", "a{2000}", "\\",
                  "^$", "(?<=x)", "[[:alpha:]]+", "(a|a)*b"]


class Generator:
    def __init__(self, rng, pools):
        self.rng = rng
        self.role = None
        self.pools = pools
        self.snap = pools.snapshot()

    def refresh(self):
        self.snap = self.pools.snapshot()

    def pick(self, seq):
        return seq[self.rng.randrange(len(seq))] if seq else None

    # Names that mean something to the extension.
    def real_names(self):
        s = self.snap
        out = []
        out += [t[0] for t in s["tables"]] + [t[2] for t in s["tables"]]
        out += [c[0] for c in s["categories"]] + [c[0] for c in s["scopes"]] + s["cells"]
        return out or ["fz_plain"]

    def table_key(self):
        s = self.snap
        r = self.rng.random()
        if r < 0.7 and s["tables"]:
            return Arg(q(self.pick(s["tables"])[2]), "table_key")
        if r < 0.8:
            return Arg(q(self.pick(["fz_dropped", "fz_unreg", "nope", "FZ_PLAIN", "fz_plain "])),
                       "unknown_key")
        return self.text_weird()

    def option_key(self):
        s = self.snap
        key = self.pick(s["tables"])[2] if s["tables"] else "fz_plain"
        r = self.rng.random()
        if r < 0.45:
            return Arg(q("outbox_replication.%s.replication_version" % key), "option_rv")
        if r < 0.7:
            return Arg(q("outbox_replication.%s.backfill.target_cells" % key), "option_tc")
        if r < 0.8:
            return Arg(q("outbox_replication.%s.replication_version"
                         % self.pick(["nope", "fz_dropped", "x" * 63, "_"])), "option_other")
        return self.text_weird()

    def text_weird(self):
        r = self.rng.random()
        if r < 0.08:
            return Arg("E'a\\000b'", "text_nul")
        if r < 0.15 and self.pools.literals:
            return Arg(q(self.pick(self.pools.literals)), "text_literal")
        return Arg(q(self.pick(WEIRD_TEXT)), "text_weird")

    def text(self, name, func):
        s = self.snap
        rng = self.rng
        n = (name or "").lower()
        if n == "table_key":
            return self.table_key()
        if n == "key":
            return self.option_key()
        if n in ("silo", "silo_mode"):
            if rng.random() < 0.75:
                return Arg(q(self.pick(["cell", "control", "monolith"])), "silo")
            return self.text_weird()
        if n == "category" and self.role == ROLE_OWNER and rng.random() < 0.6:
            return Arg(q(self.pick(["FZ_OWNED", "FZ_PLAIN"])), "owned_category")
        if n == "category" and rng.random() < 0.75 and s["categories"]:
            return Arg(q(self.pick(s["categories"])[0]), "category")
        if n == "scope" and rng.random() < 0.75 and s["scopes"]:
            return Arg(q(self.pick(s["scopes"])[0]), "scope")
        if n == "cell_name" and rng.random() < 0.75:
            return Arg(q(self.pick(s["cells"] + ["nowhere"])), "cell")
        if n == "mode" and rng.random() < 0.6:
            return Arg(q(self.pick(["cpp_exception", "pg_error", "live_probes"])), "mode")
        if n == "pattern" and rng.random() < 0.7:
            return Arg(q(self.pick(REGEX_PATTERNS)), "pattern")
        if n == "privilege" and rng.random() < 0.7:
            return Arg(q(self.pick(["register", "REGISTER", "consume", "CONSUME", "usage", "all",
                                    "execute", "drain", " REGISTER", "select"])), "privilege")
        if n == "name" and rng.random() < 0.5:
            fresh = "FZ_%s_%d" % (func.upper().strip("_")[:10], rng.randrange(50))
            if "cell" in func:
                fresh = self.pick(s["cells"] + ["fz_cell_%d" % rng.randrange(20)])
            return Arg(q(fresh), "fresh_name")
        if n == "value" and func == "_prometheus_label":
            return self.text_weird()
        if rng.random() < 0.5:
            return Arg(q(self.pick(self.real_names())), "real_name")
        return self.text_weird()

    def name_type(self, name, func, table=None):
        n = (name or "").lower()
        cols = self.snap["columns"].get(table or "", []) or ["id", "org", "label"]
        if n in ("shard_column", "cell_column", "column_name") and self.rng.random() < 0.7:
            return Arg(q(self.pick(cols + ["id", "org", "user_id", "cell", "label", "nope"])),
                       "column")
        return self.text(name, func)

    def integer(self, name, bits):
        rng = self.rng
        s = self.snap
        n = (name or "").lower()
        r = rng.random()
        if r < 0.07:
            bad = self.pick(BAD_NUMBER_TEXT)
            return Arg("%s::text::%s" % (q(bad), "bigint" if bits == 64 else "integer"),
                       "wrong_type_text")
        if r < 0.10:
            return Arg(self.pick(["1e30::%s", "2147483648::bigint::%s", "1.5::%s",
                                  "'9223372036854775808'::numeric::%s"])
                       % ("bigint" if bits == 64 else "integer"), "wrong_type_cast")
        if r < 0.45:
            if n == "id" and s["categories"]:
                return Arg(str(self.pick(s["categories"] + s["scopes"])[1]), "known_id")
            if n in ("shard_scope",) and s["shards"]:
                return Arg(str(self.pick(s["shards"])[1]), "known_scope")
            if n in ("shard_identifier",) and s["shards"]:
                return Arg(str(self.pick(s["shards"])[2]), "known_shard")
            if n in ("lower_bound",):
                v = self.pick(self.pools.row_ids) + rng.choice([-1, 0, 0, 1])
                return Arg(str(max(INT8_MIN, min(INT8_MAX, v))), "near_row_id")
            if n in ("batch_size", "max_batch_rate", "top"):
                return Arg(str(rng.choice([1, 2, 3, 10, 50, 1000, 100000])), "small_positive")
            if n in ("version", "replication_version"):
                return Arg(str(rng.choice([1, 2, 3, 4])), "small_version")
            if n in ("scheduled_count",):
                return Arg(str(rng.choice([0, 1, 9999, 10000])), "small")
            return Arg(str(rng.choice([0, 1, 2, 3, 10])), "small")
        pool = BIGINT_SPECIAL if bits == 64 else INT_SPECIAL
        v = self.pick(pool)
        typ = "bigint" if bits == 64 else "integer"
        if v < 0:
            return Arg("(%d)::%s" % (v, typ), "extreme")
        return Arg("%d::%s" % (v, typ), "extreme")

    def jsonb(self, name, func):
        r = self.rng.random()
        if r < 0.05:
            return Arg("%s::jsonb" % q("[" * 5000 + "]" * 5000), "json_deep")
        if r < 0.10:
            return Arg("%s::text::jsonb" % q(self.pick(["not json", "{", "[1,", "'"])),
                       "wrong_type_text")
        if r < 0.13:
            return Arg("%s::jsonb" % q("1e1000000"), "json_huge")
        return Arg("%s::jsonb" % q(self.pick(JSONB_VALUES)), "json")

    def boolean(self):
        r = self.rng.random()
        if r < 0.45:
            return Arg("true", "true")
        if r < 0.9:
            return Arg("false", "false")
        return Arg(self.pick(["'maybe'::text::boolean", "1::boolean", "'yes'::boolean"]),
                   "wrong_type")

    def regclass(self, role, table=None):
        s = self.snap
        rng = self.rng
        if table and rng.random() < 0.4:
            # The table the column-name arguments were drawn from.
            return Arg(q(table) + "::regclass", "column_table")
        r = rng.random()
        if role == ROLE_OWNER and r < 0.5:
            return Arg(q(self.pick(["fz_owned1", "fz_owned2"])) + "::regclass", "owned")
        if r < 0.45 and s["tables"]:
            t = self.pick(s["tables"])
            if rng.random() < 0.5:
                return Arg("%d::oid::regclass" % t[1], "registered_oid")
            return Arg(q(t[0]) + "::regclass", "registered")
        if r < 0.55 and self.pools.partitions:
            p = self.pick(self.pools.partitions)
            return Arg("%d::oid::regclass" % p[1], "partition")
        if r < 0.65 and s["dropped_rel"]:
            return Arg("%d::oid::regclass" % self.pick(s["dropped_rel"]), "dropped_oid")
        if r < 0.72 and s["all_tables"]:
            return Arg("%d::oid::regclass" % self.pick(s["all_tables"])[1], "fz_table")
        if r < 0.85:
            return Arg(self.pick(self.pools.others), "other_relation")
        return Arg(self.pick(["0::oid::regclass", "1::oid::regclass", "4294967295::oid::regclass",
                              "'no_such_table'::regclass", "'-1'::text::regclass",
                              "'fz_plain'::text::regclass", "'pg_class'::text::regclass"]),
                   "odd_regclass")

    def regprocedure(self):
        s = self.snap
        r = self.rng.random()
        if r < 0.4 and s["handlers"]:
            return Arg(q(self.pick(s["handlers"])) + "::regprocedure", "handler")
        if r < 0.55:
            return Arg(q(self.pick(["fz_handler(outbox.message)", "fz_handler_drop(outbox.message)",
                                    "fz_handler_recurse(outbox.message)",
                                    "fz_handler_reregister(outbox.message)"]))
                       + "::regprocedure", "handler")
        if r < 0.7:
            return Arg(q(self.pick(["fz_not_handler(integer)", "fz_setof_handler(outbox.message)",
                                    "fz_proc_handler(outbox.message)", "outbox.drain(text)",
                                    "outbox.capture_row()", "pg_catalog.now()",
                                    "outbox._require(anyelement,text)"]))
                       + "::regprocedure", "not_handler")
        if r < 0.85 and (s["dropped_fn"] or s["fn_oids"]):
            return Arg("%d::oid::regprocedure" % self.pick(s["dropped_fn"] or s["fn_oids"]),
                       "dropped_or_oid")
        return Arg(self.pick(["0::oid::regprocedure", "1::oid::regprocedure",
                              "'nope(int)'::regprocedure", "'fz_handler'::text::regprocedure"]),
                   "odd_regprocedure")

    def regrole(self):
        s = self.snap
        r = self.rng.random()
        if r < 0.6:
            return Arg(q(self.pick([ROLE_OWNER, ROLE_APP, ROLE_MONITOR, "pg_monitor"]))
                       + "::regrole", "role")
        if r < 0.8 and (s["dropped_role"] or s["role_oids"]):
            return Arg("%d::oid::regrole" % self.pick(s["dropped_role"] or s["role_oids"]),
                       "role_oid")
        return Arg(self.pick(["0::oid::regrole", "'public'::regrole", "'nobody'::regrole",
                              "'fz_app'::text::regrole"]), "odd_regrole")

    def name_array(self, name, table):
        cols = self.snap["columns"].get(table or "", []) or ["id", "org", "label"]
        r = self.rng.random()
        if r < 0.45:
            k = self.rng.randint(1, min(4, len(cols)))
            return Arg("ARRAY[%s]::name[]" % ", ".join(q(c) for c in self.rng.sample(cols, k)),
                       "columns")
        choices = ["'{}'::name[]", "'{NULL}'::name[]", "'{label,label}'::name[]",
                   "'{\"a;b\"}'::name[]", "'{{id},{org}}'::name[]", "'[0:1]={id,org}'::name[]",
                   "array_fill('label'::name, ARRAY[3000])", "ARRAY[NULL, 'id']::name[]",
                   "ARRAY[%s]::name[]" % q("x" * 200), "'{}'::text[]::name[]",
                   "'{id}'::text::name[]"]
        return Arg(self.pick(choices), "odd_name_array")

    def int_array(self):
        s = self.snap
        r = self.rng.random()
        if r < 0.4 and s["categories"]:
            ids = [str(c[1]) for c in s["categories"]]
            return Arg("'{%s}'::int[]" % ",".join(self.rng.sample(ids, self.rng.randint(0, len(ids)))),
                       "category_ids")
        return Arg(self.pick(["'{}'::int[]", "'{NULL}'::int[]", "'{1,NULL,3}'::int[]",
                              "'{-1,2147483647,-2147483648}'::int[]", "'{{1,2},{3,4}}'::int[]",
                              "'[-5:-4]={1,2}'::int[]",
                              "(SELECT array_agg(g) FROM generate_series(1, 100000) g)",
                              "'{1e30}'::text::int[]"]), "odd_int_array")

    def anyelement(self):
        return Arg(self.pick(["1", "'x'::text", "NULL::int", "'{}'::int[]", "'{\"a\": 1}'::jsonb",
                              "NULL", "ROW(1, 'x')", "'fz_plain'::regclass", "now()",
                              "'\\x00'::bytea"]), "any")

    def value(self, typ, name, func, role, table):
        """An Arg for one argument of type typ (format_type text)."""
        rng = self.rng
        self.role = role
        null_p = 0.10 if role != "superuser" else 0.08
        if rng.random() < null_p:
            return Arg("NULL::%s" % typ if typ not in ("anyelement",) else "NULL", "null")
        if typ in ("integer", "smallint"):
            return self.integer(name, 32)
        if typ == "bigint":
            return self.integer(name, 64)
        if typ in ("text", "character varying"):
            return self.text(name, func)
        if typ == "name":
            return self.name_type(name, func, table)
        if typ in ("jsonb", "json"):
            a = self.jsonb(name, func)
            if typ == "json":
                a.sql = a.sql.replace("::jsonb", "::json")
            return a
        if typ == "boolean":
            return self.boolean()
        if typ == "regclass":
            return self.regclass(role, table)
        if typ in ("regprocedure", "regproc"):
            return self.regprocedure()
        if typ == "regrole":
            return self.regrole()
        if typ == "name[]":
            return self.name_array(name, table)
        if typ in ("integer[]", "bigint[]"):
            return self.int_array()
        if typ == "text[]":
            a = self.name_array(name, table)
            a.sql = a.sql.replace("::name[]", "::text[]")
            return a
        if typ in ("anyelement", "anyarray", "anynonarray", "anycompatible"):
            return self.anyelement()
        if typ == "oid":
            return Arg(str(self.pick([0, 1, 2**32 - 1] + [t[1] for t in self.snap["tables"]])),
                       "oid")
        # Anything else: NULL, or a cast from text (which may well fail).
        if rng.random() < 0.6:
            return Arg("NULL::%s" % typ, "null_other")
        return Arg("%s::%s" % (q(self.pick(["x", "", "1", "{}"])), typ), "text_cast_other")


# --------------------------------------------------------------- the functions

class Function:
    def __init__(self, row):
        (self.oid, self.name, self.signature, self.argtypes, self.argnames, self.ndefaults,
         self.retset, self.rettype, self.composite, self.lang, self.volatile) = row
        self.nargs = len(self.argtypes)
        self.trigger = self.rettype in ("trigger", "event_trigger")

    def weight(self):
        if self.trigger:
            return 0.3
        w = 1.0 + 0.5 * self.nargs
        if self.name in ("process_backfill_batch", "register_table", "drain_shard", "set_option",
                         "set_processing_state", "_cursor_set", "_cursor_get", "drain",
                         "register_handler", "backfill_outboxes_for", "_register_table",
                         "_install_capture_triggers", "target_cells", "find_replication_version"):
            w *= 2
        return w


def load_functions(cur):
    cur.execute("""
        SELECT p.oid::bigint, p.proname, p.oid::regprocedure::text,
               ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t),
               ARRAY(SELECT coalesce(n, '')
                       FROM unnest(p.proargnames, p.proargmodes) AS a(n, m)
                      WHERE coalesce(m, 'i') IN ('i', 'b', 'v')),
               p.pronargdefaults, p.proretset, format_type(p.prorettype, NULL),
               (t.typtype = 'c' OR p.prorettype = 'record'::regtype), l.lanname,
               p.provolatile = 'v'
          FROM pg_proc p JOIN pg_type t ON t.oid = p.prorettype
          JOIN pg_language l ON l.oid = p.prolang
         WHERE p.pronamespace = 'outbox'::regnamespace AND p.prokind = 'f'
         ORDER BY p.proname, p.oid""")
    funcs = []
    for row in cur.fetchall():
        row = list(row)
        if not row[4] or len(row[4]) != len(row[3]):
            row[4] = [""] * len(row[3])
        funcs.append(Function(row))
    return funcs


# ------------------------------------------------------------------- the state

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.dml_calls = 0
        self.by_state = collections.Counter()
        self.by_role = collections.Counter()
        self.ok_by_role = collections.Counter()
        self.examples = collections.defaultdict(list)
        self.time_by_function = collections.Counter()
        self.by_function = collections.Counter()
        self.states_by_function = collections.defaultdict(collections.Counter)
        self.deep_by_function = collections.Counter()
        self.internal = collections.OrderedDict()  # (state, msg) -> [count, role, sql]
        self.expected_internal = collections.OrderedDict()
        self.crashes = []       # dicts
        self.lost = []          # (role, sql, message)
        self.hangs = []
        self.suspicious = collections.OrderedDict()
        self.warnings = collections.Counter()
        self.prelude_errors = collections.Counter()
        self.setup_failures = []
        self.quarantined = collections.Counter()
        self.skipped_quarantine = 0
        self.mutator_ops = collections.Counter()
        self.mutator_errors = collections.Counter()
        self.targeted_drops = []
        self.client_errors = collections.Counter()
        self.committed = collections.deque(maxlen=5)
        self.mutator_recent = collections.deque(maxlen=3)


SECTION = "fuzz:"


def short(sql, n=300):
    sql = " ".join(sql.split())
    return sql if len(sql) <= n else sql[:n] + "... (%d chars)" % len(sql)


# --------------------------------------------------------------------- redis

def redis_command(host, port, *parts):
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            msg = "*%d\r\n" % len(parts) + "".join("$%d\r\n%s\r\n" % (len(p), p) for p in parts)
            s.sendall(msg.encode())
            return s.recv(200).decode(errors="replace").strip()
    except OSError as e:
        return "error: %s" % e


# ---------------------------------------------------------------- the mutator

class Mutator(threading.Thread):
    """Meanwhile, as a superuser: drops and recreates registered tables and
    partitions, registers and unregisters tables and cells, drops handlers,
    alters tables, stalls Redis while dropping, and repairs the fixture."""

    def __init__(self, fuzz, seed):
        super().__init__(daemon=True)
        self.fuzz = fuzz
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.conn = None

    def execute(self, statements, label):
        """Runs statements in order; False (and counted) when one fails."""
        st = self.fuzz.stats
        try:
            if self.conn is None or self.conn.closed:
                self.conn = self.fuzz.server.connect(self.fuzz.server.superuser)
                self.fuzz.register_pid(self.conn, "mutator")
            cur = self.conn.cursor()
            for sql in statements:
                self.fuzz.set_current(self.conn, "mutator", sql)
                cur.execute(sql)
            st.mutator_ops[label] += 1
            if label not in ("repair", "dml"):
                st.mutator_recent.append("%s: %s" % (label, short(statements[-1], 120)))
            return True
        except psycopg2.Error as e:
            if lost(self.conn, e):
                self.fuzz.on_connection_lost("mutator", statements[-1], str(e))
                self.conn = None
                return False
            st.mutator_errors[label] += 1
            try:
                self.conn.cursor().execute("ROLLBACK")
            except psycopg2.Error:
                pass
            return False

    def remember_drop(self, table):
        try:
            if self.conn is None or self.conn.closed:
                self.conn = self.fuzz.server.connect(self.fuzz.server.superuser)
                self.fuzz.register_pid(self.conn, "mutator")
            cur = self.conn.cursor()
            cur.execute("SELECT %s::regclass::oid::bigint" % q(table))
            oid = cur.fetchone()[0]
            with self.fuzz.pools.lock:
                self.fuzz.pools.dropped_rel_oids.append(oid)
        except Exception:
            pass

    def recreate(self, table, txn_sleep=None):
        self.remember_drop(table)
        stmts = ["BEGIN", "DROP TABLE IF EXISTS %s CASCADE" % table]
        if txn_sleep:
            stmts.append("SELECT pg_sleep(%g)" % txn_sleep)
        stmts += ["COMMIT"]
        self.execute(stmts, "drop table")
        self.execute(table_ddl(table) + [register_sql(table),
                                         "GRANT INSERT, UPDATE, DELETE ON %s TO fz_app" % table],
                     "recreate table")

    def blocked_table(self):
        """The table of the call the main thread is waiting in, if any."""
        cur_call = self.fuzz.current_main
        if not cur_call or time.time() - cur_call[1] < 0.05:
            return None
        sql = cur_call[2]
        m = re.search(r"process_backfill_batch\((?:(\d+)::oid|'([a-z_0-9]+)')::regclass", sql)
        if not m:
            return None
        if m.group(2):
            return m.group(2)
        oid = int(m.group(1))
        with self.fuzz.pools.lock:
            for t in self.fuzz.pools.tables:
                if t[1] == oid:
                    return t[0]
        return None

    def stall_and_drop(self):
        # Redis stalls (CLIENT PAUSE, shorter than outbox.redis_command_timeout_ms)
        # and, meanwhile, the table of the call that waits for Redis is
        # dropped (committed): the call resumes on a table that is gone.
        pause = self.rng.choice([400, 600])
        reply = redis_command(self.fuzz.redis_host, self.fuzz.redis_port, "CLIENT", "PAUSE",
                              str(pause))
        if not reply.startswith("+OK"):
            self.fuzz.stats.mutator_errors["redis pause: " + reply[:60]] += 1
            return
        self.fuzz.stats.mutator_ops["redis stall"] += 1
        t_end = time.time() + pause / 1000.0
        target = None
        # Wait until the main connection waits in the extension (the Redis
        # socket) inside a backfill batch on a table that can be made again.
        while time.time() < t_end - 0.15 and target is None:
            time.sleep(0.02)
            cur_call = self.fuzz.current_main
            name = self.blocked_table()
            if not cur_call or name not in RECREATABLE:
                continue
            try:
                cur = self.conn.cursor() if self.conn and not self.conn.closed else None
                if cur is None:
                    break
                cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %d"
                            % cur_call[0])
                row = cur.fetchone()
                if row and row[0] == "Extension":
                    target = name
            except psycopg2.Error:
                break
        if target:
            self.fuzz.stats.mutator_ops["drop the table of a call waiting for Redis"] += 1
            with self.fuzz.stats.lock:
                self.fuzz.stats.targeted_drops.append((time.time(), self.fuzz.current_main[2]
                                                       if self.fuzz.current_main else ""))
        else:
            target = self.rng.choice(["fz_m1", "fz_m2", "fz_m3"])
        self.recreate(target)
        time.sleep(max(0.0, t_end - time.time()))

    def op(self):
        rng = self.rng
        r = rng.random()
        m = rng.choice(["fz_m1", "fz_m2", "fz_m3"])
        if r < 0.16:
            self.recreate(m)
        elif r < 0.24:
            # Dropped inside a transaction that stays open a while: calls wait
            # on the lock, then find the table gone.
            self.recreate(m, txn_sleep=rng.choice([0.05, 0.2, 0.5]))
        elif r < 0.46 and self.fuzz.redis_port:
            self.stall_and_drop()
        elif r < 0.50:
            part = rng.choice(["fz_part_p1", "fz_part_p2"])
            bounds = {"fz_part_p1": (100, 200), "fz_part_p2": (200, 300)}[part]
            self.remember_drop(part)
            if rng.random() < 0.5:
                self.execute(["DROP TABLE IF EXISTS %s" % part,
                              "CREATE TABLE %s PARTITION OF fz_part FOR VALUES FROM (%d) TO (%d)"
                              % ((part,) + bounds),
                              "INSERT INTO %s SELECT g, g %% 5, 'again' FROM generate_series(%d, %d) g"
                              % (part, bounds[0], bounds[0] + 20)], "recreate partition")
            else:
                self.execute(["ALTER TABLE fz_part DETACH PARTITION %s" % part], "detach")
                time.sleep(0.05)
                self.execute(["ALTER TABLE fz_part ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)"
                              % ((part,) + bounds)], "attach")
        elif r < 0.56:
            t = rng.choice(["fz_m1", "fz_m2", "fz_ctl_text", "fz_ctl_fan", "fz_part"])
            self.execute(["SELECT outbox.unregister_table(%s)" % q(t)], "unregister table")
            time.sleep(rng.choice([0.01, 0.1]))
            self.execute([register_sql(t)], "register table")
        elif r < 0.61:
            cell = rng.choice(["fz_cell_churn", "cell_c"])
            self.execute(["SELECT outbox.register_cell(%s)" % q(cell)], "register cell")
            time.sleep(0.02)
            self.execute(["SELECT outbox.unregister_cell(%s)" % q(cell)], "unregister cell")
        elif r < 0.67:
            try:
                cur = self.conn.cursor() if self.conn and not self.conn.closed else None
                if cur:
                    cur.execute("SELECT 'fz_handler_drop(outbox.message)'::regprocedure::oid::bigint")
                    with self.fuzz.pools.lock:
                        self.fuzz.pools.dropped_fn_oids.append(cur.fetchone()[0])
            except psycopg2.Error:
                pass
            self.execute(["DROP FUNCTION IF EXISTS fz_handler_drop(outbox.message)"], "drop handler")
            time.sleep(rng.choice([0.05, 0.3]))
            self.execute([handler_sql("fz_handler_drop"),
                          "SELECT outbox.register_handler('FZ_CTL_TEXT', "
                          "'fz_handler_drop(outbox.message)')"], "recreate handler")
            self.repair_handlers()
        elif r < 0.72:
            t = rng.choice(["fz_m1", "fz_m2", "fz_plain", "fz_part"])
            alter = rng.choice([
                ["ALTER TABLE %s ADD COLUMN IF NOT EXISTS extra int DEFAULT 7" % t,
                 "ALTER TABLE %s DROP COLUMN IF EXISTS extra" % t],
                ["ALTER TABLE %s RENAME TO %s_renamed" % (t, t),
                 "ALTER TABLE %s_renamed RENAME TO %s" % (t, t)],
                ["ALTER TABLE %s ALTER COLUMN label TYPE varchar(200)" % t],
                ["ALTER TABLE %s RENAME COLUMN label TO label2" % t],
                ["ALTER TABLE %s DISABLE TRIGGER ALL" % t],
                ["ALTER TABLE %s ALTER COLUMN org DROP NOT NULL" % t],
            ])
            for stmt in alter:
                self.execute([stmt], "alter table")
                time.sleep(0.02)
        elif r < 0.85:
            t = rng.choice(["fz_plain", "fz_part", "fz_m1", "fz_m2", "fz_ctl_fan", "fz_big"])
            col = {"fz_ctl_fan": "token", "fz_big": "note"}.get(t, "label")
            self.execute(["UPDATE %s SET %s = %s || '.' WHERE id %% %d = 0"
                          % (t, col, col, rng.choice([3, 7, 11]))], "dml")
        elif r < 0.95:
            t, key = rng.choice([("fz_plain", "fz_plain"), ("fz_big", "fz_big"),
                                 ("fz_part", "fz_part"), ("fz_ctl_name", "fz_ctl_name"),
                                 ("fz_ctl_text", "fz_ctl_text"), ("fz_many", "fz_many_key")])
            v = rng.randint(1, 5)
            self.execute(["SELECT outbox.set_replication_version(%s, %d)" % (q(t), v + 1)
                          if rng.random() < 0.3 else "SELECT 1",
                          "SELECT outbox.set_option(%s, %s)"
                          % (q("outbox_replication.%s.replication_version" % key), q(str(v)))],
                         "gates")
        else:
            self.repair()

    def repair(self):
        """Puts back what fuzzed calls and the mutator took away."""
        for cell in ("cell_a", "cell_b"):
            self.execute(["SELECT outbox.register_cell(%s)" % q(cell)], "repair")
        for table in REGISTRATIONS:
            self.execute(["DO $fzr$ BEGIN IF to_regclass(%s) IS NOT NULL AND NOT EXISTS (SELECT "
                          "FROM outbox.registered_tables WHERE relid = to_regclass(%s)) THEN "
                          "PERFORM %s; END IF; END $fzr$"
                          % (q(table), q(table), register_sql(table)[len("SELECT "):])], "repair")
        for cat, h in HANDLERS.items():
            self.execute(["SELECT outbox.register_handler(%s, %s)" % (q(cat), q(h))], "repair")
        self.repair_handlers()

    def repair_handlers(self):
        # A handler whose function is gone breaks every write (found by this
        # run in 0.4.0: XX000 cache lookup failed); put a live one back so
        # that capture keeps being exercised.
        self.execute(["SELECT outbox.register_handler(c.name, 'fz_handler(outbox.message)') "
                      "FROM outbox.handlers h JOIN outbox.categories c ON c.id = h.category "
                      "WHERE NOT EXISTS (SELECT FROM pg_proc p WHERE p.oid = h.handler)"],
                     "repair")

    def run(self):
        while not self.stop.is_set():
            try:
                self.op()
                self.repair_handlers()
            except Exception as e:  # never let the mutator die silently
                self.fuzz.stats.mutator_errors["exception: %s" % type(e).__name__] += 1
            self.stop.wait(self.rng.uniform(0.01, 0.06))
        if self.conn is not None and not self.conn.closed:
            self.conn.close()


class Watchdog(threading.Thread):
    """Cancels, then terminates, a call that outlives statement_timeout by far."""

    def __init__(self, fuzz):
        super().__init__(daemon=True)
        self.fuzz = fuzz
        self.stop = threading.Event()

    def run(self):
        limit = self.fuzz.server.timeout_ms / 1000.0 + 2
        conn = None
        while not self.stop.wait(0.5):
            cur_call = self.fuzz.current_main
            if not cur_call:
                continue
            pid, since, sql, stage, key = cur_call
            age = time.time() - since
            if age < limit:
                continue
            try:
                if conn is None or conn.closed:
                    conn = self.fuzz.server.connect(self.fuzz.server.superuser, wait=5)
                c = conn.cursor()
                if stage == 0:
                    c.execute("SELECT pg_cancel_backend(%d)" % pid)
                    self.fuzz.current_main = (pid, since, sql, 1, key)
                elif age > limit + 2:
                    c.execute("SELECT pg_terminate_backend(%d)" % pid)
                    with self.fuzz.pid_lock:
                        owner = self.fuzz.pid_owner.get(pid)
                    txn = owner[3] if owner and len(owner) > 3 else []
                    self.fuzz.stats.hangs.append((pid, short(sql), " ; ".join(txn)))
                    if key:
                        self.fuzz.crash_keys[key] += 2
                    self.fuzz.current_main = None
            except psycopg2.Error:
                conn = None


# ------------------------------------------------------------------ the fuzzer

class Fuzzer:
    def __init__(self, args):
        self.args = args
        self.server = Server(args)
        self.rng = random.Random(args.seed)
        self.pools = Pools()
        self.stats = Stats()
        self.log = LogScanner(args.server_log)
        self.redis_host = args.redis_host
        self.redis_port = args.redis_port
        self.conns = {}
        self.pid_owner = {}     # backend pid -> (who, last sql)
        self.pid_lock = threading.Lock()
        self.current_main = None
        self.crash_keys = collections.Counter()
        self.coarse = {}        # template key -> function and NULL positions
        self.seen_crash_pids = set()
        self.superuser = self.server.superuser

    # Bookkeeping of which backend runs what, for crash attribution.
    def register_pid(self, conn, who):
        with self.pid_lock:
            self.pid_owner[conn.fz_pid] = [who, ""]

    def set_current(self, conn, who, sql, key=None):
        with self.pid_lock:
            old = self.pid_owner.get(conn.fz_pid)
            txn = old[3] if old and len(old) > 3 and sql != "BEGIN" else []
            txn.append(short(sql, 300))
            del txn[:-8]
            self.pid_owner[conn.fz_pid] = [who, sql, key, txn]

    def conn(self, role):
        c = self.conns.get(role)
        if c is None or c.closed:
            c = self.server.connect(role)
            self.conns[role] = c
            self.register_pid(c, role)
        return c

    def reset_conns(self):
        for c in self.conns.values():
            try:
                c.close()
            except Exception:
                pass
        self.conns = {}

    def on_connection_lost(self, who, sql, message):
        """A backend died: wait for the server, read the log, attribute the crash."""
        with self.stats.lock:
            self.stats.lost.append((who, short(sql), message.strip().split("\n")[0]))
        try:
            c = self.server.connect(self.superuser, wait=60)
            c.close()
        except psycopg2.Error:
            pass
        time.sleep(0.1)
        self.collect_crashes()

    def collect_crashes(self):
        for ev in self.log.scan():
            with self.pid_lock:
                owner = self.pid_owner.get(ev["pid"])
            ev["who"] = owner[0] if owner else ev["what"]
            ev["call"] = owner[1] if owner and owner[1] else ev["statement"]
            ev["key"] = owner[2] if owner and len(owner) > 2 else None
            ev["txn"] = owner[3] if owner and len(owner) > 3 else []
            with self.stats.lock:
                self.stats.crashes.append(ev)
            if ev["key"]:
                self.crash_keys[ev["key"]] += 1
                coarse = self.coarse.get(ev["key"])
                if coarse and owner and owner[1] == ev["call"] and not re.match(
                        r"(ROLLBACK|COMMIT|RELEASE|SAVEPOINT)", ev["call"]):
                    self.crash_keys[coarse] += 1
            with self.stats.lock:
                for t, sql in self.stats.targeted_drops:
                    if sql == ev["call"]:
                        ev["note"] = "its table was dropped by the mutator while it waited for Redis"

    # ---------------------------------------------------------------- setup
    def setup(self):
        c = self.conn(self.superuser)
        cur = c.cursor()
        # Setup waits for locks that the worker or an earlier run may hold.
        cur.execute("SET statement_timeout = '60s'; SET lock_timeout = '20s'")
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cur.fetchone()[0]:
            sys.exit("fuzz: PGUSER must be a superuser")
        cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'")
        row = cur.fetchone()
        if not row:
            sys.exit("fuzz: pg_outbox is not installed in database %s" % self.server.dbname)
        self.extversion = row[0]
        cur.execute("SELECT pg_postmaster_start_time(), (SELECT backend_start FROM "
                    "pg_stat_activity WHERE backend_type = 'checkpointer')")
        self.start_time, self.checkpointer_start = cur.fetchone()
        # Leftovers of an earlier run.
        for sql in (["SELECT outbox.unregister_handler(c.name) FROM outbox.handlers h "
                     "JOIN outbox.categories c ON c.id = h.category "
                     "WHERE NOT EXISTS (SELECT FROM pg_proc p WHERE p.oid = h.handler) "
                     "OR h.handler::text LIKE 'fz\\_%'",
                     "DROP TABLE IF EXISTS %s CASCADE" % ", ".join(
                         FIXTURE_TABLES + ["fz_part_p0", "fz_part_p1", "fz_part_p2", "fz_part_def"]),
                     "DROP FUNCTION IF EXISTS fz_handler, fz_handler_drop, fz_handler_recurse, "
                     "fz_handler_writes, fz_handler_reregister, fz_not_handler, fz_setof_handler, "
                     "fz_dropped_fn", "DROP PROCEDURE IF EXISTS fz_proc_handler",
                     "DROP VIEW IF EXISTS fz_view", "DROP SEQUENCE IF EXISTS fz_seq",
                     "DROP MATERIALIZED VIEW IF EXISTS fz_mat", "DROP TYPE IF EXISTS fz_type"]
                    + ["DROP OWNED BY %s CASCADE" % r for r in (ROLE_OWNER, ROLE_APP, ROLE_MONITOR)]
                    + ["DROP ROLE IF EXISTS %s" % r for r in (ROLE_OWNER, ROLE_APP, ROLE_MONITOR)]):
            self.setup_exec(sql, quiet=True)
        for item in fixture_statements():
            self.setup_exec(item)
        # README: the owner is granted register_table etc.; grant_category when
        # the installed version has it.
        cur = self.conn(self.superuser).cursor()
        cur.execute("""SELECT p.oid::regprocedure::text FROM pg_proc p
                        WHERE p.pronamespace = 'outbox'::regnamespace
                          AND p.proname IN ('register_table', 'unregister_table',
                                            'set_replication_version')""")
        for (sig,) in cur.fetchall():
            self.setup_exec("GRANT EXECUTE ON FUNCTION %s TO fz_owner" % sig)
        cur.execute("SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = "
                    "'outbox'::regnamespace AND p.proname = 'grant_category'")
        self.has_grant_category = bool(cur.fetchall())
        if self.has_grant_category:
            for cat, privs in (("FZ_OWNED", ("REGISTER", "CONSUME")), ("FZ_PLAIN", ("REGISTER",))):
                for priv in privs:
                    self.setup_exec("SELECT outbox.grant_category(%s, 'fz_owner', %s)"
                                    % (q(cat), q(priv)), quiet=True)
        # The owner registers its own table, as README says it may.
        self.setup_exec("SET ROLE fz_owner; SELECT outbox.register_table('fz_owned1', "
                        "'FZ_OWNED'); RESET ROLE")
        cur = self.conn(self.superuser).cursor()
        cur.execute("CREATE ROLE fz_gone; SELECT 'fz_gone'::regrole::oid::bigint")
        self.pools.dropped_role_oids.append(cur.fetchone()[0])
        cur.execute("DROP ROLE fz_gone")
        self.pools.static(cur)
        self.pools.refresh(cur)
        self.functions = load_functions(cur)
        cur.execute("RESET statement_timeout; RESET lock_timeout")
        # Which role may execute what (the schema's USAGE included).
        self.roles = [self.superuser, ROLE_OWNER, ROLE_APP, ROLE_MONITOR]
        self.can = {}
        for f in self.functions:
            cur.execute("SELECT r, has_schema_privilege(r, 'outbox', 'USAGE') AND "
                        "has_function_privilege(r, %d::oid, 'EXECUTE') FROM unnest(%%s::text[]) r"
                        % f.oid, (self.roles,))
            self.can[f.oid] = [r for r, ok in cur.fetchall() if ok]

    def setup_exec(self, sql, quiet=False, label=None):
        c = self.conn(self.superuser)
        try:
            self.set_current(c, "setup", sql)
            c.cursor().execute(sql)
            return True
        except psycopg2.Error as e:
            if lost(c, e):
                self.on_connection_lost("setup", sql, str(e))
                self.stats.setup_failures.append(("CONNECTION LOST", short(sql, 120)))
                return False
            if not quiet:
                self.stats.setup_failures.append((e.pgcode, short(sql, 120) + ": " +
                                                  (e.diag.message_primary or "")))
            try:
                c.cursor().execute("ROLLBACK")
            except psycopg2.Error:
                pass
            return False

    # ---------------------------------------------------------- generation
    def pick_function(self):
        return self.rng.choices(self.functions, weights=self.weights)[0]

    def pick_role(self, f):
        rng = self.rng
        allowed = self.can.get(f.oid) or [self.superuser]
        if rng.random() < 0.15:
            return rng.choice(self.roles)
        others = [r for r in allowed if r != self.superuser]
        if others and rng.random() < 0.5:
            return rng.choice(others)
        return rng.choice(allowed)

    def call_sql(self, f, role, gen, table_hint=None):
        """SELECT ... of f with generated arguments; (sql, template key)."""
        rng = self.rng
        genrole = "superuser" if role == self.superuser else role
        table = table_hint
        if table is None:
            s = gen.snap
            table = rng.choice([t[0] for t in s["tables"]] + ["fz_unreg", "fz_owned2"]) \
                if s["tables"] else None
        # Column-name arguments are drawn from the columns of one table, so
        # that they fit the regclass argument often enough.
        args = [gen.value(t, n, f.name, genrole, table) for t, n in zip(f.argtypes, f.argnames)]
        labels = [a.label for a in args]
        n_required = f.nargs - (f.ndefaults or 0)
        style = rng.random()
        if f.ndefaults and style < 0.15 and all(f.argnames):
            # Named notation, some defaulted arguments left out, in any order.
            keep = list(range(n_required)) + [i for i in range(n_required, f.nargs)
                                              if rng.random() < 0.5]
            rng.shuffle(keep)
            parts = ["%s => %s" % (qi(f.argnames[i]) if not re.match(r"^[a-z_][a-z0-9_]*$",
                                                                     f.argnames[i])
                                   else f.argnames[i], args[i].sql) for i in keep]
            if rng.random() < 0.05:
                parts.append("bogus => 1")
            arglist = ", ".join(parts)
            labels = [labels[i] for i in sorted(keep)]
        elif f.ndefaults and style < 0.3:
            cut = rng.randint(n_required, f.nargs)
            arglist = ", ".join(a.sql for a in args[:cut])
            labels = labels[:cut]
        elif 0.30 <= style < 0.33 and f.nargs:
            # Too few or too many arguments: no such function.
            arglist = ", ".join(a.sql for a in args[:-1]) if rng.random() < 0.5 \
                else ", ".join([a.sql for a in args] + ["NULL"])
            labels = ["arity"]
        else:
            arglist = ", ".join(a.sql for a in args)
        name = "outbox.%s" % (f.name if re.match(r"^[a-z_][a-z0-9_]*$", f.name) else qi(f.name))
        from_form = f.retset or f.composite
        if rng.random() < 0.2 and not f.retset:
            from_form = not from_form
        if from_form:
            sql = "SELECT * FROM %s(%s)" % (name, arglist)
        else:
            sql = "SELECT %s(%s)" % (name, arglist)
        key = "%s(%s)" % (f.name, ",".join(labels))
        self.coarse[key] = "%s/%s" % (f.name, "with NULL" if "null" in labels else "no NULL")
        return sql, key

    def dml_sql(self, role, table=None, insert=False):
        """A write to an fz table: capture (capture_statement/truncate) at work."""
        rng = self.rng
        s = self.snap_tables
        table = table or rng.choice(["fz_plain", "fz_big", "fz_part", "fz_part_p1", "fz_ctl_text",
                            "fz_ctl_text", "fz_ctl_name", "fz_ctl_name", "fz_ctl_name",
                            "fz_ctl_fan", "fz_many", "fz_m1", "fz_m2", "fz_m3", "fz_unreg",
                            "fz_owned1", "fz_noid"])
        cols = s.get(table, [])
        ident = rng.choice([rng.randint(1, 500), rng.randint(-5, 5), INT4_MAX, INT4_MIN,
                            rng.randint(1000, 100000)])
        kind = rng.random() * (0.55 if insert else 1.0)
        kind_hint = "copy" if kind >= 0.93 else "sql"
        cellv = q(rng.choice(["cell_a", "cell_b", "cell_c", "nowhere", "", "c" * 70, "CELL_A",
                              "b_cell", "zz", "ü"] + self.gen.snap["cells"]))
        if rng.random() < 0.3 and kind_hint != "copy":
            cellv = rng.choice(["E'\\x01\\x12abcdefgh'", "E'\\x01\\x01ABCDEFGH'",
                                "E'\\x02xyz'", "E'\\x12\\x34\\x56\\x78'", "repeat('c', 63)"])
        values = {"id": str(ident), "org": str(rng.choice([0, 1, -1, 7, INT4_MAX])),
                  "user_id": str(rng.choice([0, 1, 2, -3])), "cell": cellv,
                  "label": q(rng.choice(["x", "", "ü", "boom", "a" * 5000])),
                  "secret": "'s'", "token": "'boom'", "note": "'n'", "x": "1"}
        if table == "fz_big" and rng.random() < 0.5:
            values["id"] = str(rng.choice([INT8_MAX - 2, INT8_MIN + 1, -2]))
        use = [c for c in cols if c in values]
        if not use:
            use = ["id"]
        n = rng.randint(1, 3)
        if kind < 0.55:
            rows = []
            for k in range(n):
                vals = [values[c] if c != "id" else str(int(values["id"]) + k
                                                        if abs(int(values["id"])) < 2**62 else
                                                        values["id"]) for c in use]
                rows.append("(%s)" % ", ".join(vals))
            conflict = rng.choice(["", "", " ON CONFLICT DO NOTHING",
                                   " ON CONFLICT (id) DO UPDATE SET id = excluded.id"])
            if table == "fz_noid":
                conflict = ""
            return "INSERT INTO %s (%s) VALUES %s%s" % (table, ", ".join(qi(c) for c in use),
                                                        ", ".join(rows), conflict), table, "insert"
        if kind < 0.8:
            col = rng.choice([c for c in use if c != "id"] or ["id"])
            return "UPDATE %s SET %s = %s" % (table, qi(col), values[col]), table, "update"
        if kind < 0.88:
            return "DELETE FROM %s" % table, table, "delete"
        if kind < 0.93:
            return "TRUNCATE %s" % table, table, "truncate"
        return ("COPY %s (%s) FROM STDIN" % (table, ", ".join(qi(c) for c in use)), table, "copy",
                "\n".join("\t".join(values[c].strip("'") if c != "id" else str(ident + k)
                                    for c in use) for k in range(n)) + "\n")

    def prelude(self, role):
        """SET LOCALs that change the paths a call takes."""
        rng = self.rng
        out = []
        if role == self.superuser and rng.random() < 0.25:
            out.append("SET LOCAL outbox.cursor_store = %s" % rng.choice(["'table'", "'redis'"]))
        if rng.random() < 0.12:
            key = rng.choice(["fz_plain", "fz_big", "fz_part", "fz_ctl_text", "fz_ctl_name",
                              "fz_many_key"])
            if rng.random() < 0.6:
                out.append("SET LOCAL \"outbox_replication.%s.replication_version\" = %s"
                           % (key, q(rng.choice(["2", "0", "-1", "abc", "1e30", "2147483648",
                                                 "3", " 4", "", "9" * 30]))))
            else:
                out.append("SET LOCAL \"outbox_replication.%s.backfill.target_cells\" = %s"
                           % (key, q(rng.choice(["[\"cell_a\"]", "[]", "null", "{", "1",
                                                 "[\"nowhere\", 1]"]))))
        if rng.random() < 0.05:
            out.append("SET LOCAL outbox.metrics_top_shards = %s"
                       % rng.choice(["0", "1", "2147483647", "-1"]))
        return out

    # ------------------------------------------------------------- running
    def run_statement(self, conn, who, sql, key, copy_data=None):
        """Runs one statement; returns (state, message, rows or None)."""
        cur = conn.cursor()
        self.set_current(conn, who, sql, key)
        self.current_main = (conn.fz_pid, time.time(), sql, 0, key)
        try:
            del conn.notices[:]
            if copy_data is not None:
                import io
                cur.copy_expert(sql, io.StringIO(copy_data))
                rows = None
            else:
                cur.execute(sql)
                rows = cur.fetchmany(50) if cur.description else None
            state, msg = "00000", ""
        except psycopg2.Error as e:
            rows = None
            if lost(conn, e):
                state, msg = "LOST", str(e).strip().split("\n")[0]
            else:
                state, msg = e.pgcode or "CLIENT", (e.diag.message_primary or str(e)).strip()
        # RecursionError: a jsonb result nested too deep for the json module.
        except (ValueError, UnicodeError, RecursionError) as e:
            state, msg, rows = "CLIENT", str(e), None
            self.stats.client_errors["%s: %s" % (short(sql, 100), short(str(e), 120))] += 1
        finally:
            self.current_main = None
        with self.pid_lock:
            owner = self.pid_owner.get(conn.fz_pid)
            self.last_txn = list(owner[3]) if owner and len(owner) > 3 else []
        for n in conn.notices:
            if n.startswith("WARNING"):
                self.stats.warnings[short(n.strip(), 160)] += 1
        return state, msg, rows, cur.description

    def record(self, role, fname, sql, key, state, msg, rows, desc, dml=False):
        st = self.stats
        st.calls += 1
        if dml:
            st.dml_calls += 1
        st.by_role[role] += 1
        if state == "00000":
            st.ok_by_role[role] += 1
        st.by_function[fname] += 1
        expected = state.startswith("XX") and any(fname == f and m in msg
                                                  for f, m in EXPECTED_INTERNAL)
        st.by_state[state + " (self-test)" if expected else state] += 1
        st.states_by_function[fname][state] += 1
        if state in self.args.show and len(st.examples[state]) < 8:
            st.examples[state].append("[%s] %s -> %s" % (role, short(sql, 200), short(msg, 150)))
        if role != self.superuser:
            st.states_by_function["%s [%s]" % (fname, role)][state] += 1
        if state == "00000" or (state not in SHALLOW and state not in ("LOST", "CLIENT")):
            st.deep_by_function[fname] += 1
        if state.startswith("XX"):
            table = st.expected_internal if expected else st.internal
            k = (state, re.sub(r"\d+", "N", re.sub(r"0x[0-9a-fA-F]+", "0x_", msg))[:200])
            if k in table:
                table[k][0] += 1
                table[k][4].add(fname)
            else:
                table[k] = [1, role, short(sql, 400), msg, {fname}, list(st.committed),
                            list(st.mutator_recent), list(getattr(self, "last_txn", []))]
        if state == "00000" and fname == "process_backfill_batch" and rows and desc:
            self.check_batch(role, sql, rows, desc)

    def check_batch(self, role, sql, rows, desc):
        """Sentry's BackfillBatch arithmetic, checked in exact integers."""
        names = [d.name for d in desc]
        if "low" not in names:
            return
        for row in rows:
            r = dict(zip(names, row))
            if r.get("low") is None:
                continue
            low, up, has_more, count = r["low"], r["up"], r["has_more"], r["count"]
            problems = []
            if count < 0:
                problems.append("count %d < 0" % count)
            if has_more and up < low:
                problems.append("has_more but up %d < low %d" % (up, low))
            if has_more and count != up - low + 1:
                problems.append("count %d != up - low + 1 = %d" % (count, up - low + 1))
            if has_more and up + 1 > INT8_MAX:
                problems.append("next cursor up + 1 = %d overflows bigint" % (up + 1))
            if r.get("rows_written") is not None and r["rows_written"] < 0:
                problems.append("rows_written < 0")
            if problems:
                k = "; ".join(re.sub(r"-?\d{6,}", "N", p) for p in problems)
                if k not in self.stats.suspicious:
                    self.stats.suspicious[k] = [0, role, short(sql, 300), "; ".join(problems),
                                                str(row)]
                self.stats.suspicious[k][0] += 1

    def transaction(self, n_left):
        """One transaction of one to three calls as one role; returns calls made."""
        rng = self.rng
        gen = self.gen
        is_dml = rng.random() < self.args.dml_share
        combo = None
        if is_dml:
            role = rng.choice([ROLE_APP, ROLE_APP, ROLE_APP, self.superuser, ROLE_OWNER])
        else:
            f = self.pick_function()
            role = self.pick_role(f)
            if role == self.superuser and rng.random() < 0.12:
                combo = self.combo(gen)
        calls = []   # (fname, sql, key, copy_data)
        if is_dml:
            d = self.dml_sql(role)
            calls.append(("capture:%s %s" % (d[2], d[1]), d[0], "dml:%s:%s" % (d[2], d[1]),
                          d[3] if len(d) > 3 else None))
        elif combo:
            calls.extend(combo)
        else:
            sql, key = self.call_sql(f, role, gen)
            calls.append((f.name, sql, key, None))
        pattern = rng.random()
        if pattern < 0.25 and n_left > len(calls) and not combo:
            f2 = self.pick_function()
            sql2, key2 = self.call_sql(f2, role, gen)
            calls.append((f2.name, sql2, key2, None))
        # Calls whose template crashed the server twice already are skipped.
        runnable = [c for c in calls if self.crash_keys[c[2]] < 2
                    and self.crash_keys[self.coarse.get(c[2], "")] < 3]
        self.stats.skipped_quarantine += len(calls) - len(runnable)
        if not runnable:
            return len(calls)
        calls = runnable
        if rng.random() < self.args.reconnect_share and role in self.conns:
            # A new session now and then: nothing cached, nothing prepared.
            try:
                self.conns.pop(role).close()
            except Exception:
                pass
        conn = self.conn(role)
        # A connection that died with the last crash fails at once: reconnect.
        try:
            self.set_current(conn, role, "BEGIN")
            conn.cursor().execute("BEGIN")
        except psycopg2.Error as e:
            if not lost(conn, e):
                raise
            self.reset_conns()
            conn = self.conn(role)
            self.set_current(conn, role, "BEGIN")
            conn.cursor().execute("BEGIN")
        aborted = False
        made = 0
        effective = []   # calls that succeeded and were not rolled back
        prelude = self.prelude(role) if not is_dml else []
        for p in prelude:
            state, msg, _, _ = self.run_statement(conn, role, p, "prelude")
            if state != "00000":
                self.stats.prelude_errors["%s %s" % (state, short(msg, 80))] += 1
                if state == "LOST":
                    return self.after_lost(role, p, msg, "prelude") or 1
                aborted = True
                break
        use_savepoints = pattern < 0.45 or len(calls) > 1
        for i, (fname, sql, key, copy_data) in enumerate(calls):
            if aborted:
                break
            if use_savepoints:
                st0, msg0, _, _ = self.run_statement(conn, role, "SAVEPOINT s%d" % i, "savepoint")
                if st0 == "LOST":
                    self.after_lost(role, "SAVEPOINT before " + sql, msg0, key)
                    return made
            t_call = time.time()
            state, msg, rows, desc = self.run_statement(conn, role, sql, key, copy_data)
            self.stats.time_by_function[fname] += time.time() - t_call
            made += 1
            if state == "LOST":
                self.record(role, fname, sql, key, state, msg, None, None, dml=is_dml)
                self.after_lost(role, sql, msg, key)
                return made
            self.record(role, fname, sql, key, state, msg, rows, desc, dml=is_dml)
            if state == "00000" and (fname in self.volatile or fname.startswith("capture:")
                                     or fname == "register_handler"):
                effective.append(short(sql, 200))
            elif state == "00000":
                effective.append(None)
            if use_savepoints:
                if state != "00000" or rng.random() < 0.4:
                    if state == "00000":
                        effective.pop()
                    st2, msg2, _, _ = self.run_statement(conn, role, "ROLLBACK TO s%d" % i, key)
                    if st2 == "LOST":
                        self.after_lost(role, "ROLLBACK TO after " + sql, msg2, key)
                        return made
                    if st2 != "00000":
                        aborted = True
                else:
                    self.run_statement(conn, role, "RELEASE s%d" % i, "savepoint")
            elif state != "00000":
                aborted = True
        effective = [e for e in effective if e]
        end = "ROLLBACK" if aborted or rng.random() < 0.45 else "COMMIT"
        state, msg, _, _ = self.run_statement(conn, role, end, calls[-1][2])
        if state == "LOST":
            self.after_lost(role, end + " after " + calls[-1][1], msg, calls[-1][2])
            return made
        if end == "COMMIT" and state == "00000" and effective:
            self.stats.committed.append("[%s] %s" % (role, " ; ".join(effective)))
        if state.startswith("XX"):
            self.record(role, "COMMIT", end + " after " + calls[-1][1], "commit", state, msg,
                        None, None)
        elif state != "00000":
            self.stats.by_state["commit:" + state] += 1
        # Still alive?
        state, msg, _, _ = self.run_statement(conn, role, "SELECT 1", "alive")
        if state == "LOST":
            self.after_lost(role, "SELECT 1 after " + calls[-1][1], msg, calls[-1][2])
        return made

    def after_lost(self, role, sql, msg, key):
        self.on_connection_lost(role, sql, msg)
        self.reset_conns()
        return 0

    def combo(self, gen):
        """Correlated calls on one table: a cursor or a gate set, then a batch."""
        rng = self.rng
        s = gen.snap
        if not s["tables"]:
            return None
        relname, oid, key, silo = rng.choice(s["tables"])
        tbl = rng.choice(["%d::oid::regclass" % oid, q(relname) + "::regclass"])
        batch = "SELECT * FROM outbox.process_backfill_batch(%s, %s, %s)" % (
            tbl, gen.integer("batch_size", 32).sql, rng.choice(["true", "false"]))
        first = rng.random()
        if first < 0.25 and relname in REGISTRATIONS:
            # A handler (any function the generator offers) for the table's
            # category, a write, then draining.
            category = REGISTRATIONS[relname][0]
            h = gen.regprocedure()
            d = self.dml_sql(self.superuser, table=relname, insert=True)
            return [("register_handler", "SELECT outbox.register_handler(%s, %s)" % (q(category), h.sql),
                     "combo:handler(%s)" % h.label, None),
                    ("capture:insert " + relname, d[0], "combo:dml:" + relname, None),
                    ("drain", rng.choice(["SELECT outbox.drain()", "SELECT outbox.drain('cell')",
                                          "SELECT outbox.drain('control')"]),
                     "combo:drain(%s)" % h.label, None)]
        if first < 0.6:
            lb = gen.integer("lower_bound", 64)
            ver = rng.choice(["1", "2", "3", "0", "2147483647"])
            head = ("set_processing_state",
                    "SELECT outbox.set_processing_state(%s, %s, %s)" % (q(key), lb.sql, ver),
                    "combo:sps(%s)" % lb.label)
        elif first < 0.85:
            head = ("set_option", "SELECT outbox.set_option(%s, %s)" % (
                q("outbox_replication.%s.%s" % (key, rng.choice(["replication_version",
                                                                   "backfill.target_cells"]))),
                gen.jsonb("value", "set_option").sql), "combo:set_option")
        else:
            head = ("_cursor_set", "SELECT outbox._cursor_set(%s, %s, %s)" % (
                q(key), gen.integer("lower_bound", 64).sql, gen.integer("version", 32).sql),
                "combo:_cursor_set")
        out = [head + (None,), ("process_backfill_batch", batch, "combo:batch:" + relname, None)]
        if rng.random() < 0.3:
            out.append(("process_backfill_batch", batch, "combo:batch2:" + relname, None))
        return out

    # --------------------------------------------------------------- main
    def run(self):
        t0 = time.time()
        self.setup()
        self.weights = [f.weight() for f in self.functions]
        self.volatile = {f.name for f in self.functions if f.volatile}
        self.gen = Generator(self.rng, self.pools)
        self.snap_tables = self.gen.snap["columns"]
        self.setup_seconds = time.time() - t0
        mutator = Mutator(self, self.args.seed + 1) if not self.args.no_mutator else None
        watchdog = Watchdog(self)
        watchdog.start()
        if mutator:
            mutator.start()
        deadline = t0 + self.args.duration
        made = 0
        n_tx = 0
        stopped = "budget"
        try:
            while made < self.args.calls:
                if time.time() > deadline:
                    stopped = "duration cap"
                    break
                if len(self.stats.crashes) >= self.args.max_crashes:
                    stopped = "crash cap"
                    break
                if n_tx % 25 == 0:
                    try:
                        self.pools.refresh(self.conn(self.superuser).cursor())
                    except psycopg2.Error as e:
                        if lost(self.conns.get(self.superuser), e):
                            self.after_lost(self.superuser, "pool refresh", str(e), None)
                    except (ValueError, UnicodeError) as e:
                        self.stats.client_errors["pool refresh: %s" % short(str(e), 120)] += 1
                    self.gen.refresh()
                    self.snap_tables = self.gen.snap["columns"]
                n_tx += 1
                try:
                    made += self.transaction(self.args.calls - made)
                except psycopg2.Error:
                    # Outside a call (BEGIN after a reconnect): rebuilt.
                    self.reset_conns()
                    self.collect_crashes()
        finally:
            if mutator:
                mutator.stop.set()
                mutator.join(10)
            watchdog.stop.set()
        self.elapsed = time.time() - t0
        self.stopped = stopped
        time.sleep(0.2)
        self.collect_crashes()
        self.final_checks()

    def final_checks(self):
        self.postmaster_restarted = None
        self.server_up = False
        try:
            c = self.server.connect(self.superuser, wait=30)
            cur = c.cursor()
            cur.execute("SELECT pg_postmaster_start_time(), (SELECT backend_start FROM "
                        "pg_stat_activity WHERE backend_type = 'checkpointer')")
            start, ckpt = cur.fetchone()
            self.server_up = True
            self.postmaster_restarted = start != self.start_time
            self.checkpointer_restarted = ckpt != self.checkpointer_start
            c.close()
        except psycopg2.Error as e:
            self.final_error = str(e)
            self.checkpointer_restarted = None

    # ------------------------------------------------------------ summary
    def summary(self):
        st = self.stats
        out = []
        p = out.append
        covered = [f for f in self.functions if st.by_function[f.name] > 0]
        deep = [f for f in self.functions if st.deep_by_function[f.name] > 0]
        missing = sorted(set(f.name for f in self.functions) - set(f.name for f in covered))
        shallow_calls = sum(v for k, v in st.by_state.items() if k in SHALLOW)
        p("%s pg_outbox %s, seed %d, %d calls (%d function calls, %d DML through capture) in "
          "%.1f s (setup %.1f s), stopped by %s"
          % (SECTION, self.extversion, self.args.seed, st.calls, st.calls - st.dml_calls,
             st.dml_calls, self.elapsed, self.setup_seconds, self.stopped))
        p("%s roles: %d (calls/succeeded: %s)" % (SECTION, len(st.by_role), ", ".join(
            "%s %d/%d" % (r, n, st.ok_by_role[r]) for r, n in st.by_role.most_common())))
        p("%s functions covered: %d/%d; past argument checks at least once: %d/%d%s"
          % (SECTION, len(covered), len(self.functions), len(deep), len(self.functions),
             "; not covered: " + ", ".join(missing) if missing else ""))
        not_deep = sorted(set(f.name for f in self.functions if not f.trigger) -
                          set(f.name for f in deep))
        if not_deep:
            p("%s never past argument checks: %s" % (SECTION, ", ".join(not_deep)))
        ok = st.by_state.get("00000", 0)
        p("%s succeeded %d (%.0f%%), failed in argument checks/casts/privileges %d (%.0f%%), "
          "failed further in %d (%.0f%%)"
          % (SECTION, ok, 100.0 * ok / max(1, st.calls), shallow_calls,
             100.0 * shallow_calls / max(1, st.calls),
             st.calls - ok - shallow_calls, 100.0 * (st.calls - ok - shallow_calls) / max(1, st.calls)))
        classes = collections.Counter()
        for k, v in st.by_state.items():
            if k.startswith("commit:"):
                continue
            classes[k[:2] if k not in ("LOST", "CLIENT") and "self-test" not in k else k] += v
        p("%s by SQLSTATE class: %s" % (SECTION, ", ".join(
            "%s %s %d" % (k, "(%s)" % SQLSTATE_CLASSES.get(k, "?") if k in SQLSTATE_CLASSES
                          else "", v) for k, v in sorted(classes.items()))))
        p("%s by SQLSTATE: %s" % (SECTION, ", ".join(
            "%s %d" % kv for kv in sorted(st.by_state.items()))))
        if st.warnings:
            p("%s WARNINGs: %d (%s)" % (SECTION, sum(st.warnings.values()), "; ".join(
                "%dx %s" % (v, k) for k, v in st.warnings.most_common(3))))
        if st.prelude_errors:
            p("%s SET LOCAL preludes refused: %s" % (SECTION, ", ".join(
                "%s %d" % kv for kv in st.prelude_errors.most_common(4))))
        p("%s mutator: %d operations (%s); refused: %s" % (
            SECTION, sum(st.mutator_ops.values()),
            ", ".join("%s %d" % kv for kv in st.mutator_ops.most_common()),
            ", ".join("%s %d" % kv for kv in st.mutator_errors.most_common()) or "none"))
        if st.setup_failures:
            p("%s setup statements that failed (tolerated): %d" % (SECTION, len(st.setup_failures)))
            for code, what in st.setup_failures[:12]:
                p("%s   %s %s" % (SECTION, code, what))
        if st.client_errors:
            p("%s client-side errors (e.g. results the client could not decode): %d" % (
                SECTION, sum(st.client_errors.values())))
            for k, v in st.client_errors.most_common(5):
                p("%s   %dx %s" % (SECTION, v, k))
        if self.pools.invalid_utf8:
            p("%s outbox rows whose cell_name is not valid UTF-8: e.g. %s" % (
                SECTION, ", ".join(repr(b) for b in sorted(self.pools.invalid_utf8)[:4])))
        n_crash = len(st.crashes)
        p("%s crashes: %d%s" % (SECTION, n_crash, "" if self.log.path else
                                " (no server log: counted from lost connections)"))
        for ev in st.crashes:
            p("%s   CRASH %s (PID %d, %s): %s" % (SECTION, ev["how"], ev["pid"], ev["who"],
                                                short(ev["call"] or ev["statement"], 400)))
            if ev.get("note"):
                p("%s     (%s)" % (SECTION, ev["note"]))
            if len(ev.get("txn") or []) > 1:
                p("%s     in the transaction: %s" % (SECTION, " ; ".join(ev["txn"])))
        if not self.log.path:
            own = [l for l in st.lost]
            for who, sql, msg in own:
                p("%s   connection lost (%s): %s -- %s" % (SECTION, who, sql, msg))
        elif st.lost:
            p("%s connections lost: %d (victims of the crashes above included)" %
              (SECTION, len(st.lost)))
        if st.skipped_quarantine:
            p("%s calls skipped (their template crashed twice): %d" % (SECTION, st.skipped_quarantine))
        if self.log.panics:
            p("%s PANIC/TRAP lines in the log: %d" % (SECTION, len(self.log.panics)))
            for line in self.log.panics[:5]:
                p("%s   %s" % (SECTION, short(line, 300)))
        n_int = sum(v[0] for v in st.internal.values())
        by_code = collections.Counter()
        for (state, _), v in st.internal.items():
            by_code[state] += v[0]
        p("%s internal errors (SQLSTATE XX): %d calls (%s), %d distinct messages" % (
            SECTION, n_int, ", ".join("%s %d" % kv for kv in sorted(by_code.items())) or "none",
            len(st.internal)))
        for (state, _), (count, role, sql, msg, fnames, before, mut, txn) in st.internal.items():
            p("%s   %s %s: %d calls of %d functions/statements (%s)"
              % (SECTION, state, json_str(msg), count, len(fnames),
                 ", ".join(sorted(fnames)[:6]) + (", ..." if len(fnames) > 6 else "")))
            p("%s     first, as %s: %s" % (SECTION, role, sql))
            if len(txn) > 2:
                p("%s     in the transaction: %s" % (SECTION, " ; ".join(txn)))
            for b in before[-3:]:
                p("%s     after the fuzzer committed: %s" % (SECTION, short(b, 300)))
            for b in mut:
                p("%s     after the mutator's %s" % (SECTION, b))
        for (state, _), (count, role, sql, msg, *_rest) in st.expected_internal.items():
            p("%s   expected (self-test, not counted): %s %s (%dx): %s"
              % (SECTION, state, json_str(msg), count, sql))
        p("%s hangs (cancelled by the watchdog): %d" % (SECTION, len(st.hangs)))
        for pid, sql, txn in st.hangs:
            p("%s   HANG (not cancelled by statement_timeout nor pg_cancel_backend) %s"
              % (SECTION, sql))
            p("%s     in the transaction: %s" % (SECTION, txn))
        if st.suspicious:
            p("%s suspicious results (reported only): %d distinct" % (SECTION, len(st.suspicious)))
            for k, (count, role, sql, problems, row) in st.suspicious.items():
                p("%s   %s (%dx), first: %s -> %s" % (SECTION, problems, count, sql, row))
        restarted = bool(self.postmaster_restarted) or bool(self.checkpointer_restarted) \
            or self.log.reinits > 0
        p("%s server: %s; postmaster start time %s; crash-restarts (reinitializing) in log: %d"
          % (SECTION, "up" if self.server_up else "DOWN",
             "changed" if self.postmaster_restarted else "unchanged", self.log.reinits))
        p("fuzz-result calls=%d roles=%d functions=%d/%d crashes=%d internal=%d hangs=%d "
          "restarts=%d postmaster_restarted=%d server_up=%d suspicious=%d"
          % (st.calls, len(st.by_role), len(covered), len(self.functions), n_crash, n_int,
             len(st.hangs), max(self.log.reinits, 1 if self.checkpointer_restarted else 0),
             1 if self.postmaster_restarted else 0, 1 if self.server_up else 0,
             len(st.suspicious)))
        fail = n_crash > 0 or st.hangs or restarted or not self.server_up or self.log.panics \
            or (n_int > 0 and not self.args.report_internal_only)
        p("%s slowest (total seconds): %s" % (SECTION, ", ".join(
            "%s %.1f" % (k, v) for k, v in st.time_by_function.most_common(5))))
        for state in self.args.show:
            for ex in st.examples.get(state, []):
                p("%s   %s e.g. %s" % (SECTION, state, ex))
        if self.args.per_function:
            for fname in sorted(st.states_by_function):
                p("%s   %-40s %s" % (SECTION, fname, ", ".join(
                    "%s %d" % kv for kv in st.states_by_function[fname].most_common())))
        p("%s reproduce: FUZZ_SEED=%d FUZZ_CALLS=%d" % (SECTION, self.args.seed, self.args.calls))
        return "\n".join(out), (1 if fail else 0)


def json_str(s):
    s = " ".join(s.split())
    return '"%s"' % (s if len(s) < 300 else s[:300] + "...")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    env = os.environ.get
    default_log = env("FUZZ_SERVER_LOG") or (
        os.path.join(env("CLUSTER_DIR"), "server.log") if env("CLUSTER_DIR") else None)
    ap.add_argument("--calls", type=int, default=int(env("FUZZ_CALLS", "3000")))
    ap.add_argument("--seed", type=int, default=int(env("FUZZ_SEED", "2")))
    ap.add_argument("--duration", type=float, default=float(env("FUZZ_DURATION", "50")),
                    help="stop making calls after this many seconds (setup included)")
    ap.add_argument("--server-log", default=default_log)
    ap.add_argument("--redis-host", default=env("REDIS_HOST", "127.0.0.1"))
    ap.add_argument("--redis-port", type=int, default=int(env("REDIS_PORT", "0")) or None)
    ap.add_argument("--statement-timeout", type=int, default=3000, help="milliseconds")
    ap.add_argument("--dml-share", type=float, default=0.12)
    ap.add_argument("--reconnect-share", type=float, default=0.03,
                    help="share of transactions that start on a new connection")
    ap.add_argument("--max-crashes", type=int, default=25,
                    help="stop once this many crashes were seen")
    ap.add_argument("--no-mutator", action="store_true")
    ap.add_argument("--show", action="append", default=[], metavar="SQLSTATE",
                    help="print a few calls that ended in this SQLSTATE (repeatable)")
    ap.add_argument("--per-function", action="store_true",
                    help="print the SQLSTATEs of every function's calls")
    ap.add_argument("--report-internal-only", action="store_true",
                    help="internal errors (SQLSTATE XX) do not fail the run")
    args = ap.parse_args()
    fuzz = Fuzzer(args)
    try:
        fuzz.run()
    except psycopg2.Error as e:
        print("fuzz: could not run: %s" % e, file=sys.stderr)
        print("fuzz-result calls=%d roles=0 functions=0/0 crashes=%d internal=0 hangs=0 "
              "restarts=0 postmaster_restarted=0 server_up=0 suspicious=0"
              % (fuzz.stats.calls, len(fuzz.stats.crashes)))
        return 2
    text, rc = fuzz.summary()
    print(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
