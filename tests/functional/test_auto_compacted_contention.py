"""Issue 59 (the hostile review of 2026-12-03): K fenced writers at once on a table whose Delta
features commit on their own (auto compaction), in one JVM (threads with sessions of their own,
the harness's `contention.fenced_runs`).

Docs under test: docs/fence.md "Fenced writers refuse each other in Delta" ("two on disjoint
partitions both commit"), docs/limits.md "Fenced writers of one table commit one at a time"
("Writers on disjoint partitions all still commit, with no fence_retries"), and issue 59's done-
when (every run green, counter exact, no RESTORE).
"""

import json

import pytest
from dbt.tests.util import run_dbt

from tests.harness import contention

K = 4


class _Compacting:
    """`spark`, whose newSession()s compact after 2 small files (Delta's auto compaction runs
    in the writer's own session, right after its commit, as a post-commit hook)."""

    def __init__(self, spark):
        self.spark = spark

    def newSession(self):  # noqa: N802 (SparkSession's name)
        session = self.spark.newSession()
        session.conf.set("spark.databricks.delta.autoCompact.minNumFiles", "2")
        return session


def _history(rows, table):
    return sorted(rows(f"describe history {table}"), key=lambda h: int(h["version"]))


@pytest.mark.skip_profile(
    "thrift", "connect", reason="threads drive the fence through the embedded session's runner"
)
class TestEightWritersOnAutoCompactedTables:
    @pytest.fixture(scope="class")
    def models(self):
        return contention.models(20)

    def test_every_run_green_and_exact(self, project, spark):
        run_dbt(["run"])
        rows = contention.dict_rows(spark)
        for model in ("counter", "batches"):
            rows(
                f"alter table {project.test_schema}.{model} set tblproperties "
                "('delta.autoOptimize.autoCompact' = 'true')"
            )
        names = contention.run_names(0, 8)
        codes = contention.fenced_runs(_Compacting(spark), project.test_schema, names, 20)
        result = contention.tally(rows, project.test_schema, codes)
        errors = {n: repr(contention.errors.get(n))[:3000] for n, c in codes.items() if c}
        ops = {
            m: [
                (
                    h["version"],
                    h["operation"],
                    h["userMetadata"] and json.loads(h["userMetadata"]).get("step"),
                )
                for h in _history(rows, f"{project.test_schema}.{m}")
            ]
            for m in ("counter", "batches")
        }
        # The tally leaves out Delta's auto compaction (an OPTIMIZE carrying our write's tag,
        # no SetTransaction): the SetTransaction versions of the writes themselves increase.
        assert result.problems() == [], (errors, ops)
        assert result.green == 8 and result.counter == 8, (errors, ops)
        assert any(o == "OPTIMIZE" for v in ops.values() for _, o, _ in v), "no compaction"
