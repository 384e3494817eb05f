"""Part 3: the Spark jobs the fence adds to one model run, counted by Spark itself.

Session: the SparkContext's status tracker. Every statement dbt sends is tagged with its own
job group (a thread-local property that Delta's asynchronous work inherits), so each job is
traced back to the SQL that caused it. Thrift and Connect: the server's REST API lists every
job. The Thrift server sets the statement as the job's description; Spark Connect describes a
job by its plan, cut to 128 characters (dbt's query comment alone is longer), so each statement
dbt sends over Connect carries a session tag of its own, which Spark Connect copies into its
jobs' tags. Stock dbt-spark has no Connect method: over Connect, fenced runs only.
"""

import itertools
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
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
    (r"^select 1$", "SELECT 1 (opening a Connect session)"),
    (r"^select path, .* from binaryfile\.", "commit files (SqlLog)"),
    (r"^explain select path from binaryfile\.", "commit file probes (SqlLog)"),
    (r"^select", "SELECT"),
    (r"^create", "CREATE"),
]

FENCE_ONLY = (
    "DESCRIBE HISTORY",
    "commit files (SqlLog)",
    "commit file probes (SqlLog)",
    "SET / RESET",
    "DROP VIEW",
)
OPEN_CHECK = "select 1"  # connect.open_session's liveness check


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
        """Fenced minus stock per batch; none over Connect, where stock dbt-spark cannot run."""
        stock = self.of("stock")
        if not stock:
            return []
        return [f.jobs - s.jobs for s, f in zip(stock, self.of("fenced"), strict=True)]

    @property
    def fence_statement_jobs(self) -> list[int]:
        """Jobs of the statements only the fence sends."""
        return [sum(r.jobs_by_kind.get(k, 0) for k in FENCE_ONLY) for r in self.of("fenced")]


class Statements:
    """The statements dbt sent since the last count, each under a tag of its own."""

    def __init__(self) -> None:
        self.sql: dict[str, str] = {}
        self._numbers = itertools.count()
        self._lock = threading.Lock()

    def tag(self, sql: str) -> str:
        with self._lock:
            tag = f"bench-statement-{next(self._numbers)}"
            self.sql[tag] = sql
        return tag

    def count_into(self, run: Run) -> None:
        for sql in self.sql.values():
            run.add(kind(sql), 0, statements=1)
        self.sql.clear()


@contextmanager
def wrapping_execute(before: Callable[[Any, str], None]) -> Iterator[None]:
    """`before(wrapper, sql)` ahead of every statement dbt sends through a session-like
    connection: stock dbt-spark's session, fenced_spark's session and Connect."""
    from dbt.adapters.spark.session import SessionConnectionWrapper

    original = SessionConnectionWrapper.execute

    def execute(self: Any, sql: str, bindings: Any = None) -> None:
        before(self, sql)
        return original(self, sql, bindings)

    SessionConnectionWrapper.execute = execute  # type: ignore[method-assign]
    try:
        yield
    finally:
        SessionConnectionWrapper.execute = original  # type: ignore[method-assign]


class SessionProbe:
    """Tags each statement dbt sends through the session cursor with its own job group."""

    def __init__(self, house: Lakehouse) -> None:
        self.context = house.spark.sparkContext
        self.tracker = self.context.statusTracker()
        self.statements = Statements()
        # No job has a group yet: these are all jobs so far (older ones may be evicted).
        self._next_job = max(self.tracker.getJobIdsForGroup(None), default=-1) + 1

    def last_job(self) -> int:
        # Job ids are consecutive; the tracker lists jobs only by group, so walk the ids.
        while self.tracker.getJobInfo(self._next_job) is not None:
            self._next_job += 1
        return self._next_job - 1

    def tagging(self) -> AbstractContextManager[None]:
        def before(wrapper: Any, sql: str) -> None:
            # Kept until this thread's next statement: a query's jobs run at fetchall().
            self.context.setLocalProperty("spark.jobGroup.id", self.statements.tag(sql))

        return wrapping_execute(before)

    def count(self, run: Run, first_job: int) -> None:
        wait_idle(self.tracker.getActiveJobsIds)
        last = self.last_job()
        run.jobs = last - first_job
        sent = dict(self.statements.sql)
        self.statements.count_into(run)
        store = self.context._jsc.sc().statusStore()
        for job in range(first_job + 1, last + 1):
            group = store.job(job).jobGroup()
            sql = sent.get(group.get()) if group.isDefined() else None
            run.add(kind(sql) if sql is not None else "(no statement)", 1)


class ServerProbe:
    """Any harness server's jobs, from its REST API (`ui_port`)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.statements = Statements()

    def jobs(self) -> list[dict]:
        return self.server.rest("jobs")

    def last_job(self) -> int:
        return max((j["jobId"] for j in self.jobs()), default=-1)

    @contextmanager
    def tagging(self) -> Iterator[None]:
        if self.server.kind != "connect":  # Thrift already describes each job by its SQL
            yield
            return
        from dbt.adapters.fenced_spark.handles import ConnectHandle

        def before(wrapper: Any, sql: str) -> None:
            if isinstance(wrapper.handle, ConnectHandle):
                # Thread-local in the client, kept until this thread's next statement.
                wrapper.handle.spark.clearTags()
                wrapper.handle.spark.addTag(self.statements.tag(sql))

        with wrapping_execute(before):
            yield

    def statement(self, job: dict, sent: dict[str, str]) -> str | None:
        if self.server.kind == "thrift":
            return job.get("description") or job.get("name", "")
        # Connect's tag: SparkConnect_SessionTag_User_<user>_Session_<id>_Tag_<ours>
        for tag in job.get("jobTags", []):
            ours = re.search(r"_Tag_(bench-statement-\d+)$", tag)
            if ours:
                return sent.get(ours.group(1))
        # Every statement dbt sends is tagged; the only query before the first one on a
        # session is connect.open_session's liveness check.
        return OPEN_CHECK if "sql {" in (job.get("description") or "") else None

    def count(self, run: Run, first_job: int) -> None:
        wait_idle(self.server.active_job_ids)
        new = [j for j in self.jobs() if j["jobId"] > first_job]
        run.jobs = len(new)
        sent = dict(self.statements.sql)
        self.statements.count_into(run)
        for job in new:
            sql = self.statement(job, sent)
            run.add(kind(sql) if sql is not None else "(no statement)", 1)


def adapters(method: str) -> tuple[str, ...]:
    return ("fenced",) if method == "connect" else ORDER  # no stock dbt-spark over Connect


def _measure(house: Lakehouse, method: str, runs: int, probe: Any) -> list[Count]:
    suffix = "" if method == "session" else f"_{method}"
    out = []
    for strategy, (model, stock_strategy) in STRATEGIES.items():
        count = Count(method, strategy, stock_strategy)
        for adapter in adapters(method):
            house.dbt("run", "--full-refresh", "--select", model, target=adapter + suffix, tag=TAG)
        for batch in range(1, runs + 1):
            for adapter in adapters(method):
                run = Run(adapter, batch, 0)
                first = probe.last_job()
                results = house.run_batch(model, batch, target=adapter + suffix, tag=TAG)
                run.seconds = model_seconds(results, adapter)
                probe.count(run, first)
                count.runs.append(run)
        stock = [r.jobs for r in count.of("stock")] if count.of("stock") else "–"
        print(
            f"  {method:<7} {strategy:<20} jobs per run: stock {stock},"
            f" fenced {[r.jobs for r in count.of('fenced')]}",
            flush=True,
        )
        out.append(count)
    return out


def run(house: Lakehouse, rows: int, runs: int, servers: bool = True) -> list[Count]:
    out = []
    build_source(house.sql, f"bench_src_{TAG}", rows, runs)
    probe = SessionProbe(house)
    with probe.tagging():
        out += _measure(house, "session", runs, probe)
    for kind in ("thrift", "connect") if servers else ():
        server = house.start_server(kind)
        build_source(
            lambda sql, kind=kind: house.server_sql(kind, sql), f"bench_src_{TAG}", rows, runs
        )
        server_probe = ServerProbe(server)
        with server_probe.tagging():
            out += _measure(house, kind, runs, server_probe)
    return out
