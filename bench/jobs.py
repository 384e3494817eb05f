"""Part 3: the Spark jobs the fence adds to one model run, counted by Spark itself.

Session: the SparkContext's status tracker. Every statement dbt sends is tagged with its own
job group (a thread-local property that Delta's asynchronous work inherits), so each job is
traced back to the SQL that caused it. Thrift: the server's REST API lists every job with the
statement it ran for (the Thrift server sets the statement as the job's description).
"""

import itertools
import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bench.lakehouse import Lakehouse, build_source, wait_idle
from bench.pairs import ORDER, STRATEGIES, model_seconds

TAG = "jobs"
KINDS = [
    (r"^describe history", "DESCRIBE HISTORY"),
    (r"^(set|reset) ", "SET / RESET"),
    (r"^create (or replace )?temporary view", "CREATE TEMPORARY VIEW"),
    (r"^drop view", "DROP VIEW"),
    (r"^merge into", "MERGE"),
    (r"^insert into .*replace where", "INSERT ... REPLACE WHERE"),
    (r"^insert into", "INSERT INTO"),
    (r"^describe (table )?extended", "DESCRIBE EXTENDED"),
    (r"^describe", "DESCRIBE"),
    (r"^show table extended", "SHOW TABLE EXTENDED"),
    (r"^show", "SHOW"),
    (r"^select", "SELECT"),
    (r"^create", "CREATE"),
]

FENCE_ONLY = ("DESCRIBE HISTORY", "SET / RESET", "DROP VIEW")


def kind(sql: str) -> str:
    # Delta prefixes its own jobs' descriptions with "delta: "; dbt prefixes a query comment.
    text = re.sub(r"^(delta: )*", "", sql or "", flags=re.I)
    text = re.sub(r"/\*.*?\*/|--[^\n]*", " ", text, flags=re.S).strip().lower()
    text = re.sub(r"\s+", " ", text)
    for pattern, name in KINDS:
        if re.match(pattern, text):
            return name
    return text[:30] or "(none)"


@dataclass
class Run:
    adapter: str
    batch: int
    jobs: int
    statements: dict[str, int] = field(default_factory=dict)  # kind -> statements sent
    jobs_by_kind: dict[str, int] = field(default_factory=dict)  # kind -> Spark jobs
    seconds: float = 0.0

    def add(self, kind: str, jobs: int, statements: int = 0) -> None:
        self.jobs_by_kind[kind] = self.jobs_by_kind.get(kind, 0) + jobs
        if statements:
            self.statements[kind] = self.statements.get(kind, 0) + statements


@dataclass
class Count:
    method: str
    strategy: str
    stock_strategy: str
    runs: list[Run] = field(default_factory=list)

    def of(self, adapter: str) -> list[Run]:
        return [r for r in self.runs if r.adapter == adapter]

    @property
    def extra(self) -> list[int]:
        return [f.jobs - s.jobs for s, f in zip(self.of("stock"), self.of("fenced"), strict=True)]

    @property
    def fence_statement_jobs(self) -> list[int]:
        """Jobs of the statements only the fence sends."""
        return [sum(r.jobs_by_kind.get(k, 0) for k in FENCE_ONLY) for r in self.of("fenced")]


class SessionProbe:
    """Tags each statement dbt sends through the session cursor with its own job group."""

    def __init__(self, house: Lakehouse) -> None:
        self.context = house.spark.sparkContext
        self.tracker = self.context.statusTracker()
        self.statements: dict[str, str] = {}
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        # No job has a group yet: these are all jobs so far (older ones may be evicted).
        self._next_job = max(self.tracker.getJobIdsForGroup(None), default=-1) + 1

    def last_job(self) -> int:
        # Job ids are consecutive; the tracker lists jobs only by group, so walk the ids.
        while self.tracker.getJobInfo(self._next_job) is not None:
            self._next_job += 1
        return self._next_job - 1

    @contextmanager
    def tagging(self) -> Iterator[None]:
        from dbt.adapters.spark.session import SessionConnectionWrapper

        original = SessionConnectionWrapper.execute
        probe = self

        def execute(self: Any, sql: str, bindings: Any = None) -> None:
            with probe._lock:
                group = f"bench-statement-{next(probe._numbers)}"
                probe.statements[group] = sql
            # Kept until this thread's next statement: a query's jobs run at fetchall().
            probe.context.setLocalProperty("spark.jobGroup.id", group)
            return original(self, sql, bindings)

        SessionConnectionWrapper.execute = execute  # type: ignore[method-assign]
        try:
            yield
        finally:
            SessionConnectionWrapper.execute = original  # type: ignore[method-assign]

    def count(self, run: Run, first_job: int) -> None:
        wait_idle(self.tracker.getActiveJobsIds)
        last = self.last_job()
        run.jobs = last - first_job
        for sql in self.statements.values():
            run.add(kind(sql), 0, statements=1)
        store = self.context._jsc.sc().statusStore()
        for job in range(first_job + 1, last + 1):
            group = store.job(job).jobGroup()
            sql = self.statements.get(group.get()) if group.isDefined() else None
            run.add(kind(sql) if sql is not None else "(no statement)", 1)
        self.statements.clear()


class ThriftProbe:
    def __init__(self, server: Any) -> None:
        self.base = f"http://127.0.0.1:{server.ui_port}/api/v1/applications"

    def jobs(self) -> list[dict]:
        with urllib.request.urlopen(self.base, timeout=10) as response:
            app = json.load(response)[0]["id"]
        with urllib.request.urlopen(f"{self.base}/{app}/jobs", timeout=10) as response:
            return json.load(response)

    def last_job(self) -> int:
        return max((j["jobId"] for j in self.jobs()), default=-1)

    def count(self, run: Run, first_job: int) -> None:
        wait_idle(lambda: [j for j in self.jobs() if j["status"] == "RUNNING"])
        new = [j for j in self.jobs() if j["jobId"] > first_job]
        run.jobs = len(new)
        for job in new:
            run.add(kind(job.get("description") or job.get("name", "")), 1)


def _measure(house: Lakehouse, method: str, runs: int, probe: Any) -> list[Count]:
    suffix = "" if method == "session" else "_thrift"
    out = []
    for strategy, (model, stock_strategy) in STRATEGIES.items():
        count = Count(method, strategy, stock_strategy)
        for adapter in ORDER:
            house.dbt("run", "--full-refresh", "--select", model, target=adapter + suffix, tag=TAG)
        for batch in range(1, runs + 1):
            for adapter in ORDER:
                run = Run(adapter, batch, 0)
                first = probe.last_job()
                results = house.run_batch(model, batch, target=adapter + suffix, tag=TAG)
                run.seconds = model_seconds(results, adapter)
                probe.count(run, first)
                count.runs.append(run)
        print(
            f"  {method:<7} {strategy:<20} jobs per run: stock "
            f"{[r.jobs for r in count.of('stock')]}, fenced {[r.jobs for r in count.of('fenced')]}",
            flush=True,
        )
        out.append(count)
    return out


def run(house: Lakehouse, rows: int, runs: int, thrift: bool = True) -> list[Count]:
    out = []
    build_source(house.sql, f"bench_src_{TAG}", rows, runs)
    probe = SessionProbe(house)
    with probe.tagging():
        out += _measure(house, "session", runs, probe)
    if thrift:
        server = house.start_server("thrift")
        build_source(lambda sql: house.server_sql("thrift", sql), f"bench_src_{TAG}", rows, runs)
        out += _measure(house, "thrift", runs, ThriftProbe(server))
    return out
