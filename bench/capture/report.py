#!/usr/bin/env python3
"""Markdown report for bench/capture/run.sh (standard library only).

Input: the raw TSV written by run.sh, one measurement a line:
    bulk     ROUND VARIANT insert|update|delete MILLISECONDS
    pgbench  ROUND VARIANT tps                  TPS
and a TSV of (outbox table, its partitioning, its index definitions).

Ratios to plain are computed per round (variant / plain of the same round,
which ran minutes apart at most, under the same noise) and the median of
those per-round ratios is reported, with their min-max.  That is more robust
on a noisy machine than median(variant) / median(plain).
"""
import argparse
import collections
import statistics
import sys

BULK_ORDER = ["plain", "pg_outbox", "plpgsql_row", "plpgsql_stmt", "plpgsql_row_sentry",
              "plpgsql_stmt_sentry", "heap_only", "pgq"]
OPS = ["insert", "update", "delete"]

DESCRIPTION = {
    "plain": "no capture",
    "pg_outbox": "outbox.register_table(): C++ row trigger into outbox.cell_outbox",
    "plpgsql_row": "PL/pgSQL row trigger into a copy of outbox.cell_outbox (same partitions and indexes)",
    "plpgsql_stmt": "PL/pgSQL statement triggers, transition tables, one INSERT ... SELECT "
                    "into a copy of outbox.cell_outbox (same partitions and indexes)",
    "plpgsql_row_sentry": "plpgsql_row into a Sentry-shaped outbox (3 btrees, not partitioned)",
    "plpgsql_stmt_sentry": "plpgsql_stmt into a Sentry-shaped outbox (3 btrees, not partitioned)",
    "heap_only": "plpgsql_stmt into one plain table, no index, no partitions (the floor)",
    "pgq": "PgQ 3 C trigger pgq.logutriga('bench') into the queue's event table",
}
OUTBOX_OF = {
    "pg_outbox": "cell_outbox",
    "plpgsql_row": "ob_row",
    "plpgsql_stmt": "ob_stmt",
    "plpgsql_row_sentry": "ob_row_sentry",
    "plpgsql_stmt_sentry": "ob_stmt_sentry",
    "heap_only": "ob_heap",
}


def ordered(variants, order):
    return [v for v in order if v in variants] + sorted(v for v in variants if v not in order)


def ratio_summary(values, baseline):
    """Per-round ratios values[r] / baseline[r]: (median, min, max)."""
    ratios = [values[r] / baseline[r] for r in values if r in baseline and baseline[r] > 0]
    if not ratios:
        return None
    return statistics.median(ratios), min(ratios), max(ratios)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("layout")
    ap.add_argument("--header", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--runs", type=int, required=True)
    ap.add_argument("--pgbench-seconds", type=int, required=True)
    ap.add_argument("--pgbench-rounds", type=int, required=True)
    ap.add_argument("--wall", type=int, required=True)
    args = ap.parse_args()

    # data[kind][(variant, op)][round] = value
    data = collections.defaultdict(lambda: collections.defaultdict(dict))
    with open(args.raw) as f:
        for line in f:
            kind, rnd, variant, op, value = line.rstrip("\n").split("\t")
            data[kind][(variant, op)][int(rnd)] = float(value)

    layout = {}
    with open(args.layout) as f:
        for line in f:
            rel, partitioning, indexes = line.rstrip("\n").split("\t")
            layout[rel] = (partitioning, indexes)

    out = []
    w = out.append
    w("# pg_outbox capture benchmark")
    w("")
    w(f"{args.header}")
    w("")
    w(f"`bash bench/capture/run.sh` with ROWS={args.rows} RUNS={args.runs} "
      f"PGBENCH_SECONDS={args.pgbench_seconds} PGBENCH_ROUNDS={args.pgbench_rounds}; "
      f"wall time {args.wall // 60} min {args.wall % 60} s.")
    w("")
    w("Throwaway cluster (test/harness/cluster.sh: fsync = off), shared_buffers = 1GB, "
      "max_wal_size = 4GB, checkpoint_timeout = 30min, autovacuum = off; "
      "synchronous_commit and everything else at defaults.")
    w("")

    # ---------------------------------------------------------------- bulk
    bulk = data.get("bulk", {})
    variants = ordered({v for v, _ in bulk}, BULK_ORDER)
    w(f"## Bulk statements, {args.rows} rows")
    w("")
    w(f"Source table `t (id bigint PRIMARY KEY, organization_id bigint NOT NULL, name text, "
      f"value int)`. insert: `INSERT INTO t SELECT g, g % 1000, 'name ' || g, g FROM "
      f"generate_series(1, {args.rows}) g`; update: `UPDATE t SET value = value + 1` "
      f"(shard unchanged: one outbox row per row); delete: `DELETE FROM t`. Each statement "
      f"is its own transaction, timed by psql `\\timing` (execution + commit), after "
      f"`VACUUM ANALYZE t; CHECKPOINT`. Fresh table and empty outbox for every run; "
      f"variants interleaved round-robin (rotating start) over {args.runs} rounds.")
    w("")
    w("ms = median over the rounds; x plain = median of the per-round ratios "
      "variant / plain (min-max of those ratios in brackets).")
    w("")
    head = "| variant |"
    rule = "|---|"
    for op in OPS:
        head += f" {op} ms | {op} x plain |"
        rule += "---:|---:|"
    w(head)
    w(rule)
    for v in variants:
        row = f"| {v} |"
        for op in OPS:
            vals = bulk.get((v, op), {})
            if not vals:
                row += " - | - |"
                continue
            med = statistics.median(vals.values())
            rs = ratio_summary(vals, bulk.get(("plain", op), {}))
            if v == "plain" or rs is None:
                row += f" {med:.0f} | 1.00 |" if v == "plain" else f" {med:.0f} | - |"
            else:
                row += f" {med:.0f} | {rs[0]:.2f} ({rs[1]:.2f}-{rs[2]:.2f}) |"
        w(row)
    w("")

    # ------------------------------------------------------------- pgbench
    pgb = data.get("pgbench", {})
    if pgb:
        pvariants = ordered({v for v, _ in pgb}, BULK_ORDER)
        w(f"## pgbench: single-row inserts, 2 clients")
        w("")
        w(f"`pgbench -n -c 2 -j 2 -T {args.pgbench_seconds}`, one transaction = "
          f"`INSERT INTO t VALUES (nextval(seq), random(0, 999), 'name', 1)`; fresh table "
          f"and empty outbox per run, {args.pgbench_rounds} interleaved rounds. "
          f"TPS = median; TPS / plain and time x plain (= plain TPS / TPS, comparable to "
          f"the bulk ratios) are medians of per-round ratios.")
        w("")
        w("| variant | TPS | TPS / plain | time x plain |")
        w("|---|---:|---:|---:|")
        base = pgb.get(("plain", "tps"), {})
        for v in pvariants:
            vals = pgb[(v, "tps")]
            med = statistics.median(vals.values())
            if v == "plain":
                w(f"| {v} | {med:.0f} | 1.00 | 1.00 |")
                continue
            rel = ratio_summary(vals, base)
            cost = ratio_summary(base, vals)
            if rel is None:
                w(f"| {v} | {med:.0f} | - | - |")
            else:
                w(f"| {v} | {med:.0f} | {rel[0]:.2f} ({rel[1]:.2f}-{rel[2]:.2f}) "
                  f"| {cost[0]:.2f} ({cost[1]:.2f}-{cost[2]:.2f}) |")
        w("")

    # ------------------------------------------------------------ variants
    w("## Variants")
    w("")
    w("| variant | what | outbox partitioning | outbox indexes |")
    w("|---|---|---|---|")
    pgq_rel = next((r for r in layout if r.startswith("event_")), None)
    for v in variants:
        rel = OUTBOX_OF.get(v, pgq_rel if v == "pgq" else None)
        partitioning, idx = layout.get(rel, ("-", "-"))
        idx = idx.replace("|", "\\|")  # Markdown table cell
        w(f"| {v} | {DESCRIPTION.get(v, '')} | {partitioning} | {idx} |")
    w("")
    w("Raw timings: bench/capture/results_raw.tsv.")
    print("\n".join(out))


if __name__ == "__main__":
    sys.exit(main())
