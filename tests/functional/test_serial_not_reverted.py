"""Found by the hostile review of 2026-12-03, issue 59 items 1 and 4 on real Spark + Delta.

- A write "NOT reverted" whose table is a serial result must not block the next run (issue
  59 item 4: "judge it, as the conflict analysis judges foreign commits, before refusing with
  E213"; docs/limits.md: "Unless the commit changed no rows, or is a serial result (nothing it
  read changed), which E213 lets stand").
- A foreign OPTIMIZE then VACUUM RETAIN 0 HOURS right after vB: the pinned read of vB finds
  its files gone. What the fence says must be true.
"""

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.fenced_spark.fence.protocol import Fence
from tests.functional.lakehouse import ForeignAt, ForeignWriter, history, rows

BATCHES = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged') }}
select '{{ var('run', 'first') }}' as run, id from range(3)
{% if is_incremental() %}where not exists (select 1 from {{ this }} b
where b.run = '{{ var('run', 'first') }}'){% endif %}
"""


def _ops(entries):
    return [(e.version, e.operation, e.tag and e.tag.get("step")) for e in entries]


class TestANotRevertedSerialAppendDoesNotBlockTheNextRun:
    @pytest.fixture(scope="class")
    def models(self):
        return {"batches.sql": BATCHES}

    def test_next_run_goes_on(self, project, spark, monkeypatch):
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.batches"
        vb = history(spark, table)[-1].version
        original_pre, original_verify, fired = Fence.precheck, Fence.verify, []

        def precheck(fence, state):
            judged = original_pre(fence, state)
            if "pre" not in fired:
                fired.append("pre")  # another job's batch, in the gap before our INSERT
                ForeignWriter(spark).sql(f"insert into {table} values ('other', 7)")
            return judged

        def verify(fence, *args, **kwargs):
            if "after" not in fired:
                fired.append("after")  # and one more on top of ours: no revert possible
                ForeignWriter(spark).sql(f"insert into {table} values ('other2', 8)")
            return original_verify(fence, *args, **kwargs)

        monkeypatch.setattr(Fence, "precheck", precheck)
        monkeypatch.setattr(Fence, "verify", verify)
        args = ["run", "--vars", json.dumps({"run": "second"})]
        results, _ = run_dbt_and_capture(args, expect_pass=None)
        after = [e for e in history(spark, table) if e.version > vb]
        first = results.results[0]
        print("FIRST RUN", first.status, _ops(after), first.message)
        monkeypatch.undo()
        if str(first.status) == "success":
            pytest.skip(f"the race did not give NOT reverted: {_ops(after)}")
        assert "NOT reverted" in first.message, first.message
        # The table is a serial result: the second batch was computed from rows of run
        # 'second' (none), which neither foreign insert touched.
        results, _ = run_dbt_and_capture(
            ["run", "--vars", json.dumps({"run": "third"})], expect_pass=None
        )
        nxt = results.results[0]
        after = [e for e in history(spark, table) if e.version > vb]
        print("NEXT RUN", nxt.status, _ops(after), nxt.message)
        assert str(nxt.status) == "success", nxt.message
        counts = rows(spark, f"select run, count(*) from {table} group by run order by run")
        assert counts == [("first", 3), ("other", 1), ("other2", 1), ("second", 3), ("third", 3)]


COUNTER = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
{% if is_incremental() %}
select 0 as id, n + 1 as n from {{ this }} where id = 0
{% else %}
select 0 as id, 0 as n
{% endif %}
"""


class TestOptimizeThenVacuumAfterVb:
    @pytest.fixture(scope="class")
    def models(self):
        return {"counter.sql": COUNTER}

    def test_what_the_fence_says_is_true(self, project, spark, monkeypatch):
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.counter"
        writer = ForeignWriter(spark)
        writer.sql(f"insert into {table} values (1, 1)")
        writer.sql(f"insert into {table} values (2, 2)")
        vb = history(spark, table)[-1].version
        at = ForeignAt(
            monkeypatch,
            spark,
            "vb",
            [
                f"optimize {table}",
                "set spark.databricks.delta.retentionDurationCheck.enabled=false",
                f"vacuum {table} retain 0 hours",
            ],
        )
        results, output = run_dbt_and_capture(["run"], expect_pass=None)
        after = [e for e in history(spark, table) if e.version > vb]
        result = results.results[0]
        print("RUN", result.status, _ops(after), result.message, result.adapter_response)
        assert at.fired == 1
        counter = rows(spark, f"select n from {table} where id = 0")
        print("COUNTER", counter)
        # Either it committed 1 (OPTIMIZE and VACUUM change no row) or it refused with a
        # message naming what landed, with nothing written.
        if str(result.status) == "success":
            assert counter == [(1,)]
        else:
            assert counter == [(0,)]
            assert "nothing was written" in result.message or "never written" in result.message
