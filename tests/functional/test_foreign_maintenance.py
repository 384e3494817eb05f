"""Foreign operations a fenced merge meets on a shared table, each landing mid-MERGE:
compaction (OPTIMIZE) and a blind append into another partition. What the user gets is in
docs/fence.md ("Commits that land during the MERGE").

The MERGE is slowed by sleeping tasks; the foreign statement starts once that job has run
for a second, so it commits while the MERGE is still computing.
"""

import json

import pytest
from dbt.tests.util import run_dbt

from tests.functional.lakehouse import ForeignWriter, history, long_spark_job, ours, rows

# The sleep is joined on its result: an unused column would be pruned by the optimizer, and
# the MERGE would not be slowed at all (seen once in CI).
ORDERS = """
{{ config(
    materialized='incremental',
    incremental_strategy='merge',
    unique_key='id',
    partition_by=['day'],
    incremental_predicates=var('predicates', none),
    fence_retries=var('retries', 0),
    fence_isolation=var('isolation', 'snapshot'),
) }}
select id, day, status
from values {{ var('batch', "(1, 'd1', 'open'), (2, 'd2', 'open')") }} as batch(id, day, status)
{% if var('slow_ms', 0) | int > 0 %}
join (
  select reflect('java.lang.Thread', 'sleep', cast({{ var('slow_ms') }} as bigint)) as z
) slow on slow.z is not null
{% endif %}
"""

SHIP_2 = "(2, 'd2', 'shipped')"


def dbt_vars(**values) -> list:
    return ["--vars", json.dumps(values)]


@pytest.mark.skip_profile("thrift", reason="the slowed job is found with the session's tracker")
class TestForeignMaintenanceDuringMerge:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS}

    @pytest.fixture
    def table(self, project, spark) -> str:
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.orders"
        # Small files for OPTIMIZE to compact, in both partitions.
        for i in (3, 4):
            spark.sql(f"insert into {table} values ({i}, 'd1', 'open')")
            spark.sql(f"insert into {table} values ({i + 10}, 'd2', 'open')")
        return table

    def race(self, spark, table: str, statement: str, **dbt_var):
        vb = history(spark, table)[-1].version
        writer = ForeignWriter(spark)
        writer.when(long_spark_job(spark, 1.0), statement)
        results = run_dbt(["run", *dbt_vars(slow_ms=6000, **dbt_var)], expect_pass=None)
        writer.join()
        landed = [e for e in history(spark, table) if e.version > vb]
        return vb, landed, results.results[0]

    def test_optimize_mid_merge_is_refused_by_delta_and_sent_again(self, spark, table):
        vb, landed, result = self.race(spark, table, f"optimize {table}", batch=SHIP_2)

        # OPTIMIZE committed first, while the MERGE was computing on the files it removed:
        # Delta refused the MERGE (it cannot tell a compaction from a delete), nothing of it
        # was written, and the fence, judging the compaction no conflict, sent the same MERGE
        # again on the compacted version: no fence_retries, no recomputation.
        assert [e.operation for e in landed] == ["OPTIMIZE", "MERGE"]
        assert landed[0].version == vb + 1 and landed[0].tag is None
        assert result.status == "success", result.message
        [merge] = ours(landed)
        assert merge.tag["attempt"] == 1 and merge.tag["read_version"] == vb
        assert merge.read_version == vb + 1 and merge.tag["tolerated"] == [vb + 1]
        [tolerated] = result.adapter_response["tolerated"]
        assert tolerated.startswith(f"v{vb + 1} OPTIMIZE:")
        assert rows(spark, f"select status from {table} where id = 2") == [("shipped",)]

    @pytest.mark.parametrize("isolation", ["snapshot", "version"])
    def test_append_to_another_partition_mid_merge_both_land(self, spark, table, isolation):
        # Under 'version' too: it refuses any commit before the MERGE's snapshot, and leaves
        # those landing during it to Delta's own check, which rebased the MERGE over this one.
        vb, landed, result = self.race(
            spark,
            table,
            f"insert into {table} values (99, 'd1', 'foreign')",
            batch=SHIP_2,
            predicates=["DBT_INTERNAL_DEST.day = 'd2'"],
            isolation=isolation,
        )

        # The append landed mid-MERGE; Delta rebased the MERGE over it (no file it read changed),
        # and the MERGE still read vB: the fence's check holds, the run commits.
        assert [e.operation for e in landed] == ["WRITE", "MERGE"]
        assert landed[0].version == vb + 1 and landed[0].tag is None
        assert result.status == "success", result.message
        assert result.adapter_response["read_version"] == vb
        assert landed[1].read_version == vb and landed[1].tag["read_version"] == vb
        assert rows(spark, f"select id, status from {table} where id in (2, 99) order by id") == [
            (2, "shipped"),
            (99, "foreign"),
        ]
