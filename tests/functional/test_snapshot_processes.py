"""Two `dbt snapshot` invocations of one snapshot (a double-fired job, two backfills with
different --vars): the second is another dbt process, which runs its whole snapshot while the
first has built its staging and not started its MERGE. Stock dbt-spark runs the same race as
the control. Only over a server (both processes its clients): `make test` runs this file over
Thrift (THRIFT_TESTS); `make connect` runs the fenced ones over Spark Connect too."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import ForeignAt, history, rows
from tests.functional.test_snapshots import (
    CURRENT,
    OPEN_1_AND_2,
    SHIP_1,
    SnapshotProject,
    snapshot,
)

TWO_PROCESSES = (
    "session",
    "two dbt processes on the embedded session would be two Spark JVMs writing one local Delta "
    "table, which Delta does not make safe (docs/limits.md); over thrift both are clients of "
    "one server",
)
CANCEL_1 = "(1, 'cancelled', timestamp'2024-01-03'), (2, 'open', timestamp'2024-01-01')"


class OtherInvocation(SnapshotProject):
    def other_snapshot(self, project, tmp_path, source_rows):
        """A callable running `dbt snapshot` in another process with its own --vars; its
        CompletedProcess lands in the returned list."""
        done: list[subprocess.CompletedProcess] = []
        dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
        args = [dbt, "snapshot", "--project-dir", project.project_root]
        args += ["--profiles-dir", project.profiles_dir, "--target-path", str(tmp_path / "t")]
        args += ["--log-path", str(tmp_path / "l"), "--vars", json.dumps({"rows": source_rows})]

        def run():
            done.append(subprocess.run(args, capture_output=True, text=True, timeout=600))

        return run, done

    def race(self, project, spark, monkeypatch, tmp_path, theirs_rows, expect_pass):
        table = f"{project.test_schema}.orders_snap"
        vb = history(spark, table)[-1].version
        run, done = self.other_snapshot(project, tmp_path, theirs_rows)
        foreign = ForeignAt(monkeypatch, spark, "staged", [run])
        results = snapshot(expect_pass, rows=SHIP_1)
        monkeypatch.undo()
        assert foreign.fired == 1 and len(done) == 1
        return table, vb, done[0], results


@pytest.mark.skip_profile(*TWO_PROCESSES[:1], reason=TWO_PROCESSES[1])
class TestStockTwoInvocations(StockSparkProfile, OtherInvocation):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"snapshots": {"+file_format": "delta"}}

    def test_the_other_run_drops_our_staging_view(
        self, project, spark, monkeypatch, tmp_path, table
    ):
        table, vb, other, results = self.race(
            project, spark, monkeypatch, tmp_path, OPEN_1_AND_2, False
        )
        assert other.returncode == 0, other.stdout[-2000:]
        # The other run changed nothing, and dropped the shared orders_snap__dbt_tmp on its way.
        assert history(spark, table)[-1].version == vb
        message = results.results[0].message
        assert "orders_snap__dbt_tmp" in message and "TABLE_OR_VIEW_NOT_FOUND" in message


@pytest.mark.skip_profile(*TWO_PROCESSES[:1], reason=TWO_PROCESSES[1])
class TestFencedTwoInvocations(OtherInvocation):
    def test_their_staging_is_not_ours(self, project, spark, monkeypatch, tmp_path, table):
        # The other run (other --vars) finds nothing to change: ours commits from its own staging.
        table, vb, other, results = self.race(
            project, spark, monkeypatch, tmp_path, OPEN_1_AND_2, True
        )
        assert other.returncode == 0, other.stdout[-2000:]
        # Theirs commits only the fence's SetTransaction (a MERGE of no rows): ours, overtaken
        # by it and not in conflict, is sent again over it.
        theirs, merge = [e for e in history(spark, table) if e.version > vb]
        assert theirs.operation == "MERGE" and theirs.metrics["numTargetFilesAdded"] == "0"
        assert theirs.metrics["numTargetFilesRemoved"] == "0"
        assert merge.tag["strategy"] == "snapshot" and merge.tag["node"] == theirs.tag["node"]
        assert merge.tag["read_version"] == vb and merge.tag["tolerated"] == [theirs.version]
        response = results.results[0].adapter_response
        assert response["fence_outcome"] == "committed"
        assert response["commit_version"] == merge.version
        assert response["tolerated"] == [f"v{theirs.version} MERGE: no data change"]
        assert rows(spark, CURRENT.format(t=table)) == [
            (1, "shipped", "loaded"),
            (2, "open", "loaded"),
        ]

    def test_racing_runs_refuse_and_leave_one_current_row_per_key(
        self, project, spark, monkeypatch, tmp_path, table
    ):
        table, vb, other, results = self.race(
            project, spark, monkeypatch, tmp_path, CANCEL_1, False
        )
        assert other.returncode == 0, other.stdout[-2000:]
        after = [e for e in history(spark, table) if e.version > vb]
        # Their MERGE landed after our vB, and nothing of ours did.
        assert [e.operation for e in after] == ["MERGE"] and after[0].tag["node"].endswith(
            "orders_snap"
        )
        assert after[0].tag["step"] == "write"  # theirs: the other run, fenced too
        message = results.results[0].message
        assert f"read version (vB): {vb}" in message and f"v{vb + 1} MERGE" in message
        assert "never written: the table is as the other writer(s) left it." in message
        current = rows(spark, CURRENT.format(t=table))
        assert current == [(1, "cancelled", "loaded"), (2, "open", "loaded")]

        snapshot(rows=SHIP_1)
        current = rows(spark, CURRENT.format(t=table))
        assert current == [(1, "shipped", "loaded"), (2, "open", "loaded")]
        ids = [r[0] for r in current]
        assert len(ids) == len(set(ids))  # exactly one current row per key
