"""Issue 60 item 1 against issue 59 item 4 and docs/fence.md "A crash mid-run" (the hostile review
of 2026-12-03): a write whose verdict was never reached (E211: the log could not be read after
the write; or a SIGKILL between the commit and the verdict) is judged by the node's next run
(`Fence.check_earlier_runs`). The write's tag lists the commits its pre-check tolerated, and the
pre-check's key verdict on a merge is a prediction (the model SQL evaluated then). Here the
headline race of issue 60: a notebook cancels order 5 right after vB, order 5 arrives in the
source after the pre-check; the MERGE writes order 5 over the cancellation; the run dies before
verification, which would have re-judged the tolerance on the rows written and reverted. The
next run must not build on that write (E213), or must restore the cancellation.
"""

from dbt.tests.util import run_dbt_and_capture
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.protocol import Fence
from tests.functional.lakehouse import ForeignAt, history, rows
from tests.functional.test_as_written import MovingSource


def the_next_run_refuses(spark, table: str, vb: int) -> None:
    """E213, naming the earlier run's write; the table as it was, nothing built on it."""
    before = [e.version for e in history(spark, table)]
    results, _ = run_dbt_and_capture(["run"], expect_pass=False)
    message = results.results[0].message
    assert "an earlier run of this model left a commit" in message, message
    assert [e.version for e in history(spark, table)] == before
    assert rows(spark, f"select v from {table} where id = 5") == [("shipped",)]


class HeadlineRace(MovingSource):
    """Issue 60's headline race, without MovingSource's own tests: a notebook cancels order 5
    right after vB, and order 5 arrives in the source after the pre-check."""

    test_the_source_moving_after_the_precheck_is_refused_and_reverted = None  # type: ignore
    test_both_commits_before_the_precheck_are_refused_there = None  # type: ignore
    test_a_commit_the_rows_written_confirm_stands = None  # type: ignore

    def headline_race(self, project, spark, monkeypatch):
        src, table, vb = self.setup_tables(project, spark)
        at = ForeignAt(monkeypatch, spark, "vb", f"update {table} set v = 'cancelled' where id = 5")
        moved = self.source_moves_after_the_precheck(monkeypatch, spark, src)
        return table, vb, at, moved


class TestADeadRunsProvisionalToleranceIsJudgedAgain(HeadlineRace):
    def test_the_next_run_refuses_to_build_on_it(self, project, spark, monkeypatch):
        table, vb, at, moved = self.headline_race(project, spark, monkeypatch)

        def lost(fence, *args, **kwargs):
            raise DbtRuntimeError("simulated: the server went away after the write")

        monkeypatch.setattr(Fence, "verify", lost)
        results, output = run_dbt_and_capture(["run"], expect_pass=False)
        assert at.fired == 1 and moved == [vb + 1]
        after = [e for e in history(spark, table) if e.version > vb]
        ops = [
            (e.version, e.operation, e.tag and e.tag.get("step"), e.tag and e.tag.get("tolerated"))
            for e in after
        ]
        assert [o[1:3] for o in ops] == [("UPDATE", None), ("MERGE", "write")], ops
        assert after[1].tag["tolerated"] == [vb + 1]  # tolerated on the prediction
        # The cancellation is overwritten by the dead run's MERGE.
        assert rows(spark, f"select v from {table} where id = 5") == [("shipped",)]

        monkeypatch.undo()
        the_next_run_refuses(spark, table, vb)


class TestANotRevertedWriteOverAProvisionalToleranceBlocksTheNextRun(HeadlineRace):
    """The same race without a crash: verification re-judges the tolerance on the rows written
    and refuses, but another writer's commit (a blind insert into partition b) landed on top
    of ours first, so the revert cannot run: "NOT reverted". docs/limits.md: "the node's next
    run then refuses to build on its write, which still stands (E213)"."""

    def test_the_next_run_refuses_to_build_on_it(self, project, spark, monkeypatch):
        from tests.functional.lakehouse import ForeignWriter

        table, vb, at, moved = self.headline_race(project, spark, monkeypatch)
        original, landed = Fence.verify, []

        def verify(fence, *args, **kwargs):
            if not landed:
                landed.append(1)
                ForeignWriter(spark).sql(f"insert into {table} values (9, 'other', 'b')")
            return original(fence, *args, **kwargs)

        monkeypatch.setattr(Fence, "verify", verify)
        results, output = run_dbt_and_capture(["run"], expect_pass=False)
        assert at.fired == 1 and moved == [vb + 1] and landed
        after = [e for e in history(spark, table) if e.version > vb]
        ops = [(e.version, e.operation, e.tag and e.tag.get("step")) for e in after]
        first = results.results[0].message
        assert [o[1:] for o in ops] == [("UPDATE", None), ("MERGE", "write"), ("WRITE", None)]
        assert "NOT reverted" in first, first
        assert rows(spark, f"select v from {table} where id = 5") == [("shipped",)]

        monkeypatch.undo()
        the_next_run_refuses(spark, table, vb)
