"""docs/benchmarks.md and docs/benchmarks.png from one run's results."""

import dataclasses
import datetime
import json
import math
import os
import platform
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

from bench.build import TARGETS, Build
from bench.build import summary as build_summary
from bench.contention import MODES as CONTENTION_MODES
from bench.contention import PHASES, WORKLOADS, Contention
from bench.history import HistoryResult
from bench.jobs import FENCE_ONLY, Count, Run
from bench.lakehouse import rows_label
from bench.nodes import KEPT_AND_NEW as NODE_KEPT_AND_NEW
from bench.nodes import RUNS as NODE_RUNS
from bench.nodes import STOCK as NODE_STOCK
from bench.nodes import Nodes, NodesRun
from bench.pairs import (
    FENCE_KINDS,
    LOG_READS,
    LONG_WRITE_BUSY_S,
    RESAMPLES,
    SERVER_METHODS,
    SERVER_TARGETS,
    TARGET_DESCRIBE,
    Pair,
    Series,
    median_interval,
)
from bench.partitions import Partitions
from bench.sizing import DEFAULTS as SPARK_DEFAULTS
from bench.sizing import Sizing
from bench.start import Start
from bench.start import section as start_section
from bench.start import target_row as start_target

TARGET_RATIO = 1.05  # fenced/stock, merge at 2M rows
LONG_POLL_S = 5  # the Spark Thrift Server's hive.server2.long.polling.timeout, by default


@dataclass
class Results:
    size: str
    command: str
    machine: str
    started: str
    seconds: float = 0.0
    pairs: list[Series] = field(default_factory=list)
    history: list[HistoryResult] = field(default_factory=list)
    jobs: list[Count] = field(default_factory=list)
    contention: list[Contention] = field(default_factory=list)
    partitions: list[Partitions] = field(default_factory=list)
    build: list[Build] = field(default_factory=list)
    sizing: list[Sizing] = field(default_factory=list)
    nodes: list[Nodes] = field(default_factory=list)
    start: list[Start] = field(default_factory=list)
    # Parts measured by another run than the header's (`--only`): part -> "`command` on date".
    measured_apart: dict[str, str] = field(default_factory=dict)
    # The measuring machine's, not the one that redraws the docs.
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    # Parts whose raw figures are gone, as docs/benchmarks.md published them (`published`):
    # part -> its "section", its "targets" rows and its "where" bullets, kept verbatim.
    kept: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> "Results":
        """A run's raw results.json, to redraw the docs without measuring again."""
        with open(path) as f:
            data = json.load(f)

        def series(s: dict) -> Series:
            pairs = {k: [Pair(**p) for p in s[k]] for k in ("pairs", "warmup")}
            return Series(**{**s, **pairs})

        return cls(
            # Runs before `cores` was recorded redraw with this machine's count.
            **{
                k: data[k]
                for k in ("size", "command", "machine", "started", "seconds", "cores")
                if k in data
            },
            pairs=[series(s) for s in data["pairs"]],
            history=[HistoryResult(**h) for h in data["history"]],
            jobs=[Count(**{**c, "runs": [Run(**r) for r in c["runs"]]}) for c in data["jobs"]],
            # Runs before 2026-12-01 raced appenders (batches): another part, not redrawn.
            contention=[Contention(**c) for c in data["contention"] if "workload" in c],
            partitions=[Partitions(**p) for p in data.get("partitions", [])],
            build=[Build(**b) for b in data.get("build", [])],
            sizing=[Sizing(**z) for z in data.get("sizing", [])],
            nodes=[
                Nodes(
                    **{
                        **n,
                        **{k: [NodesRun(**x) for x in n[k]] for k in ("runs", "warmup")},
                    }
                )
                for n in data.get("nodes", [])
            ],
            start=[Start(**s) for s in data.get("start", [])],
            measured_apart=data.get("measured_apart", {}),
            kept=data.get("kept", {}),
        )


def merged(last: Results, new: Results, parts: list[str]) -> Results:
    """The last run's results with `parts` replaced by a run of those parts alone."""
    out = dataclasses.replace(
        last, measured_apart=dict(last.measured_apart), kept={**last.kept, **new.kept}
    )
    for part in parts:
        setattr(out, part, getattr(new, part))
        out.measured_apart[part] = f"`{new.command}` on {new.started} ({new.seconds / 60:.1f} min)"
        out.kept.pop(part, None)
    return out


# Each part's number: its heading's in docs/benchmarks.md ("## 4. ...").
PART_NUMBERS = {
    "pairs": 1,
    "history": 2,
    "jobs": 3,
    "contention": 4,
    "partitions": 5,
    "build": 6,
    "sizing": 7,
    "nodes": 8,
    "start": 9,
}
# The part a row of the targets table belongs to, by how `_targets` begins it.
TARGET_PARTS = (
    ("| median fenced/stock", "pairs"),
    ("| the fence's own time", "pairs"),
    ("| vB capture + verify", "history"),
    ("| zero extra Spark jobs", "jobs"),
    ("| extra Spark jobs", "jobs"),
    ("| contention:", "contention"),
    ("| partitions:", "partitions"),
    ("| small project's", "build"),
    ("| the session's sizing", "sizing"),
    ("| time to the first node", "start"),
)
# The part a bullet of "Where the fence's cost comes from" belongs to (`_where`).
WHERE_PARTS = (
    ("- **Spark jobs.**", "jobs"),
    ("- **History length", "history"),
    ("- **Contention.**", "contention"),
)
WHERE_HEADING = "## Where the fence's cost comes from"


def _part_of(line: str, prefixes: tuple[tuple[str, str], ...]) -> str | None:
    return next((part for prefix, part in prefixes if line.startswith(prefix)), None)


def published(text: str, parts: list[str]) -> dict[str, dict[str, list[str]]]:
    """What docs/benchmarks.md (`text`) publishes of the parts other than `parts`, verbatim: for a
    run of some parts when the last run's raw figures are gone (a fresh clone), so that the
    parts it did not measure stay as they were published. A section the header's own run
    measured is given its "Measured apart" line, naming that run."""
    lines = text.splitlines()
    header = re.search(r"Generated by (`[^`]*`) on ([^(]*?) \(size `[^`]*`, ([\d.]+ min)\)", text)
    apart = f"{header.group(1)} on {header.group(2)} ({header.group(3)})" if header else None
    numbers = {n: part for part, n in PART_NUMBERS.items()}
    kept: dict[str, dict[str, list[str]]] = {}

    def of(part: str | None) -> dict[str, list[str]] | None:
        if part is None or part in parts:
            return None
        return kept.setdefault(part, {"section": [], "targets": [], "where": []})

    section: list[str] | None = None
    where = False
    for line in lines:
        if line.startswith("## "):
            number = re.match(r"## (\d+)\. ", line)
            entry = of(numbers.get(int(number.group(1)))) if number else None
            section = entry["section"] if entry is not None else None
            where = line == WHERE_HEADING
            if section is not None:
                section.append(line)
                if apart and "Measured apart: " not in text.split(line, 1)[1].split("\n## ")[0]:
                    section += ["", f"Measured apart: {apart}."]
            continue
        if section is not None:
            section.append(line)
        elif where and (entry := of(_part_of(line, WHERE_PARTS))) is not None:
            entry["where"].append(line)
        elif (entry := of(_part_of(line, TARGET_PARTS))) is not None:
            entry["targets"].append(line)
    for entry in kept.values():
        while entry["section"] and not entry["section"][-1].strip():
            entry["section"].pop()
    return {part: entry for part, entry in kept.items() if entry["section"]}


def machine_line() -> str:
    import pyspark

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
        memory = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration):
        pass
    load = ", load average {:.2f} {:.2f} {:.2f} at start".format(*os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({cpu}){memory}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, PySpark {pyspark.__version__}{load}"
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _targets(r: Results) -> list[str]:
    out = ["| target | measured | met |", "|---|---|---|"]
    merge = [s for s in r.pairs if s.strategy == "merge" and s.method == "session"]
    if merge:
        largest = max(merge, key=lambda s: s.rows)
        full = largest.rows >= 2_000_000
        out.append(
            f"| median fenced/stock ≤ {TARGET_RATIO} for merge at 2M rows, session | "
            f"{_ratio_measured(largest)}{'' if full else ' (2M not run at this size)'} | "
            f"{_ratio_met(largest) if full else '–'} |"
        )
    for reader in READER_NAMES:
        rows = [h for h in r.history if h.reader == reader]
        if rows:
            base, longest = rows[0], rows[-1]
            ratio = longest.capture_verify / base.capture_verify
            judged = reader != "describe_history"  # shown for comparison only
            how = ""
            if reader == "sql" and longest.describe:
                cold = longest.median("capture_cold") / base.median("capture_cold")
                how = (
                    f"; capture from the last run's version, without dbt-spark's DESCRIBE"
                    f" ({_ms(base.median('describe'))} → {_ms(longest.median('describe'))} ms);"
                    f" cold capture, with no version to start from: {cold:.2f}x"
                )
            out.append(
                f"| vB capture + verify at 10,000 commits within 1.2x of 10 commits, "
                f"{READER_NAMES[reader]} | {ratio:.2f}x ({longest.commits:,} vs "
                f"{base.commits:,} commits{how}) | {_yes(ratio <= 1.2) if judged else '–'} |"
            )
    for s in r.pairs:
        if s.method == "thrift" and s.stock_method == "thrift" and s.strategy in SERVER_TARGETS:
            m = s.summary()
            at = f"{s.rows:,} rows" + (
                f", a write past the server's {LONG_POLL_S} s long poll"
                f" (stock's run {m['stock_median_s']:.1f} s)"
                if s.work
                else ""
            )
            out.append(
                f"| median fenced/stock ≤ 1.0 over Thrift, {s.strategy}, stock on dbt-spark's"
                f" default profile | {m['median']:.3f} (95% CI {m['low']:.3f}–{m['high']:.3f})"
                f" at {at} | {_yes(m['median'] <= 1.0)} |"
            )
    for method in SERVER_METHODS:
        owns = [
            (s.strategy, s.summary()["fence_s"] - s.summary()["stock_view_s"], s.rows)
            for s in r.pairs
            if s.method == method and s.stock_method == "thrift" and s.fence_measured
            if not s.work
        ]
        if owns:
            out.append(
                f"| the fence's own time ≤ 150 ms per run over {method.capitalize()}, less the"
                " temp view stock creates too | "
                + ", ".join(f"{name} {own * 1000:.0f} ms" for name, own, _ in owns)
                + f" at {owns[0][2]:,} rows | {_yes(all(own <= 0.150 for _, own, _ in owns))} |"
            )
    for method in JOB_METHODS:
        counts = [c for c in r.jobs if c.method == method]
        if counts:
            fence = ", ".join(
                f"{c.strategy} {'/'.join(map(str, c.fence_statement_jobs))}" for c in counts
            )
            extra = ", ".join(f"{c.strategy} {_slashed(c.extra)}" for c in counts)
            if method == "session":
                target, met = (
                    "zero extra Spark jobs",
                    _yes(all(x == 0 for c in counts for x in c.fence_statement_jobs)),
                )
            else:
                target, met = "extra Spark jobs (stated)", "–"
            out.append(
                f"| {target}, {method} | fence statements: {fence}; whole run, fenced minus "
                f"stock: {extra} | {met} |"
            )
    if r.sizing:
        ratios = r.sizing[0].ratios()
        mid = statistics.median(ratios)
        low, high = median_interval(ratios)
        out.append(
            f"| the session's sizing makes a {r.sizing[0].rows:,}-row merge no slower than"
            f" Spark's defaults | sized/defaults {mid:.3f} (95% interval {low:.3f}–{high:.3f})"
            f" | {_yes(high <= 1.0 or mid <= 1.0)} |"
        )
    if (row := start_target(r.start)) is not None:
        out.append(row)
    if r.contention:
        fenced_all = [c for c in r.contention if c.mode == "fenced"]
        stock_all = [c for c in r.contention if c.mode == "stock"]
        ks = ", ".join(str(k) for k in sorted({c.threads for c in r.contention}))
        out.append(
            "| contention: every fenced run committed within fence_retries"
            f" {fenced_all[0].retries}, none lost or duplicated, no RESTORE, K = {ks} runs at once"
            f" on one row and on disjoint partitions (issue 59) | fenced: {_tally(fenced_all)};"
            f" stock: {_tally(stock_all)} | {_yes(all(c.exact for c in fenced_all))} |"
        )
    own = {p.mode: p for p in r.partitions if not p.shared}
    if len(own) == 2:
        fenced, unfenced = own["fenced"], own["unfenced"]
        ratio = fenced.per_minute / unfenced.per_minute if unfenced.per_minute else 0.0
        total = fenced.writers * fenced.per_writer
        out.append(
            f"| partitions: {fenced.writers} writers on their own partitions + OPTIMIZE: 0 "
            f"refusals by the vB gap, every batch committed (fence_retries 3), at least 0.9 "
            f"of unfenced | {fenced.refused_gap} by the gap, {fenced.refused_in_write} by "
            f"Delta during the write; {fenced.committed}/{total} committed; {ratio:.2f} of "
            f"unfenced | "
            f"{_yes(fenced.refused_gap == 0 and fenced.committed == total and ratio >= 0.9)} |"
        )
    if r.build:
        mid, low, high = build_summary(r.build, "fenced")
        out.append(
            f"| small project's cold `dbt build`, session: fenced_spark at most half of stock's "
            f"wall time | {mid:.2f} of stock (95% interval {low:.2f}–{high:.2f}) | "
            f"{_yes(0 < mid <= 0.5)} |"
        )
    for part, entry in r.kept.items():
        if not getattr(r, part, None):
            out += entry["targets"]
    order = {part: i for i, part in enumerate(PART_NUMBERS)}
    return out[:2] + sorted(
        out[2:], key=lambda row: order.get(_part_of(row, TARGET_PARTS) or "", len(order))
    )


JOB_METHODS = ("session", "thrift", "connect")


def _slashed(values: list[int]) -> str:
    # No values: no stock run to subtract (stock dbt-spark has no Connect method).
    return "/".join(map(str, values)) or "–"


def _ratio_measured(s: Series) -> str:
    m = s.summary()
    text = f"{m['median']:.3f} (95% CI {m['low']:.3f}–{m['high']:.3f}) at {rows_label(s.rows)} rows"
    if s.fence_measured:
        text += (
            f"; the fence's own time {m['fence_s']:.3f} s per run, {m['fence_share']:.1%} of the"
            f" fenced run, a ratio of {1 + m['fence_s'] / m['stock_median_s']:.3f} on stock's"
            " median"
        )
    return text


def _ratio_met(s: Series) -> str:
    # The interval decides when it lies on one side of the target; otherwise the fence's own
    # time, which is what the ratio tries to measure through two whole runs' noise.
    m = s.summary()
    if m["high"] <= TARGET_RATIO:
        return "yes"
    if m["low"] > TARGET_RATIO:
        return "**no**"
    if not s.fence_measured:
        return "undecided (the interval contains the target)"
    own = 1 + m["fence_s"] / m["stock_median_s"] <= TARGET_RATIO
    return f"the ratio: undecided; the fence's own time: {_yes(own)}"


def _pairs(r: Results) -> list[str]:
    measured = any(s.fence_measured for s in r.pairs)
    out = [
        "## 1. The same model, stock dbt-spark vs fenced_spark (session, Thrift, Connect)",
        "",
        "On the session: one process, one Spark JVM. For each size, `bench/project`'s model"
        " for each strategy is built identically under both adapters (their own schemas, same"
        " source, same CTAS),"
        " then run alternately: stock (A), fenced (B), A, B, each pair on the same 1% batch"
        " (half updates of recent keys, half new keys). Every model reads `{{ this }}` for a"
        " watermark, the read the fence pins to vB. The time is the model's `execution_time`"
        " from `run_results.json`; warm-up pairs are listed but not counted. *identical*: the"
        " two tables hold the same rows afterwards. *difference*: the median of fenced minus"
        " stock per pair, in seconds.",
        "",
        "*95% CI*: a percentile bootstrap interval of the median ("
        f"{RESAMPLES:,} resamples of the pairs with replacement, fixed seed, so a redraw gives"
        " the same figures): the medians these pairs could as well have given. A median ratio"
        " whose interval contains 1.05 does not say whether the fence costs more or less than"
        " 5%: two whole dbt runs of a few seconds each vary by more than that from pair to pair.",
        "",
        "*fence's own*: what the fence itself spends in the fenced run, summed per run (median),"
        " and its share of that run. Its statements come from dbt's query log (`SQLQuery` and"
        " the `elapsed` of the `SQLQueryStatus` after it, collected with dbtRunner callbacks):"
        " the SET/RESET of the commit tag (`commitInfo.userMetadata`) and, for a strict write,"
        " of `maxCommitAttempts`; the staging view's CREATE and (on the session and over Thrift)"
        " DROP (over Thrift it saves more than it costs: a session closed with a temp view"
        " analyses the view's query again, 45 ms, which the fenced run's time shows and this"
        " does not); the DESCRIBE of the staging view that checks `unique_key` (merge); any"
        " DESCRIBE of the"
        " target beyond as many as stock sends (over SQL the fence's own DESCRIBE, which finds"
        " the Delta log, answers dbt-spark's); and any DESCRIBE HISTORY or DESCRIBE DETAIL. On"
        " the session the history reads (capture, pre-check, verify) go to `LogTail`"
        " (`fence/delta/log_tail.py`), not through dbt's query log: they are timed by wrapping"
        " `LogTail`'s methods in the benchmark's process. So are the SETs/RESETs, which on the"
        " session and over Connect go through the session's conf, not SQL"
        " (`FenceSql.set_session_conf`). That measures the fence's cost"
        " directly, without two whole runs' noise around it: the ratio asks what the fence"
        " adds, and the fence's own time answers it.",
        "",
        *_servers_prose(r),
        "| rows | fenced / stock method | fenced strategy | stock strategy | pairs |"
        " stock median s | fenced median s | difference s (95% CI) | ratio median | 95% CI |"
        " min | max | fence's own s | of the fenced run | identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in r.pairs:
        m = s.summary()
        own = f"{m['fence_s']:.3f} | {m['fence_share']:.1%}" if s.fence_measured else "– | –"
        out.append(
            f"| {s.rows:,} | {_methods(s)} | {s.strategy} | {s.stock_strategy} | {len(s.pairs)} | "
            f"{m['stock_median_s']:.2f} | {m['fenced_median_s']:.2f} | "
            f"{m['difference_s']:+.2f} ({m['difference_low_s']:+.2f} to "
            f"{m['difference_high_s']:+.2f}) | **{m['median']:.3f}** | "
            f"{m['low']:.3f}–{m['high']:.3f} | {m['min']:.3f} | {m['max']:.3f} | {own} | "
            f"{_yes(s.identical)} |"
        )
    if measured:
        out += ["", _pairs_reading(r)]
        if any(s.method != "session" and s.fence_measured for s in r.pairs):
            out += ["", _servers_reading(r)]
        out += ["", *_fence_parts(r)]
    out += ["", "Every pair:", ""]
    out += [
        "| rows | fenced / stock method | strategy | batch | stock s | fenced s | ratio |"
        " fence's own s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in r.pairs:
        for p, warm in [(p, True) for p in s.warmup] + [(p, False) for p in s.pairs]:
            note = " (warm-up)" if warm else ""
            own = f"{p.fence:.3f}" if p.fence_parts else "–"
            out.append(
                f"| {s.rows:,} | {_methods(s)} | {s.strategy} | {p.batch}{note} | {p.stock:.2f} |"
                f" {p.fenced:.2f} | {p.ratio:.3f} | {own} |"
            )
    return out


def _tick(s: Series) -> str:
    stock = ", stock poll 1 s" if s.stock == POLL_1S else ""
    long = " long write" if s.work else ""
    return f"{s.strategy.replace('_', ' ')}, {s.method} {rows_label(s.rows)}{long}{stock}"


def _methods(s: Series) -> str:
    return f"{s.method} / {s.stock_method}" + (", long write" if s.work else "")


def _servers_prose(r: Results) -> list[str]:
    servers = [s for s in r.pairs if s.method != "session" and not s.work]
    if not servers:
        return []
    sizes = " and ".join(dict.fromkeys(rows_label(s.rows) for s in servers))
    # Results from before 2026-11-29 (a part measured apart) compared Connect with both stocks.
    shared = any(s.method == "connect" and s.stock_method == POLL_1S for s in servers)
    return [
        f"*Over the servers* ({sizes} rows): after the session series,"
        " the harness's Spark Thrift Server and Spark Connect server (`tests/harness/servers.py`:"
        " the venv's Spark build with the session's Delta jars and configuration, each server"
        " its own JVM, metastore and warehouse) each get the same source table. "
        + (_shared_batches() if shared else _own_batches())
        + " Stock dbt-spark has no"
        " Connect method, so fenced over Connect is"
        " compared with stock over Thrift on the same server build: that ratio holds the two"
        " protocols' difference as well as the fence, and the fence's own time over Connect"
        " tells them apart. *identical* compares each fenced table with stock's over Thrift."
        " Over the servers the fence's history reads are SQL statements (`SHOW TABLE"
        " EXTENDED`, reads of commit files, and `EXPLAIN`s of such reads, whose plan counts the"
        " files that exist without reading them, `fence/delta/sql_log.py`): they are in dbt's"
        " query log with its other statements. Over Connect the reads of files go through the"
        " DataFrame API since 2026-11-28 (`connect.FrameReads`), logged as the SQL each stands"
        " for and timed whole; before, `spark.sql` was timed and the rows' collect was not, so"
        " Connect's commit files and probes in earlier runs left out part of their time.",
        "",
        *_long_write_prose(r),
    ]


def _own_batches() -> str:
    return (
        "Each batch then runs stock over Thrift on dbt-spark's default profile (`poll_interval`"
        " 5 s, what its users run), stock over Thrift with `poll_interval: 1` (its own table) and"
        " fenced over Thrift on the default profile, in an order that changes per batch (a"
        " Williams design, `pairs.carryover_balanced`): over each six batches every run takes"
        " each place twice and directly follows each other run three times, twice within a"
        " batch and once across the seam from the batch before (no batch starts with the run"
        " that ended the one before), so that drift, going first and the aftermath of the run"
        " before spread evenly over the three. Then, on tables of their own, stock over Thrift"
        " on the default profile and fenced over Connect, taking turns to go first. Since"
        " 2026-11-29 the two series no longer share batches, and the seams are balanced: on one"
        " machine a run right after the other server's shares it with that JVM's aftermath (its"
        " GC, the cleanup of a MERGE's materialized source), which a cluster's servers do not"
        " share."
    )


def _shared_batches() -> str:
    return (
        "Each batch then ran, as before 2026-11-29, stock over Thrift on dbt-spark's default"
        " profile, stock over Thrift with `poll_interval: 1`, fenced over Thrift and fenced over"
        " Connect, in a carryover-balanced order within each batch (its seams with the batch"
        " before were not balanced)."
    )


def _long_write_prose(r: Results) -> list[str]:
    long = [s for s in r.pairs if s.work]
    if not long:
        return []
    return [
        "*Long write* (*thrift / thrift, long write*): the Spark Thrift Server holds each status"
        f" poll until the statement ends or {LONG_POLL_S} s pass (Hive's"
        " `hive.server2.long.polling.timeout`), so stock dbt-spark sleeps its `poll_interval`"
        f" only after a statement still running at {LONG_POLL_S} s: in the series above none is,"
        " and only the fence's own time separates the two. Here the same models run over"
        f" Thrift with {long[0].work:,} rows of busy work in their source (`var('work')` in"
        " `bench/project/macros/bench_batch.sql`, always true, sized at the start to take"
        f" {LONG_WRITE_BUSY_S} s on this server), so that the write ends between the first"
        " long poll and stock's next poll 5 s later: the case where a user on dbt-spark's"
        " default profile waits for nothing. Fenced over Thrift polls again after 10 ms,"
        " doubling up to `poll_interval`.",
        "",
    ]


def _servers_reading(r: Results) -> str:
    """Thrift against Connect, in this run's figures."""

    def figures(method: str, stock: str = "thrift") -> str:
        series = [
            (s, s.summary())
            for s in r.pairs
            if s.method == method and s.stock_method == stock and s.fence_measured
            if not s.work
        ]
        if not series:
            return "not measured"
        ratios = ", ".join(
            f"{s.strategy} {m['median']:.3f} ({m['low']:.3f}–{m['high']:.3f})" for s, m in series
        )
        own = [m["fence_s"] for _, m in series]
        reads = [
            tuple(map(sum, zip(*(s.part(k) for k in HISTORY_KINDS), strict=True)))
            for s, _ in series
        ]
        return (
            f"{ratios}; the fence's own time {min(own):.3f}–{max(own):.3f} s per run, of which"
            f" history reads {min(h[0] for h in reads):.3f}–"
            f"{max(h[0] for h in reads):.3f} s ({'/'.join(f'{h[1]:g}' for h in reads)}"
            " statements per run)"
        )

    def protocols() -> str:
        # The same source batch's fenced runs, Connect over Thrift: the protocols, the fence on
        # both.
        thrift = {
            (s.strategy, s.rows): s
            for s in r.pairs
            if s.method == "thrift" and s.stock_method == "thrift" and not s.work
        }
        out = []
        for c in (
            s
            for s in r.pairs
            if s.method == "connect"
            and s.stock_method == "thrift"
            and (s.strategy, s.rows) in thrift
        ):
            same = thrift[(c.strategy, c.rows)].pairs
            ratios = [p.fenced / q.fenced for p, q in zip(c.pairs, same, strict=True)]
            low, high = median_interval(ratios)
            at = f" at {rows_label(c.rows)}" if len({s.rows for s in thrift.values()}) > 1 else ""
            out.append(f"{c.strategy}{at} {statistics.median(ratios):.3f} ({low:.3f}–{high:.3f})")
        return ", ".join(out)

    return (
        "Over the servers, median fenced/stock (95% CI), stock over Thrift on dbt-spark's"
        f" default profile in both: fenced over Thrift {figures('thrift')}. Fenced over Connect"
        f" {figures('connect')}. Against stock with `poll_interval: 1`: fenced over Thrift"
        f" {figures('thrift', POLL_1S)}."
        f" Fenced over Connect against fenced over Thrift on the same batch of the source (each"
        f" in its own series): {protocols()}."
    )


def _pairs_reading(r: Results) -> str:
    """What the table says, in this run's figures."""
    series = [s for s in r.pairs if s.fence_measured and s.method == "session"]
    summaries = [(s, s.summary()) for s in series]
    open_ = [s for s, m in summaries if m["low"] <= TARGET_RATIO < m["high"]]
    own = [m["fence_s"] for _, m in summaries]
    share = [m["fence_share"] for _, m in summaries]
    added = [m["fence_s"] / m["stock_median_s"] for _, m in summaries]
    net = [m["fence_s"] - m["stock_view_s"] for _, m in summaries]
    beyond = [
        f"{s.strategy} at {rows_label(s.rows)}"
        for s, m in summaries
        if m["difference_low_s"] > m["fence_s"]
    ]
    text = (
        f"Reading it, on the session: {len(open_)} of {len(series)} ratio intervals contain"
        f" {TARGET_RATIO}"
    )
    if open_:
        text += " (" + ", ".join(f"{s.strategy} at {rows_label(s.rows)}" for s in open_) + ")"
    text += (
        ": there the ratio cannot answer whether the target is met. The fence's own time can:"
        f" {min(own):.3f}–{max(own):.3f} s per fenced run, {min(share):.1%}–{max(share):.1%} of"
        f" it, which on stock's median run is a ratio of {1 + min(added):.3f}–"
        f"{1 + max(added):.3f}; less the temp view stock creates where the fence creates its"
        f" staging view, {min(net):.3f}–{max(net):.3f} s."
    )
    if beyond:
        text += (
            " Where the difference's interval lies above the fence's own time ("
            + ", ".join(beyond)
            + "), the rest is not the fence's statements or reads: the strategy's own write"
            " (replace_where runs Delta's INSERT ... REPLACE WHERE where stock runs a plain"
            " INSERT) or the adapter's Python around them (not measured here)."
        )
    return text


def _fence_parts(r: Results) -> list[str]:
    series = [s for s in r.pairs if s.fence_measured]
    found = {k for s in series for p in s.pairs for k in p.fence_parts}
    every = (LOG_READS, *(kind for _, kind in FENCE_KINDS), TARGET_DESCRIBE)
    kinds = [k for k in every if k in found]
    out = [
        "The fence's own time by kind: median ms per fenced run (statements or history reads per"
        " run). *stock's temp view*, not part of the fence's own time: the temporary view stock"
        " dbt-spark creates for the same model SQL, where the fence creates its staging view;"
        " so that much of the staging view's time is no addition. Where the fence creates none"
        " (a SQL model with `on_schema_change: ignore`: its write reads the model SQL itself),"
        " 0: stock's view is then time the fenced run does not spend at all.",
        "",
        "| rows | fenced / stock method | strategy | "
        + " | ".join(kinds)
        + " | fence's own | stock's temp view |",
        "|---|---|---|" + "---|" * (len(kinds) + 2),
    ]
    for s in series:
        cells = []
        for kind in kinds:
            seconds, count = s.part(kind)
            cells.append(f"{_ms(seconds)} ({count:g})")
        m = s.summary()
        out.append(
            f"| {s.rows:,} | {_methods(s)} | {s.strategy} | "
            + " | ".join(cells)
            + f" | {_ms(m['fence_s'])} | "
            f"{_ms(m['stock_view_s'])} |"
        )
    return out


POLL_1S = "thrift, poll_interval 1"  # bench.pairs.SERVER_STOCKS
# The fence's history reads over SQL, by bench.pairs.FENCE_KINDS: its reader before and now.
HISTORY_KINDS = ("DESCRIBE HISTORY", "SHOW TABLE EXTENDED", "commit files", "commit file probes")

READER_NAMES = {
    "delta_log": "session (the Delta log)",
    "sql": "SQL path (commit files by path)",
    "describe_history": "DESCRIBE HISTORY (before; the SQL path's fallback)",
}


def _describe_growth(r: Results) -> str:
    rows = [h for h in r.history if h.reader == "sql" and h.describe]
    if len(rows) < 2:
        return "not measured in this run"
    return (
        f"{_ms(rows[-1].median('describe'))} ms at {rows[-1].commits:,} commits against"
        f" {_ms(rows[0].median('describe'))} ms at {rows[0].commits:,}"
    )


def _history(r: Results) -> list[str]:
    out = [
        "## 2. History length: capturing vB and verifying the commit",
        "",
        "Each table has N commits before the measurement (see `bench/history.py` for how they"
        " are built: Delta's own commits, checkpoints every 10 versions, replicated from"
        " Delta's own files). Each repetition runs the fence's code (`fence/protocol.py`) on a"
        " connection session, a new `Fence` per step as the adapter builds one: capture ="
        " `Fence.latest_version`, then `Fence.write` with a one-row strict INSERT: pre-check,"
        " the tagged write, verify (`Fence.verify`: the version Delta says the session"
        " committed, and the log only when that is not the one right above vB). Three readers:"
        " *session* is what `method: session` uses (`fence/delta/log_tail.py`: `_last_checkpoint`,"
        " then probes for `N.json` and the commitInfo line of each new commit); *SQL path* is"
        " what Thrift and Connect use (`fence/delta/sql_log.py`: the table's location from"
        " `describe extended`, then commit files by exact path, `binaryFile` with a brace"
        " pattern Hadoop expands into single paths, from the version the previous repetition"
        " committed, as the adapter starts from the version run_results.json gives for the"
        " node; whether files exist from the `EXPLAIN` of such a read,"
        " whose plan counts them without a Spark job: the pre-check on an untouched table is"
        " one such statement, at the location the capture found), run here as SQL on a"
        " session; *DESCRIBE HISTORY* is `DESCRIBE HISTORY t LIMIT n`, the"
        " SQL path before it and its fallback. Medians in ms. *Cold*: capture right"
        " after `DeltaLog.clearCache()` with no version to start from, what the first run in a"
        " new process and target folder pays. *dbt-spark's DESCRIBE*: the SQL path's catalog"
        " lookup is `describe extended` of the table, the statement dbt-spark sends in every"
        " run for the target's column list, which its rows then answer (`Nodes."
        "described`): not part of capture, since a run sends it with or without the fence;"
        " it grows with the log because Delta lists `_delta_log` to update its snapshot for"
        " it. *The INSERT*"
        " is Delta's own write, for scale: stock dbt-spark pays it too, and it grows with the"
        " log because Delta lists `_delta_log` to update its snapshot.",
        "",
        "| reader | commits | checkpoints | files in _delta_log | capture | pre-check | verify |"
        " capture + verify | ratio to 10 | SET/RESET | whole fence | cold capture |"
        " dbt-spark's DESCRIBE | the INSERT |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for h in r.history:
        base = next(b for b in r.history if b.reader == h.reader)
        out.append(
            f"| {READER_NAMES[h.reader]} | {h.commits:,} | {h.checkpoints} | {h.log_files:,} | "
            f"{_ms(h.median('capture'))} | "
            f"{_ms(h.median('precheck'))} | {_ms(h.median('verify'))} | "
            f"{_ms(h.capture_verify)} | **{h.capture_verify / base.capture_verify:.2f}** | "
            f"{_ms(h.median('confs'))} | {_ms(h.fence_total)} | "
            f"{_ms(h.median('capture_cold'))} | "
            f"{_ms(h.median('describe')) if h.describe else '–'} | {_ms(h.median('write'))} |"
        )
    reps = len(r.history[0].capture)
    built = {h.commits: h.build_seconds for h in r.history}
    out += [
        "",
        f"{reps} repetitions per table and reader; built in "
        + ", ".join(f"{seconds:.0f}s ({commits:,})" for commits, seconds in built.items())
        + ".",
    ]
    return out


def _jobs(r: Results) -> list[str]:
    out = [
        "## 3. Spark jobs per model run",
        "",
        "Each strategy's model is built under both adapters (`--full-refresh`); then each"
        " measured run is a stock run and a fenced run of the same model on the same batch."
        " Job counts do not depend on warm-up."
        " Session: jobs from the SparkContext's status tracker, each traced to the statement"
        " dbt sent (a job group per statement). Thrift: the server's REST API"
        " (`/api/v1/applications/<id>/jobs`), each job described by its statement. Connect:"
        " the same REST API on the Connect server; Spark Connect describes a job by its plan,"
        " cut short, so each statement dbt sends carries a session tag of its own"
        " (`SparkSession.addTag`), which Spark Connect copies into the job's tags. Stock"
        " dbt-spark has no Connect method: over Connect only fenced runs, and its stock columns"
        " are –; compare them with stock over Thrift, the same server build. Each dbt"
        " connection over Connect opens its own session and checks it with `select 1`, one"
        " Spark job each: the Connect method's cost, not the fence's.",
        "",
        "*extra*: fenced minus stock, whole run. *fence statements*: the jobs of the"
        f" statements only the fence sends ({', '.join(FENCE_ONLY)}); the rest of any"
        " difference is the strategy's own write (e.g. Delta's REPLACE WHERE vs a plain INSERT).",
        "",
        "| method | fenced strategy | stock strategy | stock jobs per run | fenced jobs per run |"
        " extra jobs per run | of which fence statements |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in r.jobs:
        stock = _slashed([x.jobs for x in c.of("stock")])
        fenced = _slashed([x.jobs for x in c.of("fenced")])
        extra = f"**{_slashed(c.extra)}**" if c.extra else "–"
        fence = _slashed(c.fence_statement_jobs)
        out.append(
            f"| {c.method} | {c.strategy} | {c.stock_strategy} | {stock} | {fenced} | {extra} |"
            f" {fence} |"
        )
    out += [
        "",
        "Where the jobs go, by statement (one measured run; statements sent / Spark jobs):",
        "",
    ]
    for c in r.jobs:
        runs = [c.of("stock")[:1], c.of("fenced")[:1]]  # no stock run over Connect
        kinds = sorted({k for run in runs for x in run for k in (*x.jobs_by_kind, *x.statements)})
        # Thrift's jobs name their statement, but nothing counts the statements sent there.
        sent = any(x.statements for run in runs for x in run)
        out += [
            f"**{c.method}, {c.strategy}**",
            "",
            "| statement | stock | fenced |",
            "|---|---|---|",
        ]
        for k in kinds:
            cells = [
                (f"{run[0].statements.get(k, 0)} / " if sent else "")
                + str(run[0].jobs_by_kind.get(k, 0))
                if run
                else "–"
                for run in runs
            ]
            out.append(f"| {k} | {cells[0]} | {cells[1]} |")
        out.append("")
    return out


def _tally(runs: list[Contention]) -> str:
    return (
        f"{sum(c.committed for c in runs)}/{sum(c.runs for c in runs)} committed, refused "
        f"{sum(c.refused for c in runs)}, lost {sum(c.lost for c in runs)}, duplicated "
        f"{sum(c.duplicated for c in runs)}, RESTOREs {sum(c.restores for c in runs)}"
    )


def _contention_pairs(r: Results) -> list[tuple[Contention, Contention]]:
    """Stock's and fenced's runs of each workload and K, in the order they ran."""
    by = {(c.workload, c.threads, c.mode): c for c in r.contention}
    keys = dict.fromkeys((c.workload, c.threads) for c in r.contention)
    return [
        (by[(w, k, "stock")], by[(w, k, "fenced")])
        for w, k in keys
        if (w, k, "stock") in by and (w, k, "fenced") in by
    ]


def _phases(c: Contention) -> str:
    seconds = [c.phase(p) for p in PHASES]
    if any(s is None for s in seconds):
        return "–"
    return " / ".join(f"{s:.1f}" for s in seconds)


def _contention(r: Results) -> list[str]:
    first = r.contention[0]
    out = [
        "## 4. Contention: K runs at once, on one row and on disjoint partitions",
        "",
        "K runs of one model at once on one table, each a thread with its own session of the"
        " one JVM (as fenced_spark opens one per dbt connection), let go together;"
        f" {first.rounds} rounds at each K and workload, stock's round and fenced's taking turns"
        " (A B, then B A: `pairs.carryover_balanced`), each mode and K on a table of its own. A"
        f" warm-up round of each at K = {min(c.threads for c in r.contention)} goes first and is"
        " not counted (`bench/contention.py`). The workload is the contention tests' own"
        " (`tests/harness/contention.py`). *row*: the `counter` merge: each run reads row 0 of"
        " the target (`select 0 as id, n + 1 as n from {{ this }} where id = 0`) and merges it"
        " on `id`: every run writes the one row every other run reads, the textbook lost update."
        " *partitions*: the `parts` merge: each run reads its own partition `p` of the target, a"
        " new one per run, and merges `n + 1` into it on `(id, p)`: no run reads or writes what"
        " another does; the MERGE's ON names no partition value, as in a dbt-spark merge without"
        " `incremental_predicates`. *fenced*: through the fence as the materialization drives it"
        " (`contention.fenced_runs`: vB, the model SQL pinned to it, the tagged MERGE with the"
        f" fence's SetTransaction, verification), with `fence_retries: {first.retries}`."
        " *stock*: the same MERGE as stock dbt-spark sends it (`contention.stock_runs`: the model"
        " SQL unpinned, once, no retries). dbt's own per-run work (parse, compile, catalog"
        " lookups) is left out on both sides.",
        "",
        "*seconds*: from the K runs' start to the last one's end, summed over the rounds;"
        " *committed/min*: the committed runs per minute of that. *refused*: stock, Delta failed"
        " the MERGE with a conflict error; fenced, the run failed after its `fence_retries`."
        " Afterwards the table says what the runs left. *lost*: runs reported committed whose"
        " write the table does not hold (row: committed runs minus how far the counter moved in"
        " the round; partitions: a committed run's partition missing). *duplicated*: writes"
        " beyond the committed runs' (the counter moved further; a refused run's partition"
        " present, or one holding more than n = 1). *RESTOREs*: in the table's history."
        ' *attempts*: 1 + the fence\'s retries of the run (its "retrying from the new version"'
        " log lines). *sends*: how often a fenced write was sent again within an attempt, after"
        " Delta refused it inside its commit for another fenced write's commit that conflicts"
        ' with nothing it read or writes (the fence\'s "sending it again" log lines): in all,'
        " and the runs that sent any. *a fenced run's seconds*: the mean per run of the time spent"
        " in the write statement (every send of it, refused ones too), in the pre-check before"
        " each send, in verification after it, and in the back-off, the fence's wait before a"
        " retry or a send (a random share of 2^retry turns, a turn being a commit landing or one"
        " attempt-length without one: [fence.md](fence.md#waiting-a-turn-between-retries)); each"
        " timed by wrapping its method in the bench's process (`contention.PHASES`). Not timed"
        " apart: the capture, the read of the SetTransaction's version, the recomputation for a"
        " retry and the sets of the session's confs."
        " *CPU s per committed run*: the user and system seconds the bench's Spark JVM and its"
        " Python process had over the rounds (from /proc), per committed run: refused runs'"
        " work counted in.",
        "",
        "| workload | K | mode | runs | committed | seconds | committed/min |"
        " fenced/stock committed/min | CPU s per committed run | refused | lost | duplicated |"
        " RESTOREs | attempts mean | max | sends (runs) | a fenced run's seconds: "
        + " / ".join(PHASES)
        + " |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for stock, fenced in _contention_pairs(r):
        for c in (stock, fenced):
            ratio = ""
            if c is fenced and stock.per_minute:
                ratio = f"**{fenced.per_minute / stock.per_minute:.2f}**"
            cpu = "–" if c.cpu_per_run is None else f"{c.cpu_per_run:.1f}"
            out.append(
                f"| {c.workload} | {c.threads} | {c.mode} | {c.runs} | {c.committed} |"
                f" {c.seconds:.1f} | {c.per_minute:.1f} | {ratio} | {cpu} | {c.refused} |"
                f" {c.lost} |"
                f" {c.duplicated} | {c.restores} | {statistics.mean(c.attempts):.2f} |"
                f" {max(c.attempts)} | {sum(c.sends)} ({sum(n > 0 for n in c.sends)}) |"
                f" {_phases(c)} |"
            )
    loads = {m: [x for c in r.contention if c.mode == m for x in c.loads] for m in CONTENTION_MODES}
    if all(loads.values()):
        out += [
            "",
            "The machine's 1-minute load average at the rounds' ends: "
            + ", ".join(f"{m} {min(x):.1f}–{max(x):.1f}" for m, x in loads.items())
            + f" (on {r.cores} cores). Its other work stretches a round's wall time, and a"
            " fenced round, the longer, is exposed to more of it; the CPU seconds it moves"
            " less.",
        ]
    for mode in CONTENTION_MODES:
        causes = Counter(e for c in r.contention if c.mode == mode for e in c.errors)
        if causes:
            out += ["", f"What refused {mode}'s runs (versions and ids as N):", ""]
            out += [f"- {n} × `{e}`" for e, n in causes.most_common(5)]
    return out


def _partitions(r: Results) -> list[str]:
    out = [
        "## 5. Writers on disjoint partitions, beside a compaction job",
        "",
        "Four writers on one table partitioned by `p`, each on its own partition (then all on "
        "one): two replace_where (each batch replaces its own slot), two self-reading appends "
        "(each batch reads its partition of the target at vB), and an OPTIMIZE loop every "
        "0.5 s. Fenced through the conflict analysis with `fence_retries: 3`; unfenced as "
        "stock dbt-spark runs the same statements (`bench/partitions.py`).",
        "",
        "| partitions | mode | committed | batches/min | refused by the vB gap | refused by "
        "Delta during the write | OPTIMIZE committed / failed | lost | duplicated |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in r.partitions:
        out.append(
            f"| {'one shared' if p.shared else 'own'} | {p.mode} | {p.committed}/"
            f"{p.writers * p.per_writer} | {p.per_minute:.1f} | {p.refused_gap} | "
            f"{p.refused_in_write} | {p.optimizes} / {p.optimize_failures} | {p.lost} | "
            f"{p.duplicated} |"
        )
    causes = Counter()
    for p in r.partitions:
        causes.update(p.causes)
    if causes:
        out += ["", "What refused the fenced attempts:", ""]
        out += [f"- {n} × {cause}" for cause, n in causes.most_common(6)]
    return out


BUILD_LABELS = {
    "fenced": "fenced_spark's session (its defaults)",
    "stock": "stock dbt-spark's session with Delta",
    "spark_defaults": "fenced_spark's session with Spark's and Delta's defaults",
}


def _sizing(r: Results) -> list[str]:
    z = r.sizing[0]
    ratios = z.ratios()
    low, high = median_interval(ratios)
    confs = ", ".join(
        f"`{k}` {z.sized_conf.get(k, '?')} (default {v})" for k, v in SPARK_DEFAULTS.items()
    )
    return [
        "## 7. The session's sizing on a big merge",
        "",
        f"A MERGE of {z.batch_rows:,} rows (half updates, half new keys) into a"
        f" {z.rows:,}-row Delta table, on two sessions of one JVM, alternating (`bench/sizing.py`):"
        f" one with the settings the embedded session sizes to its {z.cores} cores ({confs}),"
        " one with Spark's and Delta's defaults; the first pair warms up. Each session merges"
        " into its own copy of the table; both hold the same rows afterwards.",
        "",
        "| setting | merges | median s |",
        "|---|---|---|",
        f"| sized to the cores | {len(z.sized)} | {statistics.median(z.sized):.2f} |",
        f"| Spark's and Delta's defaults | {len(z.defaults)} |"
        f" {statistics.median(z.defaults):.2f} |",
        "",
        f"Sized/defaults, median of the pairs: **{statistics.median(ratios):.3f}**"
        f" (95% interval {low:.3f}–{high:.3f}).",
    ]


def _build(r: Results) -> list[str]:
    out = [
        "## 6. A small project's `dbt build` from a cold start",
        "",
        "`bench/build_project`: 3 seeds of 100 rows, 3 views, 2 tables and 20 data tests (28 "
        "nodes, 2 threads), each `dbt build` in its own process on a fresh folder (a new JVM, "
        "empty warehouse and metastore; Delta's jars, and for fenced_spark the JVM's class archive "
        "(docs/connections.md, *Session defaults*), already cached), the three targets in "
        "rotating order per round (`bench/build.py`). *spark_defaults* is fenced_spark's "
        "session with `spark.sql.shuffle.partitions` 200, "
        "`spark.databricks.delta.snapshotPartitions` 50, "
        "`spark.sql.sources.parallelPartitionDiscovery.parallelism` 10000 and Ivy resolving the "
        "package at start: the session before it sized itself (docs/connections.md, *Session "
        "defaults*); it maps the class archive as the default session does.",
        "",
        "| target | builds ok | median s | ratio to stock (median, 95% interval) |",
        "|---|---|---|---|",
    ]
    for target in TARGETS:
        runs = [b for b in r.build if b.target == target]
        ok = [b.seconds for b in runs if b.ok]
        median_s = statistics.median(ok) if ok else 0.0
        if target == "stock":
            ratio = "1"
        else:
            mid, low, high = build_summary(r.build, target)
            ratio = f"{mid:.2f} ({low:.2f}–{high:.2f})"
        out.append(f"| {BUILD_LABELS[target]} | {len(ok)}/{len(runs)} | {median_s:.1f} | {ratio} |")
    kinds = ("seed", "model", "test", "other")
    out += [
        "",
        "Statements dbt sent per build, by node kind (from each build's `dbt.log`; the same "
        "in every round):",
        "",
        "| target | " + " | ".join(kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    for target in TARGETS:
        first = next((b for b in r.build if b.target == target and b.ok), None)
        if first is not None:
            counts = " | ".join(str(first.statements.get(k, 0)) for k in kinds)
            out.append(f"| {BUILD_LABELS[target]} | {counts} |")
    return out


def _where(r: Results) -> list[str]:
    """The fence's cost, traced to its source, in this run's figures."""
    out = []
    if r.jobs:

        def history_jobs(method: str) -> str:
            counts = [c for c in r.jobs if c.method == method]
            per_run = {
                sum(x.jobs_by_kind.get(k, 0) for k in ("DESCRIBE HISTORY", "commit files (SqlLog)"))
                for c in counts
                for x in c.of("fenced")
            }
            return "/".join(map(str, sorted(per_run))) or "–"

        out.append(
            "- **Spark jobs.** Over Thrift and Connect the fence's history reads are reads of"
            " the Delta log's files by the server (`fence/delta/sql_log.py`), each one Spark job:"
            " capture (`adapter.fence_begin` → `Fence.capture`: versions 0–15 and the powers of"
            " two in one read, then `EXPLAIN`s narrowing between two of them and a window of 16"
            " when the table has more versions; the same rows serve `Fence.check_earlier_runs`)"
            " and, only when something landed after vB, the pre-check (`Fence.precheck`: the"
            " window from vB; whether anything landed is one `EXPLAIN` whose plan counts vB's"
            " commit file, the next one and any staged commit, and runs no job). Verification"
            " reads nothing when Delta"
            " reports the session's commit right above vB (`verify.session_commit`). Jobs of"
            " these reads per fenced run here: "
            + "; ".join(f"{m} {history_jobs(m)}" for m in ("thrift", "connect"))
            + ". The catalog lookup (`describe extended`, dbt-spark's own statement) runs no"
            " job. On"
            " the session those reads go to `LogTail` (`fence/delta/log_tail.py`, chosen by"
            " `FenceSql.log` in `fence_sql.py`), which reads the log's files on the driver:"
            " jobs per run here: "
            + history_jobs("session")
            + ". The SETs/RESETs, the staging view and its DROP run no job."
        )
    for reader in READER_NAMES:
        rows = [h for h in r.history if h.reader == reader]
        if len(rows) < 2:
            continue
        base, longest = rows[0], rows[-1]
        figures = (
            f"capture + verify take {_ms(longest.capture_verify)} ms at {longest.commits:,}"
            f" commits against {_ms(base.capture_verify)} ms at {base.commits:,}"
            f" (the one-row INSERT itself: {_ms(longest.median('write'))} ms against"
            f" {_ms(base.median('write'))} ms)"
        )
        if reader == "sql":
            out.append(
                f"- **History length, SQL path.** {figures[0].upper()}{figures[1:]}."
                " `SqlLog` never lists the directory itself: each read names the files it wants"
                " (Hadoop's `GlobExpander` turns `_delta_log{/a,/b}` into one lookup per file),"
                " capture starts from the version the node's last run left (run_results.json:"
                " one read of the 16 versions from there and a few powers of two above it), a"
                " verification whose commit Delta reports right above vB reads nothing, and a"
                " pre-check on an untouched table is one `EXPLAIN` without a job. With no"
                " version to start from (cold capture) an older table takes `EXPLAIN`s"
                " narrowing between two powers of two (2 at 10,000 commits, no job) and a read"
                " of the window. The catalog lookup, dbt-spark's own `describe extended`, does"
                " grow (Delta lists the log to update its snapshot for it), in every run with"
                " or without the fence: " + _describe_growth(r) + "."
            )
        elif reader == "describe_history":
            out.append(
                f"- **History length, DESCRIBE HISTORY.** {figures[0].upper()}{figures[1:]}."
                " The time is"
                " Delta's: `getHistory` calls `deltaLog.update()`, which lists `_delta_log`"
                " from the last checkpoint, and on a local or HDFS file system"
                " `HDFSLogStore.listFrom` lists the whole directory"
                f" ({longest.log_files:,} files here, with Hadoop's .crc sidecars). Delta's"
                " own write pays that listing too. Object stores list from a start key, so"
                " the effect there should be smaller (not measured)."
            )
        else:
            out.append(
                f"- **History length, session.** {figures[0].upper()}{figures[1:]}. `LogTail`"
                " never lists the directory: it reads `_last_checkpoint`, probes `N.json`"
                " forward from there (doubling, then bisecting), and reads one line, the"
                " commitInfo, of each commit after vB; a pre-check on an unchanged table is"
                " one probe."
            )
    if r.contention:
        out.append(_where_contention(r))
    out += [
        bullet
        for part in PART_NUMBERS
        if not getattr(r, part, None)
        for bullet in r.kept.get(part, {}).get("where", [])
    ]
    if not out:
        return []
    return ["## Where the fence's cost comes from", "", *out]


def _where_contention(r: Results) -> str:
    k = max(c.threads for c in r.contention)
    pairs = {
        stock.workload: (stock, fenced)
        for stock, fenced in _contention_pairs(r)
        if stock.threads == k
    }
    text = (
        "- **Contention.** Every fenced write of a table carries the fence's SetTransaction, and"
        " Delta fails a transaction that read it when another commit of it lands meanwhile"
        " ([fence.md](fence.md#fenced-writers-refuse-each-other-in-delta)): fenced runs of one"
        " table commit one at a time, whatever they write. On one row that is what the runs"
        " need anyway (each must read the last one's counter); where Delta refuses a MERGE for a"
        " commit that conflicts with nothing (disjoint partitions), the fence sends the same"
        " write again on the new version instead of failing the run. Stock runs overlap, and"
        " Delta refuses those whose conflict check fails, with nothing retried."
    )
    for workload in WORKLOADS:
        if workload not in pairs:
            continue
        stock, fenced = pairs[workload]
        text += (
            f" At K = {k} on {'one row' if workload == 'row' else 'disjoint partitions'}:"
            f" fenced committed {fenced.committed} of {fenced.runs} runs,"
            f" {fenced.per_minute:.1f}/min, {fenced.seconds / fenced.rounds:.1f} s a round;"
            f" stock {stock.committed} of {stock.runs}, {stock.per_minute:.1f}/min,"
            f" {stock.seconds / stock.rounds:.1f} s a round, {stock.refused} refused and"
            f" {stock.lost} lost."
        )
        if fenced.cpu_per_run is not None and stock.cpu_per_run is not None:
            text += (
                f" Per committed run fenced used {fenced.cpu_per_run:.1f} CPU s, stock"
                f" {stock.cpu_per_run:.1f} (its refused runs' work counted in)."
            )
        if all(fenced.phase(p) is not None for p in PHASES):
            text += (
                f" A fenced run spent {fenced.phase('write'):.1f} s in its write statements"
                f" (attempts mean {statistics.mean(fenced.attempts):.2f}; writes sent again"
                f" {sum(fenced.sends)} times in all), {fenced.phase('pre-check'):.1f} s in"
                f" pre-checks, {fenced.phase('verify'):.1f} s in verification (judging the"
                " commits that landed meanwhile against what the run read and writes) and"
                f" {fenced.phase('back-off'):.1f} s in the back-off."
            )
    return text


def _nodes(r: Results) -> list[str]:
    n = r.nodes[0]
    out = [
        "## 8. Four models in one run over the servers",
        "",
        f"One `dbt run` of four copies of `bench_merge` ({n.rows:,} rows each, a 1% batch per"
        " run) on one thread, per batch, in an order that changes per batch as part 1's server"
        " runs' (`bench/nodes.py`):"
        " stock over Thrift on dbt-spark's default profile, fenced over Thrift and fenced over"
        " Connect, each also with a new session per node, which is what fenced_spark did"
        " before it kept a node's session for the next node (each kept session closed"
        " instead). dbt opens a connection for each node. Spark compiles a Connect session's"
        " query code in that session's own class loader and caches it per class loader"
        " (SPARK-44795): a new session compiles every operator of a MERGE again. A kept"
        " Connect session is RESET and its temp views dropped before the next node"
        " (`dbt/adapters/fenced_spark/connect.py`); a Thrift session is kept only if the"
        " statements it ran left nothing behind, and saves its opening (a socket, SASL,"
        " OpenSession and pyhive's `USE`) and closing (`thrift.py`). *first node*: the first"
        " of the run's four;"
        " *later nodes*: the median of the other three, per run; *vs stock*: later nodes over"
        f" stock's later nodes on the same batch, median of {len(n.of(NODE_STOCK))} batches"
        " (95% CI); *reused*: connections per run that took a kept session (dbt's own"
        " connection for its catalog counts too). Warm-up batches are not counted.",
        "",
        "| run | runs | first node s | later nodes s | whole run s | vs stock | 95% CI | reused |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in NODE_RUNS:
        runs = n.of(run)
        if not runs:
            continue
        vs, interval = "–", "–"
        if run != NODE_STOCK:
            ratios = n.ratios(run)
            low, high = median_interval(ratios)
            vs, interval = f"**{statistics.median(ratios):.3f}**", f"{low:.3f}–{high:.3f}"
        out.append(
            f"| {run} | {len(runs)} | {statistics.median(x.nodes[0] for x in runs):.2f}"
            f" | {statistics.median(n.later(run)):.2f}"
            f" | {statistics.median(x.seconds for x in runs):.2f}"
            f" | {vs} | {interval} | {statistics.median(x.reused for x in runs):g} |"
        )
    said = []
    for method, kept, new in NODE_KEPT_AND_NEW:
        if n.of(kept) and n.of(new):
            saved = statistics.median(n.later(new)) - statistics.median(n.later(kept))
            said.append(
                f"Over {method}, a node after the first took"
                f" {statistics.median(n.later(kept)):.2f} s in a kept session and"
                f" {statistics.median(n.later(new)):.2f} s in a new one: {saved:.2f} s per"
                f" node, in a run of {n.models} models."
            )
    return out + (["", " ".join(said)] if said else [])


def markdown(r: Results) -> str:
    out = [
        "# Benchmarks: what the fence costs",
        "",
        f"Generated by `{r.command}` on {r.started} (size `{r.size}`, {r.seconds / 60:.1f} min);"
        " do not edit by hand. Runner: `bench/run.py`.",
        "",
        f"Machine: {r.machine}.",
        "",
        "Targets are reported, not asserted.",
        "",
        *_targets(r),
        "",
    ]
    kept = {part: entry for part, entry in r.kept.items() if not getattr(r, part)}
    for name, render in (
        ("pairs", _pairs),
        ("history", _history),
        ("jobs", _jobs),
        ("contention", _contention),
        ("partitions", _partitions),
        ("build", _build),
        ("sizing", _sizing),
        ("nodes", _nodes),
        ("start", lambda r: start_section(r.start)),
    ):
        if getattr(r, name):
            heading, *body = render(r)
            # A part measured by another run than the header's says which, under its heading.
            apart = r.measured_apart.get(name)
            out += [heading, *(["", f"Measured apart: {apart}."] if apart else []), *body, ""]
        elif name in kept:
            out += [*kept[name]["section"], ""]
    out += _where(r)
    return "\n".join(out).rstrip() + "\n"


# The parts docs/benchmarks.png draws, one panel each.
PICTURED = ("pairs", "history", "jobs", "contention")
METHOD_COLOURS = {"session": "#4a7fb5", "thrift": "#5cb85c", "connect": "#f0ad4e"}


def picture(r: Results, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9.5))
    (pairs_ax, history_ax), (jobs_ax, contention_ax) = axes

    shown: set[str] = set()
    for i, s in enumerate(r.pairs):
        ratios = s.ratios()
        m = s.summary()
        pairs_ax.scatter(
            [i - 0.1] * len(ratios),
            ratios,
            color=METHOD_COLOURS.get(s.method, "#4a7fb5"),
            alpha=0.6,
            s=18,
            label=None
            if s.method in shown
            else f"pairs, fenced {s.method}, stock {s.stock_method}",
        )
        shown.add(s.method)
        pairs_ax.hlines(m["median"], i - 0.3, i + 0.05, color="black")
        pairs_ax.errorbar(
            i + 0.15,
            m["median"],
            yerr=[[m["median"] - m["low"]], [m["high"] - m["median"]]],
            color="black",
            capsize=3,
            lw=1.2,
            label="median, 95% CI" if i == 0 else None,
        )
        if s.fence_measured:
            pairs_ax.scatter(
                i + 0.3,
                1 + m["fence_s"] / m["stock_median_s"],
                marker="D",
                color="#d9534f",
                s=22,
                zorder=3,
                label="1 + fence's own time / stock" if i == 0 else None,
            )
    pairs_ax.axhline(1.0, color="grey", lw=0.8)
    pairs_ax.axhline(TARGET_RATIO, color="#d9534f", lw=0.8, ls="--", label="target 1.05")
    pairs_ax.set_xticks(
        range(len(r.pairs)),
        [_tick(s) for s in r.pairs],
        fontsize=6,
        rotation=60,
        ha="right",
    )
    pairs_ax.set_ylabel("fenced / stock execution time (stock over Thrift for Connect)")
    pairs_ax.set_title("1. Per pair ratio (dots), median with its 95% CI", fontsize=10)
    pairs_ax.legend(fontsize=6, ncol=2)

    if r.history:
        for reader, style, color in (
            ("delta_log", "-", "#4a7fb5"),
            ("sql", "--", "#5cb85c"),
            ("describe_history", "--", "#d9534f"),
        ):
            rows = [h for h in r.history if h.reader == reader]
            if not rows:
                continue
            history_ax.plot(
                [h.commits for h in rows],
                [h.capture_verify * 1000 for h in rows],
                "s" + style,
                label=f"capture + verify, {READER_NAMES[reader].split(' (')[0]}",
                color=color,
            )
        rows = [h for h in r.history if h.reader == "delta_log"]
        history_ax.plot(
            [h.commits for h in rows],
            [h.median("write") * 1000 for h in rows],
            "o:",
            color="#999999",
            label="Delta's one-row INSERT (for scale)",
        )
        history_ax.set_xscale("log")
        history_ax.set_yscale("log")
        history_ax.set_xlabel("commits in the table")
        history_ax.set_ylabel("ms (median)")
        history_ax.legend(fontsize=7)
    history_ax.set_title("2. History length", fontsize=10)

    labels = [f"{c.method}\n{c.strategy.replace('_', ' ')}" for c in r.jobs]
    # No bar for stock over Connect: stock dbt-spark has no Connect method.
    stock = [
        statistics.mean(x.jobs for x in c.of("stock")) if c.of("stock") else math.nan
        for c in r.jobs
    ]
    fence = [statistics.mean(c.fence_statement_jobs) for c in r.jobs]
    rest = [
        statistics.mean(x.jobs for x in c.of("fenced")) - f
        for c, f in zip(r.jobs, fence, strict=True)
    ]
    x = range(len(r.jobs))
    jobs_ax.bar([i - 0.2 for i in x], stock, 0.4, label="stock", color="#999999")
    jobs_ax.bar([i + 0.2 for i in x], rest, 0.4, label="fenced", color="#4a7fb5")
    jobs_ax.bar(
        [i + 0.2 for i in x],
        fence,
        0.4,
        bottom=rest,
        color="#d9534f",
        label="fenced: the fence's own statements",
    )
    jobs_ax.set_xticks(list(x), labels, fontsize=6, rotation=20, ha="right")
    jobs_ax.set_ylabel("Spark jobs per model run")
    jobs_ax.set_title("3. Spark jobs", fontsize=10)
    jobs_ax.legend(fontsize=7)

    for (workload, mode), (style, colour) in {
        ("row", "stock"): ("o--", "#999999"),
        ("row", "fenced"): ("o-", "#4a7fb5"),
        ("partitions", "stock"): ("s--", "#bbbbbb"),
        ("partitions", "fenced"): ("s-", "#5cb85c"),
    }.items():
        runs = [c for c in r.contention if c.workload == workload and c.mode == mode]
        if runs:
            contention_ax.plot(
                [c.threads for c in runs],
                [c.per_minute for c in runs],
                style,
                color=colour,
                label=f"{mode}, {'one row' if workload == 'row' else 'disjoint partitions'}",
            )
    contention_ax.set_xlabel("runs at once (K)")
    contention_ax.set_ylabel("runs committed per minute")
    contention_ax.set_title("4. Contention", fontsize=10)
    if r.contention:
        contention_ax.legend(fontsize=7)

    for ax, part in (
        (pairs_ax, "pairs"),
        (history_ax, "history"),
        (jobs_ax, "jobs"),
        (contention_ax, "contention"),
    ):
        if not getattr(r, part) and part in r.kept:
            ax.text(
                0.5,
                0.5,
                _kept_note(r.kept[part]["section"]),
                ha="center",
                va="center",
                fontsize=8,
                wrap=True,
                transform=ax.transAxes,
            )

    fig.suptitle(f"dbt-fenced-spark benchmarks ({r.size}, {r.started})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _kept_note(section: list[str]) -> str:
    """A kept part's panel: its raw figures are gone, so the picture cannot draw it."""
    apart = next((line for line in section if line.startswith("Measured apart: ")), "")
    when = re.search(r" on (\S+ \S+) \(", apart)
    return (
        "Kept as docs/benchmarks.md published it"
        + (f" (measured {when.group(1)})" if when else "")
        + ":\nits raw figures are gone, so it is not drawn here"
    )


def now() -> str:
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
