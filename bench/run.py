"""Benchmarks: what the fence costs, against stock dbt-spark, in one process and one Spark JVM.

    python -m bench.run --size ci                  # the smaller size; parts 1 and 8 alone 26 min
    python -m bench.run --size full                # 100k and 2M rows; well over an hour
    python -m bench.run --size ci --only jobs --no-write

Writes docs/benchmarks.md and docs/benchmarks.png (unless --no-write) and the raw figures as
JSON in the work directory. Parts: pairs (stock vs fenced, A B A B on the session; then stock
and fenced over Thrift and fenced over Connect), history (capture and verify against history
length), jobs (Spark jobs per run: session, Thrift, Connect), contention (K runs at once on
one row and on disjoint partitions, stock's and fenced's in turn), partitions, build, sizing,
nodes (four models in one run over the servers: Connect's kept sessions), start (time to the
first node of a one-model run: warm, cold, a second venv). Stock dbt-spark has
no Connect method: fenced over Connect is compared with stock over Thrift, on the same server
build.
"""

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

from bench import (
    build,
    contention,
    history,
    jobs,
    nodes,
    pairs,
    partitions,
    report,
    sizing,
    start,
)
from bench.lakehouse import REPO, Lakehouse

PARTS = (
    "pairs",
    "history",
    "jobs",
    "contention",
    "partitions",
    "build",
    "sizing",
    "nodes",
    "start",
)
DOCS_MD = os.path.join(REPO, "docs", "benchmarks.md")


# Part 5's writers: two replace_where, two self-reading appends, with fence_retries 3.
PARTITION_WRITERS = 4


@dataclass(frozen=True)
class Size:
    pair_rows: tuple[int, ...]
    pairs: int
    warmup: int
    # Part 1 over the servers: stock and fenced over Thrift, fenced over Connect, at each size;
    # then the long write over Thrift at the smallest (bench.pairs.run).
    server_rows: tuple[int, ...]
    server_pairs: int
    history_commits: tuple[int, ...]
    history_reps: int
    jobs_rows: int
    jobs_runs: int
    # Part 4: K runs at once, stock's and fenced's taking turns, this many rounds of each.
    threads: tuple[int, ...]
    contention_rounds: int
    # Part 5: each writer's batches and their rows.
    batches_per_thread: int
    batch_rows: int
    # Part 4's fenced runs: the contention tests' and the README's budget.
    fence_retries: int
    # Part 6: rounds of the three cold `dbt build`s.
    build_rounds: int
    # Part 7: a 1% MERGE into a table this big, sized session against Spark's defaults.
    sizing_rows: int = 2_000_000
    sizing_pairs: int = 5
    # Part 9: rounds of stock's and fenced's starts, per kind of start (bench/start.py).
    start_rounds: dict[str, int] = field(
        default_factory=lambda: {"warm": 5, "cold": 1, "second venv": 3}
    )


SIZES = {
    "ci": Size(
        pair_rows=(100_000,),
        pairs=15,
        warmup=1,
        server_rows=(100_000,),
        # Three runs per batch over Thrift (two stocks, fenced), two over Connect (stock, fenced).
        # Single pairs spread 0.7-1.3 around a ratio near 1.0: 5 pairs left its interval 0.4
        # wide. A multiple of 6: whole cycles of the orders of three runs and of two
        # (pairs.carryover_balanced); part 8's five runs cycle in 10, so two of its orders come
        # once more than the rest.
        server_pairs=12,
        history_commits=(10, 1_000, 10_000),
        history_reps=3,
        jobs_rows=10_000,
        jobs_runs=1,
        threads=(2, 4, 8),
        contention_rounds=2,
        batches_per_thread=2,
        batch_rows=1_000,
        fence_retries=20,
        build_rounds=3,
    ),
    "full": Size(
        pair_rows=(100_000, 2_000_000),
        pairs=15,
        warmup=1,
        server_rows=(100_000, 2_000_000),
        server_pairs=24,  # whole cycles, as at ci
        history_commits=(10, 1_000, 10_000),
        history_reps=15,
        jobs_rows=100_000,
        jobs_runs=2,
        threads=(2, 4, 8),
        contention_rounds=4,
        batches_per_thread=5,
        batch_rows=10_000,
        fence_retries=20,
        build_rounds=7,
        start_rounds={"warm": 9, "cold": 2, "second venv": 5},
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=list(SIZES), default="ci")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated parts: {','.join(PARTS)}"
    )
    parser.add_argument(
        "--no-servers",
        "--no-thrift",
        dest="no_servers",
        action="store_true",
        help="pairs and jobs: the session only (no Thrift or Connect server)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--command", default=None, help="the command line the docs name")
    parser.add_argument("--workdir", default=os.path.join(REPO, ".cache", "bench"))
    parser.add_argument(
        "--redraw", action="store_true", help="rewrite docs/ from the last run's results.json"
    )
    args = parser.parse_args(argv)
    raw = os.path.join(args.workdir, "results.json")
    if args.redraw:
        return publish(report.Results.load(raw), raw, args.no_write)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    size = SIZES[args.size]
    command = args.command or f"python -m bench.run --size {args.size}" + (
        f" --only {','.join(parts)}" if set(parts) != set(PARTS) else ""
    )

    # A fresh lakehouse: the embedded metastore (Derby) and the tables start empty.
    for sub in ("lakehouse", "target", "thrift", "connect", "logs", "build", "start"):
        shutil.rmtree(os.path.join(args.workdir, sub), ignore_errors=True)
    os.makedirs(args.workdir, exist_ok=True)
    results = report.Results(args.size, command, report.machine_line(), report.now())
    started = time.monotonic()
    if "build" in parts:
        # First, before this process starts a JVM of its own: each build starts its own.
        print("6. a small project's dbt build from a cold start", flush=True)
        jars = Lakehouse.jars_cache()
        results.build = build.run(args.workdir, size.build_rounds, jars)
    if "start" in parts:
        print("9. time to the first node: warm, cold, a second venv", flush=True)
        results.start = start.run(args.workdir, size.start_rounds, Lakehouse.jars_cache())
    if set(parts) <= {"build", "start"}:
        return finish(results, parts, raw, args.no_write, started)
    house = Lakehouse(args.workdir)
    try:
        if "pairs" in parts:
            print("1. stock vs fenced, A B A B; then over Thrift and Connect", flush=True)
            servers = None if args.no_servers else (size.server_rows, size.server_pairs)
            results.pairs = pairs.run(house, size.pair_rows, size.pairs, size.warmup, servers)
        if "history" in parts:
            print("2. history length", flush=True)
            results.history = history.run(house, size.history_commits, size.history_reps)
        if "jobs" in parts:
            print("3. Spark jobs per model run", flush=True)
            results.jobs = jobs.run(house, size.jobs_rows, size.jobs_runs, not args.no_servers)
        if "contention" in parts:
            print("4. contention", flush=True)
            results.contention = contention.run(
                house, size.threads, size.contention_rounds, size.fence_retries
            )
        if "sizing" in parts:
            print("7. the session's sizing on a big merge", flush=True)
            results.sizing = [
                sizing.run(house, size.sizing_rows, size.sizing_rows // 100, size.sizing_pairs)
            ]
        if "nodes" in parts and not args.no_servers:
            print("8. four models in one run over the servers", flush=True)
            results.nodes = [
                nodes.run(house, min(size.server_rows), size.server_pairs, size.warmup)
            ]
        if "partitions" in parts:
            print("5. writers on disjoint partitions, with a compaction job", flush=True)
            results.partitions = partitions.run(
                house, PARTITION_WRITERS, size.batches_per_thread + 1, size.batch_rows, 3
            )
    finally:
        house.close()
    return finish(results, parts, raw, args.no_write, started)


def finish(
    results: report.Results, parts: list[str], raw: str, no_write: bool, started: float
) -> int:
    results.seconds = time.monotonic() - started
    print(f"This run took {results.seconds / 60:.1f} min", flush=True)
    if set(parts) != set(PARTS) and os.path.exists(raw):
        # A run of some parts keeps the last run's other parts, each with its own command.
        results = report.merged(report.Results.load(raw), results, parts)
    elif set(parts) != set(PARTS) and os.path.exists(DOCS_MD):
        # The last run's raw figures are gone (a fresh clone): its other parts stay as
        # docs/benchmarks.md published them, verbatim, until a run measures them again.
        with open(DOCS_MD) as f:
            results.kept = report.published(f.read(), parts)
        if results.kept:
            print(f"kept as published in docs/benchmarks.md: {', '.join(results.kept)}")
    with open(raw, "w") as f:
        json.dump(dataclasses.asdict(results), f, indent=1, default=str)
    return publish(results, raw, no_write)


def publish(results: report.Results, raw: str, no_write: bool) -> int:
    text = report.markdown(results)
    print("\n" + text)
    print(f"Raw figures in {raw}")
    if not no_write:
        with open(DOCS_MD, "w") as f:
            f.write(text)
        png = os.path.join(REPO, "docs", "benchmarks.png")
        # A run of parts the picture does not draw leaves it as the run that drew it.
        if any(getattr(results, part) for part in report.PICTURED) or not os.path.exists(png):
            report.picture(results, png)
            print("wrote docs/benchmarks.md and docs/benchmarks.png")
        else:
            print("wrote docs/benchmarks.md (docs/benchmarks.png draws none of these parts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
