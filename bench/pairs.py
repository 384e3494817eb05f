"""Part 1: the same incremental model under stock dbt-spark and fenced_spark, A B A B on the
embedded session; then over the servers, stock and fenced over Thrift and fenced over Connect."""

import random
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

from bench.lakehouse import Lakehouse, Sql, build_source, rows_label
from dbt.adapters.fenced_spark.fence.delta.log_tail import LogTail
from dbt.adapters.fenced_spark.fence_sql import FenceSql

# fenced strategy -> (model, the stock dbt-spark strategy it is compared with)
STRATEGIES = {
    "merge": ("bench_merge", "merge"),
    "append_if_unchanged": ("bench_append_if_unchanged", "append"),
    "replace_where": ("bench_replace_where", "append"),
}
ORDER = ("stock", "fenced")  # A, B
# Over the servers: run -> dbt target. Stock dbt-spark has no Connect method, so fenced over
# Connect is compared with stock over Thrift, on the same server build.
# Stock runs twice: on dbt-spark's default Thrift profile (its users' reality: a statement
# still running at its first poll is polled again after poll_interval, 5 s) and with
# `poll_interval: 1`. Fenced runs on the default profile: its polling backs off from 10 ms.
SERVER_RUNS = {
    "stock": "stock_thrift",
    "stock_poll_1s": "stock_thrift_poll_1s",
    "thrift": "fenced_thrift",
    "connect": "fenced_connect",
}
SERVER_TARGETS = ("merge", "append_if_unchanged")  # #31: no slower than stock's on Thrift
SERVER_METHODS = ("thrift", "connect")  # the fenced methods; also the server each runs on
# Stock's runs over Thrift that each fenced run is compared with, by Series.stock_method.
SERVER_STOCKS = {"thrift": "stock", "thrift, poll_interval 1": "stock_poll_1s"}

# The statements only the fence sends (fence/protocol.py, fence_sql.py, the fenced
# materialization), as dbt logs them. The staging view is `<model>__fence_<12 hex>`
# (FencedSparkRelation.staging_view).
_STAGING = r"\S*__fence_[0-9a-f]{12}"
SET_RESET = "SET / RESET"
STAGING_VIEW = "staging view"
FENCE_KINDS = [
    (r"^(set|reset) spark\.databricks\.delta\.", SET_RESET),  # the commit tag, strictness
    (rf"^create (or replace )?temporary view {_STAGING}", STAGING_VIEW),
    (rf"^describe (table )?(extended )?{_STAGING}", "staging view's columns"),  # unique_key
    (rf"^drop view (if exists )?{_STAGING}", "DROP VIEW"),
    (r"^describe history", "DESCRIBE HISTORY"),
    (r"^describe detail", "DESCRIBE DETAIL"),  # the table's location, for delta.`path` reads
    # fence/delta/sql_log.py: the table's location (stock's own listing is `like '*'`, unquoted),
    # then commit files by path, and which exist (Spark's plan for reading them)
    (r"^show table extended in `[^`]*` like '[^*]", "SHOW TABLE EXTENDED"),
    (r"^select path, .* from binaryfile\.", "commit files"),
    (r"^explain select path from binaryfile\.", "commit file probes"),
    (r"^restore table", "RESTORE"),  # a revert; never in a clean run
]
LOG_READS = "history reads (LogTail)"
# Stock dbt-spark's temp view: the statement the fence's staging view stands in for.
STOCK_VIEW = "temporary view"
# dbt-spark's DESCRIBE of the target (its column list), in both runs. Over SQL the fence's
# own DESCRIBE (where the table's Delta log is) answers dbt-spark's: only what the fenced run
# sends beyond stock's count is the fence's.
TARGET_DESCRIBE = "the target's DESCRIBE beyond stock's"

# Fixed: re-rendering the same pairs gives the same intervals.
SEED = 20251124
RESAMPLES = 10_000


@dataclass
class Pair:
    batch: int
    stock: float
    fenced: float
    # The fenced run's own fence time (seconds): its statements by kind, its history reads.
    # Zero and empty in results from before it was measured.
    fence: float = 0.0
    fence_parts: dict[str, float] = field(default_factory=dict)
    fence_counts: dict[str, int] = field(default_factory=dict)
    stock_view: float = 0.0

    @property
    def ratio(self) -> float:
        return self.fenced / self.stock


def median_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the median."""
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    tail = int((1 - confidence) / 2 * resamples)
    return medians[tail], medians[resamples - 1 - tail]


@dataclass
class Series:
    rows: int
    strategy: str
    stock_strategy: str
    pairs: list[Pair] = field(default_factory=list)
    warmup: list[Pair] = field(default_factory=list)
    identical: bool = False  # stock's and fenced's tables hold the same rows afterwards
    table_rows: int = 0
    # fenced's method; stock runs on the session for "session", over Thrift otherwise.
    method: str = "session"
    # stock's: "session", or a key of SERVER_STOCKS; empty in results from before it was kept.
    stock: str = ""
    # Over Thrift, busy work that makes the write outlast the server's long poll (5 s), the
    # one case where stock's poll_interval sleep costs anything; 0: the plain model.
    work: int = 0

    @property
    def stock_method(self) -> str:
        return self.stock or ("session" if self.method == "session" else "thrift")

    def ratios(self) -> list[float]:
        return [p.ratio for p in self.pairs]

    @property
    def fence_measured(self) -> bool:
        return any(p.fence_parts for p in self.pairs)

    def summary(self) -> dict[str, float]:
        ratios = self.ratios()
        differences = [p.fenced - p.stock for p in self.pairs]
        ratio_low, ratio_high = median_interval(ratios)
        difference_low, difference_high = median_interval(differences)
        return {
            "median": statistics.median(ratios),
            "low": ratio_low,
            "high": ratio_high,
            "min": min(ratios),
            "max": max(ratios),
            "stock_median_s": statistics.median(p.stock for p in self.pairs),
            "fenced_median_s": statistics.median(p.fenced for p in self.pairs),
            "difference_s": statistics.median(differences),
            "difference_low_s": difference_low,
            "difference_high_s": difference_high,
            "fence_s": statistics.median(p.fence for p in self.pairs),
            "fence_share": statistics.median(p.fence / p.fenced for p in self.pairs),
            "stock_view_s": statistics.median(p.stock_view for p in self.pairs),
        }

    def part(self, kind: str) -> tuple[float, float]:
        """The median seconds and statements per fenced run of one kind of fence work."""
        return (
            statistics.median(p.fence_parts.get(kind, 0.0) for p in self.pairs),
            statistics.median(p.fence_counts.get(kind, 0) for p in self.pairs),
        )


def statement_kind(sql: str) -> str | None:
    # dbt prefixes its query comment; Spark takes any case and spacing.
    text = re.sub(r"/\*.*?\*/|--[^\n]*", " ", sql, flags=re.S).strip().lower()
    text = re.sub(r"\s+", " ", text)
    for pattern, kind in FENCE_KINDS:
        if re.match(pattern, text):
            return kind
    if re.match(r"^describe (table )?extended ", text):
        return TARGET_DESCRIBE  # not the staging view's: FENCE_KINDS has that one
    return STOCK_VIEW if re.match(r"^create (or replace )?temporary view", text) else None


class FenceClock:
    """The fence's own time in the dbt runs it watches. Statements come from dbt's query log:
    `SQLQuery` names the statement, then `SQLQueryStatus` on the same thread carries its
    `elapsed`. On the session the history reads go to `LogTail` and never reach the query
    log, so its methods are wrapped, in this process only, while `reading_log` lasts."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._running: dict[str, str] = {}  # thread -> kind of the statement it runs
        self._local = threading.local()

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        out = self.seconds, self.counts
        self.seconds, self.counts, self._running = {}, {}, {}
        return out

    def _add(self, kind: str, seconds: float, count: int = 1) -> None:
        self.seconds[kind] = self.seconds.get(kind, 0.0) + seconds
        self.counts[kind] = self.counts.get(kind, 0) + count

    def event(self, event: Any) -> None:
        thread = event.info.thread
        if event.info.name == "SQLQuery":
            kind = statement_kind(event.data.sql)
            # LogTail's fallback (DESCRIBE HISTORY) is already in the LogTail's time.
            if kind is None or getattr(self._local, "depth", 0):
                self._running.pop(thread, None)
            else:
                self._running[thread] = kind
        elif event.info.name == "SQLQueryStatus" and thread in self._running:
            self._add(self._running.pop(thread), float(event.data.elapsed))

    @contextmanager
    def _log_read(self, count: int = 1, kind: str = LOG_READS) -> Iterator[None]:
        # Only the outermost call counts: LogTail's methods call each other.
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        started = time.perf_counter()
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                self._add(kind, time.perf_counter() - started, count)

    def _timed(self, read: Callable[..., Any], kind: str = LOG_READS) -> Callable[..., Any]:
        @wraps(read)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self._log_read(kind=kind):
                return read(*args, **kwargs)

        return timed

    def _timed_lazily(self, read: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        # `recent` is a generator: its work happens at each next(), as the fence stops early.
        @wraps(read)
        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            items, done, first = read(*args, **kwargs), object(), True
            while True:
                with self._log_read(count=int(first)):
                    item = next(items, done)
                if item is done:
                    return
                first = False
                yield item

        return timed

    def _timed_conf(self, send: Callable[..., Any]) -> Callable[..., Any]:
        # Counted only where it sent a statement or conf call: over Thrift a RESET may wait for
        # a later statement, and a SET of what the session still holds is not sent (FenceSql).
        @wraps(send)
        def timed(runner: Any, *args: Any, **kwargs: Any) -> Any:
            sent = runner.connections.statements_sent()
            try:
                with self._log_read(count=0, kind=SET_RESET):
                    return send(runner, *args, **kwargs)
            finally:
                if runner.connections.statements_sent() > sent:
                    self._add(SET_RESET, 0.0)

        return timed

    @contextmanager
    def reading_log(self) -> Iterator[None]:
        """Also the fence's conf settings: on the session and over Connect they go through the
        session's conf, not dbt's query log (FenceSql.set_session_conf); over Thrift they are
        SQL, and the statement inside is not counted twice."""
        originals = {k: getattr(LogTail, k) for k in ("latest_version", "commits_since", "recent")}
        set_conf = FenceSql.send_conf  # what set_session_conf sends, when it sends anything
        LogTail.latest_version = self._timed(originals["latest_version"])  # type: ignore[method-assign]
        LogTail.commits_since = self._timed(originals["commits_since"])  # type: ignore[method-assign]
        LogTail.recent = self._timed_lazily(originals["recent"])  # type: ignore[method-assign]
        FenceSql.send_conf = self._timed_conf(set_conf)  # type: ignore[method-assign]
        try:
            yield
        finally:
            for name, method in originals.items():
                setattr(LogTail, name, method)
            FenceSql.send_conf = set_conf  # type: ignore[method-assign]


def model_seconds(results: dict, adapter: str) -> float:
    (node,) = results["results"]
    if node["status"] != "success":
        raise RuntimeError(f"{node['unique_id']} on {adapter}: {node['status']}")
    if adapter == "fenced":
        # Proof that the run was fenced, not handed to dbt-spark.
        response = node["adapter_response"]
        if response.get("fence_outcome") != "committed":
            raise RuntimeError(f"{node['unique_id']}: not a fenced commit: {response}")
    return float(node["execution_time"])


def checksum(sql: Sql, table: str) -> tuple:
    (row,) = sql(
        f"select count(*), sum(cast(hash(id, batch, payload, amount, updated_at) as bigint)) "
        f"from {table}"
    )
    return tuple(row)


@dataclass
class Timed:
    seconds: float
    parts: dict[str, float]  # kind -> seconds, from the FenceClock
    counts: dict[str, int]


def timed_run(
    house: Lakehouse,
    clock: FenceClock,
    model: str,
    batch: int,
    tag: str,
    target: str,
    work: int = 0,
) -> Timed:
    adapter = target.split("_")[0]  # profiles.yml's targets: <adapter>[_<method>]
    clock.take()  # nothing from between runs (a full refresh's compile-time reads)
    results = house.run_batch(
        model, batch, target=target, tag=tag, callbacks=[clock.event], work=work
    )
    seconds = model_seconds(results, adapter)
    return Timed(seconds, *clock.take())


def pair_of(batch: int, stock: Timed, fenced: Timed) -> Pair:
    stocks_too = (STOCK_VIEW, TARGET_DESCRIBE)
    fence_parts = {k: v for k, v in fenced.parts.items() if k not in stocks_too}
    fence_counts = {k: v for k, v in fenced.counts.items() if k not in stocks_too}
    sent = fenced.counts.get(TARGET_DESCRIBE, 0)
    beyond = sent - stock.counts.get(TARGET_DESCRIBE, 0)
    if beyond > 0:  # each at what one cost in the fenced run
        fence_parts[TARGET_DESCRIBE] = fenced.parts[TARGET_DESCRIBE] * beyond / sent
        fence_counts[TARGET_DESCRIBE] = beyond
    return Pair(
        batch,
        stock.seconds,
        fenced.seconds,
        fence=sum(fence_parts.values()),
        fence_parts=fence_parts,
        fence_counts=fence_counts,
        # Only where the fenced run made a staging view: a SQL model's write with
        # on_schema_change 'ignore' reads the model SQL itself, and has no view to offset.
        stock_view=stock.parts.get(STOCK_VIEW, 0.0) if fenced.counts.get(STAGING_VIEW) else 0.0,
    )


def measure(house: Lakehouse, clock: FenceClock, model: str, batch: int, tag: str) -> Pair:
    runs = {adapter: timed_run(house, clock, model, batch, tag, adapter) for adapter in ORDER}
    return pair_of(batch, runs["stock"], runs["fenced"])


def carryover_balanced(names: Sequence[str], batch: int) -> list[str]:
    """The order of batch `batch`'s runs, from a Williams design: over a cycle of len(names)
    batches (twice that for an odd count) each run goes first, second, ... equally often and
    directly follows each other run equally often. A plain rotation keeps who follows whom
    fixed: a run that always follows the same other run inherits that run's aftermath (a
    server's GC, its cleanup of a MERGE's materialized source) in every pair."""
    n = len(names)
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(i + shift) % n for i in first] for shift in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    rows = _chained(rows)
    return [names[i] for i in rows[(batch - 1) % len(rows)]]


def _chained(rows: list[list[int]]) -> list[list[int]]:
    """The rows in an order where a batch's first run never follows itself from the batch
    before (the cycle wrapping round) and no such pair comes more often than it must: a batch's
    first run follows the last batch's last run as directly as any two runs in one batch. For
    three runs each ordered pair comes once; for two, one run must follow itself: as given."""
    n = len(rows[0])
    most = -(-len(rows) // (n * (n - 1)))
    used: Counter[tuple[int, int]] = Counter()

    def search(order: list[int]) -> list[int] | None:
        if len(order) == len(rows):
            wrap = (rows[order[-1]][-1], rows[order[0]][0])
            return order if wrap[0] != wrap[1] and used[wrap] < most else None
        for i in range(len(rows)):
            pair = (rows[order[-1]][-1], rows[i][0])
            if i in order or pair[0] == pair[1] or used[pair] >= most:
                continue
            used[pair] += 1
            found = search([*order, i])
            if found:
                return found
            used[pair] -= 1
        return None

    order = search([0]) if n > 2 else None
    return [rows[i] for i in order] if order else rows


def server_order(
    batch: int,
    methods: Sequence[str] = SERVER_METHODS,
    stocks: Sequence[str] = tuple(SERVER_STOCKS),
) -> list[str]:
    runs = {SERVER_STOCKS[stock] for stock in stocks} | set(methods)
    return carryover_balanced([name for name in SERVER_RUNS if name in runs], batch)


def measure_servers(
    house: Lakehouse,
    clock: FenceClock,
    model: str,
    batch: int,
    tag: str,
    methods: Sequence[str] = SERVER_METHODS,
    work: int = 0,
    stocks: Sequence[str] = tuple(SERVER_STOCKS),
) -> dict[tuple[str, str], Pair]:
    runs = {
        name: timed_run(house, clock, model, batch, tag, SERVER_RUNS[name], work)
        for name in server_order(batch, methods, stocks)
    }
    return {
        (method, stock): pair_of(batch, runs[SERVER_STOCKS[stock]], runs[method])
        for method in methods
        for stock in stocks
    }


def _print_pair(tag: str, strategy: str, pair: Pair, warm: bool) -> None:
    print(
        f"  {tag} {strategy:<20} batch {pair.batch}: stock {pair.stock:6.2f}s"
        f"  fenced {pair.fenced:6.2f}s  ratio {pair.ratio:.3f}"
        f"  fence's own {pair.fence * 1000:5.0f} ms" + ("  (warm-up)" if warm else ""),
        flush=True,
    )


def _print_servers(
    tag: str, strategy: str, measured: dict[tuple[str, str], Pair], warm: bool
) -> None:
    batch = next(iter(measured.values())).batch
    methods = list(dict.fromkeys(method for method, _ in measured))
    stocks = list(dict.fromkeys(stock for _, stock in measured))
    shown = "".join(
        f"  stock {stock} {measured[(methods[0], stock)].stock:6.2f}s" for stock in stocks
    )
    fenced = "".join(
        f"  {method} {p.fenced:6.2f}s ({p.ratio:.3f}, fence's own {p.fence * 1000:4.0f} ms)"
        for (method, stock), p in measured.items()
        if stock == "thrift"
    )
    order = " ".join(server_order(batch, methods, stocks))
    print(
        f"  {tag} {strategy:<20} batch {batch} ({order}):"
        f"{shown}{fenced}" + ("  (warm-up)" if warm else ""),
        flush=True,
    )


def session_series(
    house: Lakehouse, clock: FenceClock, rows: int, pairs: int, warmup: int
) -> list[Series]:
    out = []
    tag = rows_label(rows)
    build_source(house.sql, f"bench_src_{tag}", rows, warmup + pairs)
    for strategy, (model, stock_strategy) in STRATEGIES.items():
        series = Series(rows, strategy, stock_strategy)
        for adapter in ORDER:
            house.dbt("run", "--full-refresh", "--select", model, target=adapter, tag=tag)
        for batch in range(1, warmup + pairs + 1):
            pair = measure(house, clock, model, batch, tag)
            (series.warmup if batch <= warmup else series.pairs).append(pair)
            _print_pair(tag, strategy, pair, batch <= warmup)
        stock = checksum(house.sql, f"bench_stock_{tag}.{model}")
        fenced = checksum(house.sql, f"bench_fenced_{tag}.{model}")
        series.identical = stock == fenced
        series.table_rows = int(fenced[0])
        out.append(series)
    return out


def server_series(
    house: Lakehouse,
    clock: FenceClock,
    rows: int,
    pairs: int,
    warmup: int,
    methods: Sequence[str] = SERVER_METHODS,
    strategies: Sequence[str] = tuple(STRATEGIES),
    work: int = 0,
    stocks: Sequence[str] = tuple(SERVER_STOCKS),
) -> list[Series]:
    out = []
    # Its own tables for each set of runs: stock's table starts afresh with the fenced one's.
    tag = (
        rows_label(rows)
        + ("_long" if work else "")
        + "".join(f"_{m}" for m in methods if m != "thrift")
    )
    # Each server has its own metastore and warehouse: each gets the same source. Stock runs
    # over Thrift.
    for kind in dict.fromkeys(("thrift", *methods)):
        build_source(
            lambda sql, kind=kind: house.server_sql(kind, sql),
            f"bench_src_{tag}",
            rows,
            warmup + pairs,
        )
    for strategy in strategies:
        model, stock_strategy = STRATEGIES[strategy]
        series = {
            (m, st): Series(rows, strategy, stock_strategy, method=m, stock=st, work=work)
            for m in methods
            for st in stocks
        }
        for name in server_order(1, methods, stocks):
            target = SERVER_RUNS[name]
            house.dbt("run", "--full-refresh", "--select", model, target=target, tag=tag)
        for batch in range(1, warmup + pairs + 1):
            measured = measure_servers(house, clock, model, batch, tag, methods, work, stocks)
            for method, pair in measured.items():
                s = series[method]
                (s.warmup if batch <= warmup else s.pairs).append(pair)
            _print_servers(tag, strategy, measured, batch <= warmup)
        stock = checksum(lambda q: house.server_sql("thrift", q), f"bench_stock_{tag}.{model}")
        for (method, _), s in series.items():
            fenced = checksum(
                lambda q, m=method: house.server_sql(m, q), f"bench_fenced_{tag}.{model}"
            )
            s.identical = stock == fenced
            s.table_rows = int(fenced[0])
        out += series.values()
    return out


# Seconds of busy work for the long write: with the write's own second or so, it ends between
# the server's first long poll (5 s) and stock's next poll, poll_interval (5 s) later.
LONG_WRITE_BUSY_S = 5.5
_PROBE_WORK = 4_000_000_000


def long_write_work(house: Lakehouse) -> int:
    """The rows of busy work that take LONG_WRITE_BUSY_S on this Thrift server, so that the
    long-write series means the same on a faster or slower machine."""
    probe = f"select sum(id % 7) from range(0, {_PROBE_WORK}, 1, 2)"
    house.server_sql("thrift", probe)  # compiled and warm
    started = time.perf_counter()
    house.server_sql("thrift", probe)
    seconds = time.perf_counter() - started
    return int(_PROBE_WORK * LONG_WRITE_BUSY_S / seconds)


def run(
    house: Lakehouse,
    sizes: tuple[int, ...],
    pairs: int,
    warmup: int,
    servers: tuple[tuple[int, ...], int] | None = None,
) -> list[Series]:
    """The session series at each size; then, with `servers` = (sizes, pairs), the server
    series at each of those sizes and, over Thrift, merge and append_if_unchanged with a
    write that outlasts the server's long poll (at the smallest size)."""
    out = []
    clock = FenceClock()
    with clock.reading_log():
        for rows in sizes:
            out += session_series(house, clock, rows, pairs, warmup)
        if servers:
            server_sizes, server_pairs = servers
            for rows in server_sizes:
                # Over Thrift and over Connect in batches of their own: on one machine a run
                # right after the other server's shares it with that JVM's aftermath (its GC,
                # the cleanup of a MERGE's materialized source), which a cluster's servers do
                # not share. Fenced over Connect is compared with stock on the default profile.
                out += server_series(house, clock, rows, server_pairs, warmup, ("thrift",))
                out += server_series(
                    house, clock, rows, server_pairs, warmup, ("connect",), stocks=("thrift",)
                )
            work = long_write_work(house)
            print(f"  long write: {work:,} rows of busy work", flush=True)
            out += server_series(
                house,
                clock,
                min(server_sizes),
                server_pairs,
                warmup,
                methods=("thrift",),
                strategies=SERVER_TARGETS,
                work=work,
            )
    return out
