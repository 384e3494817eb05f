"""Reading a Delta table's truth, and writing to it as somebody else."""

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.fenced_spark.fence.delta.words import USER_METADATA
from dbt.adapters.fenced_spark.fence.history import FenceTag
from dbt.adapters.fenced_spark.fence.state import set_conf_sql
from dbt.adapters.fenced_spark.fence_sql import FenceSql
from tests.harness.writer import ForeignWriter, active_jobs, job_running_for


@dataclass
class HistoryEntry:
    version: int
    operation: str
    read_version: int | None
    tag: dict[str, Any] | None
    user_metadata: str | None
    metrics: dict[str, str]


def history(spark, table: str) -> list[HistoryEntry]:
    rows = spark.sql(f"DESCRIBE HISTORY {table}").collect()
    entries = []
    for row in rows:
        tag = None
        if row.userMetadata:
            try:
                tag = json.loads(row.userMetadata)
            except ValueError:
                tag = None
        metrics = row.operationMetrics or {}
        metrics = json.loads(metrics) if isinstance(metrics, str) else metrics  # Thrift: JSON
        entries.append(
            HistoryEntry(
                row.version, row.operation, row.readVersion, tag, row.userMetadata, dict(metrics)
            )
        )
    return sorted(entries, key=lambda e: e.version)


def ours(entries: list[HistoryEntry], step: str = "write") -> list[HistoryEntry]:
    return [e for e in entries if e.tag and e.tag.get("step") == step]


def commit_actions(spark, table: str, version: int) -> list[tuple[str, dict]]:
    """Commit `version`'s actions as (kind, body), in its file's order, read from the table's
    Delta log by the engine (on every profile): what DESCRIBE HISTORY does not show, such as
    the fence's SetTransaction."""
    location = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0].location
    path = f"{str(location).rstrip('/')}/_delta_log/{version:020d}.json"
    lines = spark.sql(f"SELECT value FROM text.`{path}`").collect()
    return [next(iter(json.loads(line[0]).items())) for line in lines]


def fence_txn(spark, table: str, version: int) -> int | None:
    """The version of the fence's SetTransaction in commit `version` (None: it has none)."""
    txns = [b for k, b in commit_actions(spark, table, version) if k == "txn"]
    return next((int(b["version"]) for b in txns if b["appId"] == "dbt-fenced-spark"), None)


def rows(spark, sql: str) -> list[tuple]:
    return [tuple(r) for r in spark.sql(sql).collect()]


def response_of(project, name: str) -> dict:
    """The node's adapter_response as target/run_results.json records it."""
    path = Path(project.project_root) / "target" / "run_results.json"
    results = json.loads(path.read_text())["results"]
    [found] = [r for r in results if r["unique_id"].endswith(f".{name}")]
    return found["adapter_response"]


def dead_run_merge(spark, node: str, vb: int, merge: str) -> None:
    """What a run killed between its commit and its verdict leaves (test_crash.py makes it
    with SIGKILL): its MERGE, computed from vB and tagged so, and nothing after it."""
    dead = ForeignWriter(spark)
    tag = FenceTag(str(uuid.uuid4()), node, "merge", vb, 1, "write", vb)
    dead.sql(set_conf_sql(USER_METADATA, tag.to_json()))
    dead.sql(merge)


def max_concurrent(spans) -> int:
    """The most of these (start, end) intervals that were under way at one instant."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, step in events:  # an end sorts before a start at the same instant: no overlap
        running += step
        most = max(most, running)
    return most


def execute_spans(results) -> dict[str, tuple[Any, Any]]:
    """Each node's execute phase (start, end), from dbt's own timing of the run."""
    spans = {}
    for result in results.results:
        [execute] = [t for t in result.timing if t.name == "execute"]
        spans[result.node.name] = (execute.started_at, execute.completed_at)
    return spans


def without_leading_comments(sql: str) -> str:
    # dbt-core's get_merge_sql starts with a `--` comment line.
    return re.sub(r"^(\s*--[^\n]*\n)*\s*", "", sql)


class ForeignAroundWrite(FenceSql):
    """The fence's runner with another writer committing right before our write statement
    starts (after the pre-check), and optionally right after it lands; `times` caps it.
    `before_restore` lands right before our revert's RESTORE takes its snapshot (a list: one
    before each RESTORE, in turn). `writes`: the statements (their first words) that count as
    our write; a step's DELETE, say."""

    def __init__(
        self,
        connections,
        writer,
        before,
        after=None,
        times=None,
        before_restore=None,
        writes=("merge", "insert into"),
        described=None,
    ):
        super().__init__(connections, described)
        self.writer, self.before, self.after, self.times = writer, before, after, times
        if isinstance(before_restore, str):
            before_restore = [before_restore]
        self.before_restore = list(before_restore or [])
        self.writes = tuple(writes)
        self.fired = 0

    def execute(self, sql):
        statement = without_leading_comments(sql).lower()
        if statement.startswith("restore") and self.before_restore:
            self.writer.sql(self.before_restore.pop(0))
        is_write = statement.startswith(self.writes)
        if not is_write or (self.times is not None and self.fired >= self.times):
            super().execute(sql)
            return
        self.fired += 1
        self.writer.sql(self.before(self.fired))
        super().execute(sql)
        if self.after:
            self.writer.sql(self.after)


def long_spark_job(spark, seconds: float = 1.0) -> Callable[[], bool]:
    """True once some Spark job has been running for `seconds`: the slowed-down write."""
    return job_running_for(active_jobs(spark), seconds)


class OrdersTable:
    """One `orders` model (the subclass's ORDERS), rebuilt from scratch before each test."""

    ORDERS: str

    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": self.ORDERS}

    @pytest.fixture
    def table(self, project) -> str:
        run_dbt(["run", "--full-refresh"])
        return f"{project.test_schema}.orders"


class ForeignAt:
    """Another writer (its own session or Thrift client) that commits once at a named moment
    of the next dbt run, taken from the adapter's own call sequence. Never a hook of the
    model: a pre-hook that writes the target is the node's own step.

    - `compiled`: after the node compiled (its compile-time reads ran), before its
      materialization starts; on stock dbt-spark too.
    - `vb`: right after the fenced materialization captured vB, before the pre-hooks.
    - `staging`: after the pre-hooks, right before the model SQL is staged.
    - `staged`: a snapshot's staging is built, its MERGE not started; on stock dbt-spark too.
    - `statement`: right after the run sent a statement that `pattern` (a regex) matches at its
      start, its leading comments aside: the pre-hook that read the target, say; through
      `adapter.execute`, so on stock dbt-spark too.

    With `delay`, the statements run in a thread `delay` seconds after the moment, while the
    run goes on; `join()` waits for them and raises what they raised, `cancel()` disarms.
    With `nth`, they run at the moment's nth time in the run (a microbatch model's nth batch).
    """

    def __init__(
        self,
        monkeypatch,
        spark,
        moment: str,
        statements: str | list[str | Callable[[], Any]],
        delay: float | None = None,
        nth: int = 1,
        pattern: str | None = None,
    ) -> None:
        from dbt.adapters.base.impl import BaseAdapter
        from dbt.adapters.spark.impl import SparkAdapter

        from dbt.adapters.fenced_spark.impl import FencedSparkAdapter

        self.writer = ForeignWriter(spark)
        # A statement is SQL for the other session, or a callable (another dbt process).
        self.statements = [statements] if isinstance(statements, str) else statements
        self.fired = 0
        self.delay = delay
        self.moments = nth - 1  # moments to let pass before firing
        self.error: BaseException | None = None
        self._timer: threading.Timer | None = None
        if moment == "statement":
            assert pattern is not None, "a `statement` moment needs its pattern"
            sent = BaseAdapter.execute

            def execute(adapter, sql, *args, **kwargs):
                result = sent(adapter, sql, *args, **kwargs)
                if re.match(pattern, without_leading_comments(sql), re.IGNORECASE):
                    self.fire()
                return result

            monkeypatch.setattr(BaseAdapter, "execute", execute)
            return
        owner, name, after = {
            "compiled": (SparkAdapter, "pre_model_hook", False),
            "vb": (FencedSparkAdapter, "fence_begin", True),
            "staging": (FencedSparkAdapter, "fence_stage", False),
            "staged": (SparkAdapter, "expand_target_column_types", False),
        }[moment]
        original = getattr(owner, name)

        def hooked(adapter, *args, **kwargs):
            if not after:
                self.fire()
            result = original(adapter, *args, **kwargs)
            if after:
                self.fire()
            return result

        monkeypatch.setattr(owner, name, hooked)

    def fire(self) -> None:
        if self.moments > 0:
            self.moments -= 1
            return
        if not self.fired and self.delay is None:
            self._run()
        elif not self.fired:
            self._timer = threading.Timer(self.delay, self._run_caught)
            self._timer.daemon = True
            self._timer.start()
        self.fired += 1

    def _run(self) -> None:
        for statement in self.statements:
            if callable(statement):
                statement()
            else:
                self.writer.sql(statement)

    def _run_caught(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by join()
            self.error = exc

    def cancel(self) -> None:
        """Disarm: statements not yet started never run (a delayed one already running
        finishes; join() waits for it)."""
        self.fired += 1
        if self._timer is not None:
            self._timer.cancel()

    def join(self, timeout: float = 300) -> None:
        if self._timer is not None:
            self._timer.join(timeout)
            assert not self._timer.is_alive(), "the foreign statements never finished"
        if self.error is not None:
            raise self.error


def dbt_process(project, name: str, dbt_vars: dict, *args: str) -> subprocess.Popen:
    """`dbt run` of the test project in a process of its own (its output in `<name>.out`), as
    a second scheduler or a double-fired job would start it; `args` add to the command."""
    dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
    command = [
        dbt,
        "run",
        "--project-dir",
        str(project.project_root),
        "--profiles-dir",
        str(project.profiles_dir),
        "--target-path",
        f"target_{name}",
        "--log-path",
        f"logs_{name}",
        "--vars",
        json.dumps(dbt_vars),
        *args,
    ]
    with open(os.path.join(project.project_root, f"{name}.out"), "w") as f:
        return subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, text=True)


def process_output(project, name: str) -> str:
    with open(os.path.join(project.project_root, f"{name}.out")) as f:
        return f.read()
