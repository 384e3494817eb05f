"""The benchmark's lakehouse: one embedded Spark + Delta JVM for the whole process, dbt invoked
in this process (stock dbt-spark and fenced_spark alike), and the harness's Thrift and Connect
servers when a part asks for them."""

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from dbt.cli.main import dbtRunner

from dbt.adapters.fenced_spark import session
from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials
from dbt.adapters.fenced_spark.fence.delta.history import SqlHistory
from dbt.adapters.fenced_spark.fence.delta.log_tail import LogTail
from dbt.adapters.fenced_spark.fence.delta.sql_log import SqlLog
from dbt.adapters.fenced_spark.fence.history import Commit, HistoryReader
from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState, set_conf_sql
from dbt.adapters.fenced_spark.fence.scope import Scope
from dbt.adapters.fenced_spark.handles import spark_errors
from tests.harness.runner import SessionRunner

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PROJECT = os.path.join(HERE, "project")

Sql = Callable[[str], list[Any]]


class DbtFailed(RuntimeError):
    pass


@dataclass
class Call:
    kind: str  # history | execute
    sql: str
    seconds: float


# The session's reader; the SQL one (Thrift's and Connect's path); DESCRIBE HISTORY, which the
# SQL one replaced and still falls back to.
READERS = ("delta_log", "sql", "describe_history")


class FenceRunner(SessionRunner):
    """The harness's SqlRunner with each statement and probe timed. `reader` is the adapter's
    choice on the session (the Delta log), its SQL path, or DESCRIBE HISTORY."""

    def __init__(self, spark: Any, reader: str = "delta_log") -> None:
        super().__init__(spark)
        self.spark = spark
        self.reader = reader
        self.calls: list[Call] = []

    def execute(self, sql: str) -> None:
        started = time.perf_counter()
        super().execute(sql)
        self.calls.append(Call("execute", sql, time.perf_counter() - started))

    # The conflict analysis's reads, as FenceSql makes them.
    def fetch(self, sql: str) -> list[Any]:
        started = time.perf_counter()
        rows = super().fetch(sql)
        self.calls.append(Call("probe", sql, time.perf_counter() - started))
        return rows

    def fence(
        self, node: dict[str, str | None] | None = None, hints: dict[str, int] | None = None
    ) -> Fence:
        """A Fence as the adapter builds one for a step: its reader new, nothing cached but
        where the node's earlier steps found the table's log (`node`, over SQL) and where the
        last run left the table (`hints`, run_results.json)."""
        sql = SqlHistory(self)
        log: HistoryReader = {
            "delta_log": LogTail(self.spark, fallback=sql),
            "sql": SqlLog(self, node, hints),
            "describe_history": sql,
        }[self.reader]
        return Fence(self, nullcontext, log=TimedLog(self, log))

    # The tag's SET and RESET go through the session's conf, as FenceSql's do on a session.
    def set_session_conf(self, key: str, value: str | None) -> None:
        started = time.perf_counter()
        super().set_session_conf(key, value)
        self.calls.append(Call("execute", set_conf_sql(key, value), time.perf_counter() - started))

    # Verification asks the session which version its write committed (verify.session_commit).
    def session_conf(self, key: str) -> str | None:
        started = time.perf_counter()
        value = super().session_conf(key)
        self.calls.append(Call("conf", key, time.perf_counter() - started))
        return value


def strict_append(table: str, read_version: int, invocation: str, node: str) -> FenceState:
    """The fence's state for an append_if_unchanged run that captured `read_version`, with the
    scope its macro declares (materializations/incremental/conflicts.sql)."""
    return FenceState(
        table=table,
        display=table,
        strategy="append_if_unchanged",
        read_version=read_version,
        expected_version=read_version,
        invocation_id=invocation,
        node=node,
        scope=Scope(
            any_change=True,
            why_any="append_if_unchanged is refused by any change to the rows of its table",
        ),
    )


class TimedLog:
    """The fence's history reads, timed into the runner's calls as kind `history`."""

    def __init__(self, runner: FenceRunner, log: HistoryReader) -> None:
        self.runner, self.log = runner, log

    def _timed(self, what: str, read: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        with spark_errors():
            out = read()
        self.runner.calls.append(Call("history", what, time.perf_counter() - started))
        return out

    def latest_version(self, table: str, known: int | None = None) -> int:
        return self._timed(f"latest {table}", lambda: self.log.latest_version(table, known))

    def commits_since(self, table: str, version: int) -> list[Commit]:
        return self._timed(f"since {table}", lambda: self.log.commits_since(table, version))

    def recent(self, table: str, limit: int) -> Iterator[Commit]:
        return self._timed(f"recent {table}", lambda: iter(list(self.log.recent(table, limit))))

    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]:
        return self._timed(f"actions {table}", lambda: self.log.actions(table, versions))

    def settled(self, table: str) -> int | None:
        return self._timed(f"settled {table}", lambda: self.log.settled(table))


def project_args(project: str, target: str, target_path: str, log_path: str) -> list[str]:
    """dbt's arguments for a bench project whose profiles.yml sits beside it."""
    return [
        *("--project-dir", project, "--profiles-dir", project, "--target", target),
        *("--target-path", target_path, "--log-path", log_path),
    ]


class Lakehouse:
    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.folder = os.path.join(workdir, "lakehouse")
        os.environ["BENCH_LAKEHOUSE"] = self.folder  # read by project/profiles.yml
        self.creds = FencedSparkCredentials(schema="bench", folder=self.folder)
        # fenced_spark's own builder starts the JVM, as a first fenced dbt run would; stock
        # dbt-spark's session cursor then joins it (getOrCreate).
        self.spark = session.root_session(self.creds)
        self.servers: dict[str, Any] = {}
        self.clients: dict[str, Any] = {}

    @staticmethod
    def jars_cache() -> str:
        """Where fenced_spark's session keeps Delta's jars (the Makefile sets it in the clone)."""
        return str(FencedSparkCredentials(schema="bench", folder=REPO).jars_cache)

    def connection(self) -> Any:
        """A session exactly as fenced_spark opens one per dbt connection."""
        return session.connection_session(self.creds)

    def sql(self, statement: str) -> list[Any]:
        # A fresh session per call: nothing the harness sets may reach the root session that
        # stock dbt-spark runs on.
        return self.connection().sql(statement).collect()

    def start_server(self, kind: str) -> Any:
        """The harness's Thrift or Connect server for this lakehouse, started once."""
        if kind not in self.servers:
            from tests.harness import servers

            server = servers.start(kind, os.path.join(self.workdir, kind), self.creds.jars_cache)
            self.servers[kind] = server
            # read by project/profiles.yml
            os.environ[f"BENCH_{kind.upper()}_PORT"] = str(server.port)
        return self.servers[kind]

    def server_sql(self, kind: str, statement: str) -> list[Any]:
        server = self.start_server(kind)
        if kind not in self.clients:
            self.clients[kind] = server.client()
        return self.clients[kind].sql(statement).collect()

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers.clear()
        self.clients.clear()

    def run_batch(
        self,
        model: str,
        batch: int,
        target: str,
        tag: str,
        callbacks: Sequence[Callable[[Any], None]] = (),
        work: int = 0,
    ) -> dict[str, Any]:
        """One incremental run of `model` on source batch `batch`; `work` rows of busy work in
        its source (bench_batch) make its write statement longer without changing its rows."""
        return self.dbt(
            "run",
            "--select",
            model,
            "--vars",
            json.dumps({"batch": batch, "work": work}),
            target=target,
            tag=tag,
            callbacks=callbacks,
        )

    def dbt(
        self,
        *args: str,
        target: str,
        tag: str,
        callbacks: Sequence[Callable[[Any], None]] = (),
    ) -> dict[str, Any]:
        """Runs dbt here, in this process; returns its run_results.json."""
        os.environ["BENCH_TAG"] = tag
        # One target path per target and data set, as one deployment of the project each: its
        # run_results.json is its own last run's, which the fence's capture reads (a run of
        # another data set on the same target would leave the capture reading commits).
        target_path = os.path.join(self.workdir, "target", f"{target}_{tag}")
        errors: list[str] = []

        def collect(event: Any) -> None:
            if event.info.level == "error":
                errors.append(event.info.msg)

        result = dbtRunner(callbacks=[collect, *callbacks]).invoke(
            [
                "--quiet",
                *args,
                *project_args(PROJECT, target, target_path, os.path.join(self.workdir, "logs")),
            ]
        )
        if result.exception is not None:
            raise result.exception
        if not result.success:
            raise DbtFailed(f"dbt {' '.join(args)} --target {target} failed:\n" + "\n".join(errors))
        with open(os.path.join(target_path, "run_results.json")) as f:
            return json.load(f)


def rows_label(rows: int) -> str:
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}m"
    if rows % 1_000 == 0:
        return f"{rows // 1_000}k"
    return str(rows)


def build_source(sql: Sql, schema: str, rows: int, batches: int) -> None:
    """`schema`.raw: batch 0 is the target's `rows` rows; each later batch is 1% of that, half
    updates of recent keys and half new keys. Plain SQL, so a Thrift server can run it too."""
    batch = max(2, rows // 100)
    half = batch // 2
    # Range-ordered files, so the target's CTAS keeps them and a merge of recent keys
    # rewrites one or two files, not the table.
    files = max(2, rows // 100_000)
    sql(f"create schema if not exists {schema}")
    sql(f"drop table if exists {schema}.raw")
    sql(
        f"create table {schema}.raw using delta partitioned by (batch) as "
        "select id, 0 as batch, concat('payload-', id) as payload, "
        "(id % 1000) / 10.0 as amount, timestamp_seconds(1767225600 + id) as updated_at "
        f"from range(0, {rows}, 1, {files})"
    )
    sql(
        f"insert into {schema}.raw "
        f"select case when j.id < {half} then {rows} - 1 - ((k.id * {half} + j.id) % {5 * batch})"
        f" else {rows} + (k.id - 1) * {batch - half} + (j.id - {half}) end as id, "
        "cast(k.id as int) as batch, concat('payload-', k.id, '-', j.id) as payload, "
        "(j.id % 1000) / 10.0 + k.id as amount, "
        "timestamp_seconds(1767225600 + 86400 * k.id + j.id) as updated_at "
        f"from range(1, {batches + 1}, 1, 1) k cross join range(0, {batch}, 1, 1) j"
    )


def wait_idle(active: Callable[[], Any], settle: float = 0.3, timeout: float = 60) -> None:
    """Until no Spark job runs: Delta finishes some post-commit work asynchronously."""
    deadline = time.monotonic() + timeout
    time.sleep(settle)
    while active() and time.monotonic() < deadline:
        time.sleep(0.05)
