#!/usr/bin/env python3
"""Pictures of the benchmarks' results, one PNG beside each results file.

    /usr/bin/python3 bench/plot.py KIND [RESULTS_DIR]
    /usr/bin/python3 bench/plot.py all

KIND is capture, drain, latency or backfill_guard; RESULTS_DIR defaults to
bench/KIND.  Each benchmark's script calls this at its end; run alone, it
redraws from the files the last run left.  Needs Debian's
python3-matplotlib (hence /usr/bin/python3, not a pyenv or venv python3).

Reads only what the scripts write:
    capture         results_raw.tsv (per-round timings), results.md (header)
    drain           depth.md (its table)
    latency         lags.tsv (histogram of the lags), results.md (header)
    backfill_guard  depth.tsv and lag.tsv (time series), results.md (header)
"""
import collections
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402
from PIL import Image  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))
SIZE = (9, 5)  # inches, at DPI: 900 x 500 px
DPI = 100


def provenance(md):
    """The run's date and machine: the results file's first line after its
    title, without the command (the part in backquotes) and the package
    suffix of the server's version."""
    with open(md) as f:
        lines = [line.strip() for line in f if line.strip()]
    fields = [p.strip() for p in lines[1].split(" | ")]
    fields = [p for p in fields if not p.startswith("`")]
    return " | ".join(p.split(" (Debian")[0] for p in fields)


def save(fig, path):
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    # A palette of 64 colours loses nothing a chart shows and makes the file
    # about a third of its RGBA size (Pillow comes with matplotlib).
    Image.open(path).convert("RGB").quantize(colors=64).save(path, optimize=True)
    print(f"wrote {path}")


def thousands(x, _pos=None):
    return f"{x:,.0f}" if x >= 1 else f"{x:g}"


def md_table(md):
    """The first Markdown table of a file: a list of dicts by header."""
    with open(md) as f:
        rows = [line.strip() for line in f if line.strip().startswith("|")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in r.strip("|").split("|")))) for r in rows[2:]]


# ----------------------------------------------------------------- capture
CAPTURE_VARIANTS = ["pg_outbox", "plpgsql_stmt", "heap_only", "plpgsql_row",
                    "plpgsql_stmt_sentry", "plpgsql_row_sentry", "pgq"]
CAPTURE_LABELS = {
    "pg_outbox": "pg_outbox (C++ row trigger)",
    "plpgsql_stmt": "PL/pgSQL statement trigger",
    "heap_only": "PL/pgSQL statement trigger, one unindexed heap (floor)",
    "plpgsql_row": "PL/pgSQL row trigger",
    "plpgsql_stmt_sentry": "PL/pgSQL statement trigger, Sentry-shaped outbox",
    "plpgsql_row_sentry": "PL/pgSQL row trigger, Sentry-shaped outbox",
    "pgq": "PgQ pgq.logutriga",
}


def plot_capture(d):
    # value[(kind, variant, op)][round]
    value = collections.defaultdict(dict)
    with open(os.path.join(d, "results_raw.tsv")) as f:
        for line in f:
            kind, rnd, variant, op, v = line.rstrip("\n").split("\t")
            value[(kind, variant, op)][int(rnd)] = float(v)

    def cost(kind, variant, op):
        """Median, min, max of the per-round time ratios to plain (as
        results.md computes them); pgbench gives TPS, so plain / variant."""
        mine, base = value.get((kind, variant, op)), value.get((kind, "plain", op))
        if not mine or not base:
            return None
        if kind == "pgbench":
            r = [base[k] / mine[k] for k in mine if k in base]
        else:
            r = [mine[k] / base[k] for k in mine if k in base]
        return statistics.median(r), min(r), max(r)

    groups = [("bulk", "insert", "INSERT ... SELECT"), ("bulk", "update", "UPDATE"),
              ("bulk", "delete", "DELETE"), ("pgbench", "tps", "single-row INSERTs\n(pgbench, 2 clients)")]
    colors = dict(zip(CAPTURE_VARIANTS, plt.get_cmap("tab10").colors))
    fig, ax = plt.subplots(figsize=SIZE)
    width = 0.8 / len(CAPTURE_VARIANTS)
    drawn = set()
    for g, (kind, op, _) in enumerate(groups):
        present = [v for v in CAPTURE_VARIANTS if cost(kind, v, op)]
        for i, v in enumerate(present):
            med, lo, hi = cost(kind, v, op)
            x = g + (i - (len(present) - 1) / 2) * width
            ax.bar(x, med, width, color=colors[v], label=None if v in drawn else CAPTURE_LABELS[v],
                   yerr=[[med - lo], [hi - med]], error_kw={"elinewidth": 0.8, "capsize": 2})
            drawn.add(v)
            if v == "pg_outbox":
                ax.annotate(f"{med:.2f}", (x, hi), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=8)
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_yticks([1, 1.5, 2, 3, 5, 10, 20, 50])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: ""))
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_ylabel("time / time without capture (log scale)")
    ax.set_xticks(range(len(groups)), [g[2] for g in groups])
    with open(os.path.join(d, "results.md")) as f:
        rows = re.search(r"ROWS=(\d+)", f.read()).group(1)
    ax.set_xlabel(f"bulk statements of {int(rows):,} rows, each its own transaction; "
                  "single-row INSERT transactions")
    ax.set_title("Capture: cost of each variant relative to no capture "
                 "(median of rounds, bars: min-max)\n" + provenance(os.path.join(d, "results.md")),
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    ax.set_ylim(0.8, 250)  # room above the bars for the legend
    fig.tight_layout()
    save(fig, os.path.join(d, "capture.png"))


# ------------------------------------------------------------------- drain
def plot_drain(d):
    md = os.path.join(d, "depth.md")
    rows = md_table(md)
    backlog = [int(r["backlog"]) for r in rows]
    fig, ax = plt.subplots(figsize=SIZE)
    for col, label, style in [("drain() rows/s", "outbox.drain() in a loop", "o-"),
                              ("worker rows/s", "the worker", "s-"),
                              ("PgQ events/s", "PgQ consumer (events/s)", "^--")]:
        ax.plot(backlog, [int(r[col]) for r in rows], style, label=label)
    with open(md) as f:
        hot = re.search(r"Hot shard: (\d+) rows in one shard.*\((\d+) rows/s\)", f.read())
    if hot:
        ax.plot([int(hot.group(1))], [int(hot.group(2))], "D", color="tab:orange", fillstyle="none",
                markersize=8, label=f"the worker, {int(hot.group(1)):,} rows in one shard")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(thousands))
    ax.yaxis.set_major_formatter(FuncFormatter(thousands))
    ax.set_xticks(backlog, [f"{b:,}\n{int(r['shards']):,} shards" for b, r in zip(backlog, rows)])
    ax.set_xlabel("backlog when the drain starts (rows, log scale); PgQ: as many events in one queue")
    ax.set_ylabel("rows delivered a second")
    ax.set_ylim(0, None)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left")
    ax.set_title("Drain rate against backlog depth, no-op handler, distinct objects; "
                 "PgQ at the same depths\n" + provenance(md), fontsize=10)
    fig.tight_layout()
    save(fig, os.path.join(d, "depth.png"))


# ----------------------------------------------------------------- latency
def plot_latency(d):
    # hist[(rate, wake)][bin] = count; a lag of ms milliseconds is in bin k
    # when 10^(k/BINS) <= ms < 10^((k+1)/BINS) (run.sh's SQL).
    bins_per_decade = 50
    hist = collections.defaultdict(dict)
    with open(os.path.join(d, "lags.tsv")) as f:
        for line in f:
            if line.startswith("#"):
                continue
            rate, wake, k, n = line.rstrip("\n").split("\t")
            hist[(int(rate), wake)][int(k)] = int(n)
    fig, ax = plt.subplots(figsize=SIZE)
    styles = {"on": "-", "off": "--"}
    colors = {1000: "tab:blue", 5000: "tab:red"}
    for (rate, wake), h in sorted(hist.items(), key=lambda kv: (kv[0][0], kv[0][1] == "off")):
        total = sum(h.values())
        xs, ys, seen = [], [], 0
        for k in sorted(h):
            seen += h[k]
            xs.append(10 ** ((k + 1) / bins_per_decade))  # every lag in bin k is below this
            ys.append(seen / total)
        what = "woken by commits" if wake == "on" else "wake_on_commit = off"
        ax.step([10 ** (min(h) / bins_per_decade)] + xs, [0] + ys, where="post",
                linestyle=styles[wake], color=colors[rate],
                label=f"{rate:,} tx/s, {what} ({total:,} messages)")
    ax.axhline(0.99, color="gray", linewidth=0.8, linestyle=":")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlabel("commit to handler (ms, log scale); dotted line: 99% delivered; "
                  "wake_on_commit = off: a pass per naptime (1 s)")
    ax.set_ylabel("fraction of messages delivered within")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Delivery lag, commit to an in-database handler, at the default settings\n"
                 + provenance(os.path.join(d, "results.md")), fontsize=10)
    fig.tight_layout()
    save(fig, os.path.join(d, "lags.png"))


# ---------------------------------------------------------- backfill guard
def plot_backfill_guard(d):
    def series(name):
        out = collections.defaultdict(lambda: ([], []))
        with open(os.path.join(d, name)) as f:
            for line in f:
                if line.startswith("#"):
                    continue
                guard, t, v = line.rstrip("\n").split("\t")
                out[guard][0].append(float(t))
                out[guard][1].append(float(v))
        return out

    depth, lag = series("depth.tsv"), series("lag.tsv")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=SIZE, sharex=True)
    for guard in sorted(depth, key=lambda g: g != "0"):
        label = ("without the guard" if guard == "0"
                 else f"outbox.backfill_max_shard_depth = {int(guard):,}")
        color = "tab:red" if guard == "0" else "tab:blue"
        top.plot(*depth[guard], ".-", markersize=3, linewidth=1, color=color, label=label)
        bottom.plot(*lag[guard], ".", markersize=2, color=color, label=label)
        if guard != "0":
            top.axhline(int(guard), color=color, linewidth=0.6, linestyle="--")
    # symlog: an empty shard (0) stays on the axis.
    top.set_yscale("symlog", linthresh=1)
    top.set_ylim(0, 3 * max(max(v) for _, v in depth.values()))
    top.yaxis.set_major_formatter(FuncFormatter(thousands))
    top.set_ylabel("rows in the hot shard\n(log scale)")
    top.legend(fontsize=8, loc="upper right")
    bottom.set_yscale("log")
    bottom.yaxis.set_major_formatter(FuncFormatter(thousands))
    bottom.set_ylabel("live change's lag\n(ms, log scale)")
    bottom.set_xlabel("seconds since the backfill's gate opened (depth: sampled every 0.1-0.2 s; "
                      "live changes: when made)")
    for ax in (top, bottom):
        ax.grid(True, which="major", alpha=0.3)
    top.set_title("Hot-shard guard: a backfill of half its rows into one shard, live writes "
                  "to that shard every 20 ms\n" + provenance(os.path.join(d, "results.md")),
                  fontsize=10)
    fig.tight_layout()
    save(fig, os.path.join(d, "depth.png"))


KINDS = {"capture": plot_capture, "drain": plot_drain, "latency": plot_latency,
         "backfill_guard": plot_backfill_guard}


def main(argv):
    if len(argv) not in (2, 3) or argv[1] not in list(KINDS) + ["all"]:
        sys.exit(f"usage: {argv[0]} {'|'.join(KINDS)}|all [RESULTS_DIR]")
    kinds = list(KINDS) if argv[1] == "all" else [argv[1]]
    for kind in kinds:
        KINDS[kind](argv[2] if len(argv) == 3 else os.path.join(BENCH, kind))


if __name__ == "__main__":
    main(sys.argv)
