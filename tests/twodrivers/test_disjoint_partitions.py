"""Conflicts, not commits, across drivers: two `dbt run` processes (two Spark drivers) write one
partitioned table on HDFS at the same moment, each its own partition, each reading its own
partition of the table for its next id. Neither changed what the other read or writes: both
commit, the later one over the other's commit, and says so in its tag."""

import time

import pytest

from tests.twodrivers.drivers import DbtProject, history

# Each run appends (or merges) the next id of its own partition, from its own partition's max.
NEXT_ID = """
{% set part = var('part', 'a') %}
{% set strategy = var('strategy', 'append') %}
{{ config(materialized='incremental', incremental_strategy=strategy, partition_by=['p'],
          unique_key=['p', 'id'],
          incremental_predicates=(["DBT_INTERNAL_DEST.p = '" ~ part ~ "'"]
                                  if strategy == 'merge' else none),
          pre_hook="cache table slow_step as select reflect('java.lang.Thread', 'sleep',
                                   cast({{ var('slow_ms', 0) }} as bigint))") }}
{% if is_incremental() %}
select max(id) + 1 as id, '{{ part }}' as p, '{{ invocation_id }}' as run_id
from {{ this }} where p = '{{ part }}'
{% else %}
select * from values (0, 'a', 'first'), (0, 'b', 'first') as t(id, p, run_id)
{% endif %}
"""

# Covers the two drivers' start-up skew (see test_double_fired.py); overlap is asserted. The
# pre-hook is a CACHE TABLE so that its sleep runs (a bare SELECT is only planned).
SLOW_MS = 20000
PARTS = ("a", "b")


@pytest.mark.parametrize("strategy", ["append", "merge"])
def test_both_commit_on_their_own_partitions(tmp_path, shared_lakehouse, strategy):
    project = DbtProject(tmp_path, shared_lakehouse, {"next_id.sql": NEXT_ID})
    first = project.target("first")
    project.run(first)
    table = project.table("next_id")

    started = time.time()
    runs = {
        part: project.start(
            project.target(f"{strategy}_{part}"),
            {"part": part, "strategy": strategy, "slow_ms": SLOW_MS},
        )
        for part in PARTS
    }
    try:
        codes = {part: run.wait() for part, run in runs.items()}
    finally:
        for run in runs.values():
            run.kill()
    assert codes == {"a": 0, "b": 0}, {p: r.output[-3000:] for p, r in runs.items()}

    # A third driver reads the outcome; vB is the first run's last commit (before the race).
    entries, contents = shared_lakehouse.sql(
        [f"describe history {table}", f"select p, id, run_id from {table} order by p, id"]
    )
    entries = history(entries)
    vb = max(e.version for e in entries if e.timestamp < started)
    after = [e for e in entries if e.version > vb]
    writes = {
        run.invocation_id: [
            e for e in after if e.tag and e.tag["invocation_id"] == run.invocation_id
        ]
        for run in runs.values()
    }
    # One tagged write per run, nothing else (no RESTORE, no foreign commit).
    assert all(len(mine) == 1 for mine in writes.values()), after
    assert len(after) == 2, after
    earlier, later = sorted((mine[0] for mine in writes.values()), key=lambda e: e.version)
    assert earlier.tag["read_version"] == later.tag["read_version"] == vb, after
    # The race happened: the later run read vB before the earlier one committed, and committed
    # over it.
    assert later.tag["read_version"] < earlier.version, (
        f"the two runs did not overlap (v{later.version} read v{later.tag['read_version']}, "
        f"after v{earlier.version} landed): this run proves nothing; run it again"
    )
    if later.tag.get("tolerated"):
        # It landed before the later write began: the fence's pre-check judged it harmless.
        assert later.tag["tolerated"] == [earlier.version], later.tag
    else:
        # It landed while the later write ran: Delta's own conflict check (the other driver's
        # commit read from the log on HDFS) committed over it, as the tag allowed.
        assert later.read_version < earlier.version, after
        assert later.tag.get("delta_retries") or strategy == "merge", later.tag

    assert [(r["p"], r["id"], r["run_id"]) for r in contents] == [
        ("a", 0, "first"),
        ("a", 1, runs["a"].invocation_id),
        ("b", 0, "first"),
        ("b", 1, runs["b"].invocation_id),
    ]
