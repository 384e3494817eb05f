"""The strict strategies under the three timings, on real Spark + Delta.

append_if_unchanged, replace_where, the watermark `append` (auto-fenced because it reads
{{ this }}) and one microbatch batch commit as vB+1 on a quiet table. A foreign commit after vB that
changes what the node read or writes (any row, for append_if_unchanged; a row of the range a
replace_where or a batch replaces) fails the run, and nothing of ours remains. The foreign
writer is always a plain blind INSERT, exactly the commit Delta alone would accept;
tests/functional/test_conflicts.py has the look-alikes that touch nothing of the node's.
"""

import json
from dataclasses import dataclass

import pytest
from dbt.tests.util import run_dbt

from tests.functional.lakehouse import (
    ForeignAt,
    ForeignWriter,
    history,
    long_spark_job,
    ours,
    response_of,
    rows,
)

# A per-row predicate that is always true (reflect returns the text "null" for a void
# method, never SQL NULL): nondeterministic, so Spark evaluates it inside
# the write's own tasks (never at planning time, never pruned).
SLOW = """
{% if var('slow_ms', 0) | int > 0 %}
and reflect('java.lang.Thread', 'sleep', cast({{ var('slow_ms') }} as bigint)) is not null
{% endif %}
"""

APPENDED = f"""
{{{{ config(materialized='incremental', incremental_strategy='append_if_unchanged') }}}}
select id from range({{{{ var('lo', 0) }}}}, {{{{ var('hi', 3) }}}}) where true {SLOW}
"""

WATERMARK = f"""
{{{{ config(materialized='incremental', incremental_strategy='append') }}}}
select id from range(0, {{{{ var('hi', 3) }}}}) where true {SLOW}
{{% if is_incremental() %}}
and id > (select coalesce(max(id), -1) from {{{{ this }}}})
{{% endif %}}
"""

DAILY = f"""
{{{{ config(materialized='incremental', incremental_strategy='replace_where',
          incremental_predicates=["day >= " ~ var('since', 0)]) }}}}
select cast(id % 4 as int) as day, {{{{ var('round', 0) }}}} as round
from range(0, 8)
where id % 4 >= {{{{ var('since', 0) }}}} {SLOW}
"""

RAW_EVENTS = """
{{ config(materialized='table', event_time='event_ts') }}
select id, cast(date_add(date'2026-01-01', cast(id % 3 as int)) as timestamp) as event_ts
from range(0, 9)
"""

BATCHED = f"""
{{{{ config(materialized='incremental', incremental_strategy='microbatch',
          event_time='event_ts', batch_size='day', begin='2026-01-01') }}}}
select id, event_ts, {{{{ var('round', 0) }}}} as round from {{{{ ref('raw_events') }}}}
where true {SLOW}
"""


@dataclass(frozen=True)
class Case:
    model: str
    first: dict  # vars (and flags) that create the table
    batch: dict  # vars of the raced run
    foreign: str  # the foreign blind INSERT; {t} is the table
    expected: list  # rows after a clean batch on top of the foreign row (timing a)
    untouched: list  # rows after a refused batch (timings b and c)
    flags: tuple = ()


CASES = {
    "append_if_unchanged": Case(
        "appended",
        {},
        {"lo": 3, "hi": 5},
        "insert into {t} values (100)",
        [(0,), (1,), (2,), (3,), (4,), (100,)],
        [(0,), (1,), (2,), (100,)],
    ),
    "watermark_append": Case(
        "watermark",
        {},
        {"hi": 5},
        "insert into {t} values (3)",
        [(0,), (1,), (2,), (3,), (4,)],
        [(0,), (1,), (2,), (3,)],
    ),
    "replace_where": Case(
        "daily",
        {},
        {"since": 2, "round": 1},
        "insert into {t} values (2, 9)",  # a row in the range it replaces (day >= 2)
        [(0, 0), (0, 0), (1, 0), (1, 0), (2, 1), (2, 1), (3, 1), (3, 1)],
        [(0, 0), (0, 0), (1, 0), (1, 0), (2, 0), (2, 0), (2, 9), (3, 0), (3, 0)],
    ),
    "microbatch": Case(
        "batched",
        {},
        {"round": 1},
        # A row in the batch's own window (2026-01-02).
        "insert into {t} values (100, timestamp'2026-01-02 12:00:00', 9)",
        [(0, 0), (1, 1), (2, 0), (3, 0), (4, 1), (5, 0), (6, 0), (7, 1), (8, 0)],
        [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0), (8, 0), (100, 9)],
        flags=("--event-time-start", "2026-01-02", "--event-time-end", "2026-01-03"),
    ),
}
# What Delta itself says when the foreign row lands while the write runs.
# Delta's refusal by error class or, where Spark Connect's text carries only that, its exception.
DELTA_REFUSES = {
    "append_if_unchanged": ("DELTA_MAX_COMMIT_RETRIES_EXCEEDED",),
    "replace_where": ("DELTA_CONCURRENT_APPEND", "ConcurrentAppendException"),
    "microbatch": ("DELTA_CONCURRENT_APPEND", "ConcurrentAppendException"),
}
FIRST_FLAGS = {"microbatch": ("--event-time-start", "2026-01-01", "--event-time-end", "2026-01-04")}


def failure_text(logs_dir, results) -> str:
    """The node's message; a microbatch model reports per batch, so read the run's log."""
    result = results.results[0]
    if result.batch_results is None:
        return result.message
    assert len(result.batch_results.failed) == 1 and not result.batch_results.successful
    with open(f"{logs_dir}/dbt.log") as log:
        return log.read().rsplit("running dbt with arguments", 1)[-1]


def contents(spark, table: str, model: str) -> list:
    if model == "daily":
        return rows(spark, f"select day, round from {table} order by day, round")
    if model == "batched":
        return rows(spark, f"select id, round from {table} order by id")
    return rows(spark, f"select id from {table} order by id")


class TestStrictRaces:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "appended.sql": APPENDED,
            "watermark.sql": WATERMARK,
            "daily.sql": DAILY,
            "raw_events.sql": RAW_EVENTS,
            "batched.sql": BATCHED,
        }

    def start(self, project, name):
        case = CASES[name]
        select = ["--select", case.model] if case.model != "batched" else ["--select", "+batched"]
        run_dbt(["run", "--full-refresh", *select, *FIRST_FLAGS.get(name, ())])
        table = f"{project.test_schema}.{case.model}"
        return case, table

    def run(self, case, expect_pass=True, **more):
        args = ["run", "--select", case.model, *case.flags]
        return run_dbt([*args, "--vars", json.dumps({**case.batch, **more})], expect_pass)

    @pytest.mark.parametrize("name", list(CASES))
    def test_a_foreign_commit_before_vb_is_built_upon(self, project, spark, name):
        case, table = self.start(project, name)
        ForeignWriter(spark).sql(case.foreign.format(t=table))
        foreign = history(spark, table)[-1]
        assert foreign.operation == "WRITE" and foreign.tag is None  # the race fired

        self.run(case)

        after = [e for e in history(spark, table) if e.version > foreign.version]
        assert len(after) == 1 and after[0].tag["read_version"] == foreign.version
        assert after[0].version == foreign.version + 1  # strict: exactly vB+1
        assert contents(spark, table, case.model) == case.expected

    @pytest.mark.parametrize("name", list(CASES))
    def test_b_foreign_commit_after_vb_fails_and_leaves_nothing(
        self, project, spark, monkeypatch, logs_dir, name
    ):
        case, table = self.start(project, name)
        vb = history(spark, table)[-1].version
        writer = ForeignAt(monkeypatch, spark, "vb", case.foreign.format(t=table))
        results = self.run(case, expect_pass=False)
        assert writer.fired >= 1

        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE"] and after[0].tag is None
        assert after[0].version == vb + 1  # landed after vB, before our write
        message = failure_text(logs_dir, results)
        assert "refused" in message and "never written" in message and "pre-check" in message
        assert contents(spark, table, case.model) == case.untouched

    @pytest.mark.parametrize("name", list(CASES))
    def test_c_foreign_commit_during_the_write_fails_and_leaves_nothing(
        self, project, spark, logs_dir, name
    ):
        """append_if_unchanged's write must follow its snapshot, so Delta refuses it. The others
        let Delta commit them above commits that do not conflict, as a MERGE: a REPLACE WHERE
        reads its range, so Delta refuses the row landing in it; the watermark's read is pinned
        to vB, invisible to Delta, so ours commits above theirs and verification reverts it."""
        case, table = self.start(project, name)
        vb = history(spark, table)[-1].version
        writer = ForeignWriter(spark)
        writer.when(long_spark_job(spark, 1.0), case.foreign.format(t=table))
        results = self.run(case, expect_pass=False, slow_ms=5000)
        writer.join()

        after = [e for e in history(spark, table) if e.version > vb]
        foreign = after[0]
        assert foreign.operation == "WRITE" and foreign.tag is None
        message = failure_text(logs_dir, results)
        if name in DELTA_REFUSES:
            assert [e.operation for e in after] == ["WRITE"] and ours(after) == []
            assert any(n in message for n in DELTA_REFUSES[name]) and "never written" in message
        else:
            assert [e.operation for e in after] == ["WRITE", "WRITE", "RESTORE"]
            assert ours(after) == [after[1]] and after[1].tag["delta_retries"] is True
            assert after[1].read_version == vb  # built on vB, committed above theirs
            assert ours(after, "revert") == [after[2]]
            assert after[2].read_version == after[1].version  # the RESTORE undid ours only
            assert f"v{foreign.version} WRITE" in message and "CONFLICT" in message
            assert (
                f"written as v{after[1].version}, then reverted by RESTORE (v{after[2].version})"
                in message
            )
        assert contents(spark, table, case.model) == case.untouched


DATED_EVENTS = """
{{ config(materialized='table', event_time='event_date') }}
select id, date_add(date'2026-01-01', cast(id % 3 as int)) as event_date from range(0, 9)
"""

DATED_BATCHES = """
{{ config(materialized='incremental', incremental_strategy='microbatch',
          event_time='event_date', batch_size='day', begin='2026-01-01',
          pre_hook="SET spark.sql.session.timeZone=" ~ var('zone', 'UTC')) }}
select id, event_date, {{ var('round', 0) }} as round from {{ ref('dated_events') }}
"""


class TestMicrobatchOnADate:
    """A DATE event_time in a session zone east and west of UTC: the batch's replaced window
    is the window dbt filtered its input with, so every batch replaces exactly its day."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"dated_events.sql": DATED_EVENTS, "dated_batches.sql": DATED_BATCHES}

    @pytest.mark.parametrize("zone", ["Europe/Berlin", "America/Los_Angeles"])
    def test_each_batch_replaces_its_day(self, project, spark, zone):
        window = ("--event-time-start", "2026-01-01", "--event-time-end", "2026-01-04")
        run_dbt(["run", "--full-refresh", "--select", "+dated_batches", *window])
        table = f"{project.test_schema}.dated_batches"
        vb = history(spark, table)[-1].version
        day2 = ("--event-time-start", "2026-01-02", "--event-time-end", "2026-01-03")
        run_dbt(
            [
                "run",
                "--select",
                "dated_batches",
                *day2,
                "--vars",
                json.dumps({"round": 1, "zone": zone}),
            ]
        )
        assert rows(spark, f"select id, round from {table} order by id") == [
            (i, 1 if i % 3 == 1 else 0) for i in range(9)
        ]
        (commit,) = [e for e in history(spark, table) if e.version > vb]
        assert commit.operation == "WRITE" and commit.tag["strategy"] == "microbatch"
        # dbt records {} for a microbatch model: the adapter fills in one response per batch.
        [batch] = response_of(project, "dated_batches")["batches"]
        assert (batch["fence_outcome"], batch["read_version"], batch["commit_version"]) == (
            "committed",
            vb,
            commit.version,
        )
