"""Reading a Delta table's truth, and writing to it as somebody else."""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.fenced_spark.impl import FenceSql
from tests.harness.writer import ForeignWriter, active_jobs, job_running_for


@dataclass
class HistoryEntry:
    version: int
    operation: str
    read_version: int | None
    tag: dict[str, Any] | None
    user_metadata: str | None


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
        entries.append(
            HistoryEntry(row.version, row.operation, row.readVersion, tag, row.userMetadata)
        )
    return sorted(entries, key=lambda e: e.version)


def ours(entries: list[HistoryEntry], step: str = "write") -> list[HistoryEntry]:
    return [e for e in entries if e.tag and e.tag.get("step") == step]


def rows(spark, sql: str) -> list[tuple]:
    return [tuple(r) for r in spark.sql(sql).collect()]


def without_leading_comments(sql: str) -> str:
    # dbt-core's get_merge_sql starts with a `--` comment line.
    return re.sub(r"^(\s*--[^\n]*\n)*\s*", "", sql)


class ForeignAroundWrite(FenceSql):
    """The fence's runner with another writer committing right before our write statement
    starts (after the pre-check), and optionally right after it lands; `times` caps it.
    `before_restore` lands right before our revert's RESTORE takes its snapshot."""

    def __init__(self, connections, writer, before, after=None, times=None, before_restore=None):
        super().__init__(connections)
        self.writer, self.before, self.after, self.times = writer, before, after, times
        self.before_restore = before_restore
        self.fired = 0

    def execute(self, sql):
        statement = without_leading_comments(sql).lower()
        if statement.startswith("restore") and self.before_restore:
            self.writer.sql(self.before_restore)
            self.before_restore = None
        is_write = statement.startswith(("merge", "insert into"))
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
    """

    def __init__(
        self, monkeypatch, spark, moment: str, statements: str | list[str | Callable[[], Any]]
    ) -> None:
        from dbt.adapters.spark.impl import SparkAdapter

        from dbt.adapters.fenced_spark.impl import FencedSparkAdapter

        self.writer = ForeignWriter(spark)
        # A statement is SQL for the other session, or a callable (another dbt process).
        self.statements = [statements] if isinstance(statements, str) else statements
        self.fired = 0
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
        if not self.fired:
            for statement in self.statements:
                if callable(statement):
                    statement()
                else:
                    self.writer.sql(statement)
        self.fired += 1
