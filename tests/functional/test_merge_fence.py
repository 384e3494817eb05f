"""The fenced merge beyond the race matrix: threads, schema changes, the revert path."""

import json

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.fenced_spark.fence.errors import FenceViolation
from dbt.adapters.fenced_spark.fence.outcome import Outcome
from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState
from dbt.adapters.fenced_spark.fence_sql import FenceSql
from tests.conftest import SERVERS, profile_target
from tests.functional.lakehouse import (
    ForeignAroundWrite,
    ForeignWriter,
    commit_actions,
    execute_spans,
    history,
    max_concurrent,
    ours,
    rows,
)

# The sleep keeps each model's run long enough that the four threads run at once.
UPSERT = """
{{{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}}}
select id, '{name}' as model_name, {{{{ var('round', 0) }}}} as round from range(1, 4)
where reflect('java.lang.Thread', 'sleep', cast({{{{ var('slow_ms', 0) }}}} as bigint)) is not null
"""

GROWING = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          on_schema_change='append_new_columns') }}
select id, 'v' as val {% if var('grow', false) %}, 'new' as extra {% endif %} from range(1, 3)
"""


class TestFourThreads:
    @pytest.fixture(scope="class")
    def models(self):
        return {f"m{i}.sql": UPSERT.format(name=f"m{i}") for i in range(1, 7)}

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, request):
        return {**profile_target(request), "threads": 4}

    def test_every_commit_names_its_own_model(self, project, spark):
        run_dbt(["run"])
        results = run_dbt(["run", "--vars", json.dumps({"round": 1, "slow_ms": 1500})])
        assert len(results.results) == 6
        # A tag leaking between threads shows only if they ran at once: four did.
        assert max_concurrent(execute_spans(results).values()) == 4
        for i in range(1, 7):
            table = f"{project.test_schema}.m{i}"
            merges = ours(history(spark, table))
            assert len(merges) == 1
            assert merges[0].tag["node"] == f"model.test.m{i}"
            assert rows(spark, f"select distinct model_name, round from {table}") == [(f"m{i}", 1)]


class TestFencedSchemaChange:
    @pytest.fixture(scope="class")
    def models(self):
        return {"growing.sql": GROWING}

    def test_alter_is_tagged_and_the_merge_continues_from_it(self, project, spark):
        table = f"{project.test_schema}.growing"
        run_dbt(["run"])
        vb = history(spark, table)[-1].version
        run_dbt(["run", "--vars", json.dumps({"grow": True})])
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["ADD COLUMNS", "MERGE"]
        alter, merge = after
        assert alter.tag["step"] == "schema_change" and alter.read_version == vb
        assert merge.tag["step"] == "write" and merge.read_version == alter.version
        assert rows(spark, f"select id, val, extra from {table} order by id") == [
            (1, "v", "new"),
            (2, "v", "new"),
        ]


APPENDING = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged',
          on_schema_change='append_new_columns') }}
select id + {{ var('round', 0) }} * 10 as id, 'v' as val
  {% if var('grow', false) %}, 'new' as extra {% endif %}
from range(1, 3)
"""


# Its pre-hook changes no column of its table, but it may have: so says its first word.
HOOKED = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged',
          pre_hook="create table if not exists {{ target.schema }}.side (id int) using delta") }}
-- no relation at all has no columns, as in stock dbt-spark
select {{ (adapter.get_columns_in_relation(none) if execute else []) | length }} + 1 as id
"""


def statements(args):
    """The statements a dbt run sent, as its query log shows them (dbt's comment cut off)."""
    sent = []

    def collect(event):
        if event.info.name == "SQLQuery":
            sent.append(" ".join(event.data.sql.split("*/", 1)[-1].split()).lower())

    run_dbt(args, callbacks=[collect])
    return sent


def of_target(sent, model):
    """The DESCRIBEs of a model's table (not of its staging view)."""
    return [s for s in sent if s.startswith("describe extended") and s.rstrip("`").endswith(model)]


class TestTheTargetIsDescribedOncePerWrite:
    """dbt-spark describes the target for its column lists; over Thrift and Connect the
    DESCRIBE the fence sends to find the table's Delta log answers it, until a statement of the
    node may have changed the table."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"appending.sql": APPENDING, "hooked.sql": HOOKED}

    def test_one_describe_and_a_fresh_one_after_a_schema_change(
        self, project, spark, dbt_profile_name
    ):
        table = f"{project.test_schema}.appending"
        run_dbt(["run", "--select", "appending"])
        sent = statements(["run", "--select", "appending", "--vars", json.dumps({"round": 1})])
        # dbt-spark asks twice (the schema check, the INSERT's column list); over SQL the
        # fence's DESCRIBE answers both, and the catalog is asked nothing else.
        assert len(of_target(sent, "appending")) == (1 if dbt_profile_name in SERVERS else 2), sent
        assert not [s for s in sent if s.startswith("show table extended") and "'*'" not in s]
        grow = {"round": 2, "grow": True}
        sent = statements(["run", "--select", "appending", "--vars", json.dumps(grow)])
        # The INSERT's column list comes from a DESCRIBE sent after the ALTER.
        alter = next(i for i, s in enumerate(sent) if s.startswith("alter table"))
        insert = next(i for i, s in enumerate(sent) if s.startswith("insert into"))
        assert of_target(sent[alter:insert], "appending"), "\n".join(sent)
        assert "`extra` from" in sent[insert]
        assert rows(spark, f"select id, val, extra from {table} order by id") == [
            (1, "v", None),
            (2, "v", None),
            (11, "v", None),
            (12, "v", None),
            (21, "v", "new"),
            (22, "v", "new"),
        ]

    def test_a_statement_that_may_change_a_table_makes_dbt_spark_describe_again(
        self, project, dbt_profile_name
    ):
        run_dbt(["run", "--select", "hooked"])
        sent = statements(["run", "--select", "hooked"])
        hook = next(i for i, s in enumerate(sent) if s.startswith("create table if not exists"))
        assert len(of_target(sent[hook:], "hooked")) == 1, "\n".join(sent)
        assert len(of_target(sent[:hook], "hooked")) == (1 if dbt_profile_name in SERVERS else 0)


# A MERGE that changes nothing makes no commit. Its pre-hook commits to another table first.
QUIET = """
{{ config(materialized='incremental', incremental_strategy='insert', unique_key='id',
          pre_hook="insert into {{ target.schema }}.side values (1)") }}
select 1 as id
"""


class TestDeltasRecordOfAnEarlierCommitInTheSession:
    """The fence leaves Delta's record of the session's last commit unset before its write only
    where nothing in the session could have set it: here a pre-hook did, on another table,
    at the version right above vB. The unchanged write then commits only its SetTransaction
    (fence/delta/sequence.py), and the hook's commit on the other table is never taken for it."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"quiet.sql": QUIET}

    def test_an_unchanged_write_after_a_hook_s_commit_is_its_own(self, project, spark):
        table, side = f"{project.test_schema}.quiet", f"{project.test_schema}.side"
        spark.sql(f"create table {side} (id int) using delta")
        run_dbt(["run"])
        spark.sql(f"insert into {table} values (2)")
        vb = history(spark, table)[-1].version
        response = run_dbt(["run"]).results[0].adapter_response
        assert history(spark, side)[-1].version == vb + 1  # the hook's commit, right above vB
        ours = history(spark, table)[-1]
        assert ours.version == vb + 1 and ours.tag["node"] == "model.test.quiet"
        # only the SetTransaction: no file added or removed
        assert [k for k, _ in commit_actions(spark, table, ours.version)] == ["commitInfo", "txn"]
        assert response["fence_outcome"] == "committed"
        assert response["commit_version"] == vb + 1 == ours.version


SHRINKING = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          on_schema_change='sync_all_columns') }}
select id {% if not var('shrink', false) %}, 'v' as val {% endif %} from range(1, 3)
"""


class TestFailedSchemaChangeLeavesNoConf:
    """dbt-spark refuses to drop a Delta column mid-step; the next commit on the same
    connection must carry neither that model's tag nor its strict retry setting."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "a_shrinking.sql": SHRINKING,
            "b_plain.sql": "{{ config(materialized='table') }} select 1 as id",
        }

    def test_next_model_commits_untagged(self, project, spark):
        run_dbt(["run"])
        results = run_dbt(["run", "--vars", json.dumps({"shrink": True})], expect_pass=False)
        status = {r.node.name: str(r.status) for r in results.results}
        assert status == {"a_shrinking": "error", "b_plain": "success"}
        last = history(spark, f"{project.test_schema}.b_plain")[-1]
        assert last.user_metadata is None


class OneRowTarget:
    """A one-row Delta table, rebuilt per test; the fence is then driven directly."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"target.sql": "{{ config(materialized='table') }} select 1 as id, 'a' as v"}

    def fresh_target(self, project, spark):
        run_dbt(["run"])
        table = f"{project.test_schema}.target"
        return table, history(spark, table)[-1].version


class TestRevertAfterCommit(OneRowTarget):
    """The gap between the pre-check and the MERGE's own snapshot, made deterministic:
    the foreign commit lands just before our MERGE statement starts."""

    def refused_write(
        self,
        project,
        spark,
        foreign_sql,
        also_after=None,
        before_restore=None,
        step_sql=None,
        empty=False,
    ):
        """Our MERGE through the fence, with `foreign_sql` landing just before it starts;
        `step_sql` is a step of ours (tagged, strict) that commits after vB, before the write."""
        table, vb = self.fresh_target(project, spark)
        runner = ForeignAroundWrite(
            project.adapter.connections,
            ForeignWriter(spark),
            before=lambda _: foreign_sql.format(t=table),
            after=also_after and also_after.format(t=table),
            times=1,
            before_restore=[sql.format(t=table) for sql in before_restore or []],
        )
        fence = Fence(runner, project.adapter.connections.single_attempt)
        state = self.state(project, vb)
        with (
            project.adapter.connection_named("revert"),
            pytest.raises(FenceViolation) as raised,
        ):
            if step_sql:
                with fence.tagged(state, "schema_change", strict=True):
                    runner.execute(step_sql.format(t=table))
                state = fence.after_step(state, "schema_change")
            fence.write(state, self.merge_sql(table, empty))
        return table, vb, raised.value

    def state(self, project, vb):
        table = f"{project.test_schema}.target"
        return FenceState(table, table, "merge", vb, vb, "inv-test", "model.test.target")

    def merge_sql(self, table, empty=False):
        source = "select 1 as id, 'ours' as v" + (" where false" if empty else "")
        return (
            f"merge into {table} t using ({source}) s on s.id = t.id "
            "when matched then update set v = s.v when not matched then insert (id, v) "
            "values (s.id, s.v)"
        )

    def test_violation_after_commit_is_reverted(self, project, spark):
        table, vb, violation = self.refused_write(project, spark, "update {t} set v = 'foreign'")
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["UPDATE", "MERGE", "RESTORE"]
        assert after[1].read_version == vb + 1  # our MERGE started after the foreign commit
        assert after[2].tag["step"] == "revert" and after[2].read_version == after[1].version
        report = violation.report
        assert report.outcome == Outcome.REVERTED and report.revert_version == after[2].version
        assert "then reverted by RESTORE" in str(violation)
        assert rows(spark, f"select id, v from {table}") == [(1, "foreign")]

    @pytest.mark.parametrize("later", [False, True], ids=["at_the_head", "below_a_later_commit"])
    def test_an_empty_write_that_lost_a_race_is_never_written_and_nothing_restored(
        self, project, spark, later
    ):
        # Under the fence's SetTransaction a MERGE of no rows commits that alone: nothing of it
        # can have overwritten the foreign UPDATE, so no RESTORE (a commit with windows of its
        # own), no "NOT reverted" below a later commit, and the next run is not blocked.
        table, vb, violation = self.refused_write(
            project,
            spark,
            "update {t} set v = 'foreign'",
            also_after=later and "insert into {t} values (2, 'later')",
            empty=True,
        )
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["UPDATE", "MERGE", *(["WRITE"] if later else [])]
        ours = after[1]
        assert ours.tag["step"] == "write" and ours.read_version == vb + 1
        metrics = ours.metrics
        assert metrics["numTargetFilesAdded"] == "0" and metrics["numTargetFilesRemoved"] == "0"
        report = violation.report
        assert report.outcome == Outcome.NEVER_WRITTEN and report.nothing_of_ours_remains
        message = str(violation)
        assert (
            f"never written: its commit v{ours.version} MERGE changed no rows (it holds only "
            "the fence's SetTransaction), so the table is as the other writer(s) left it."
        ) in message
        assert "RESTORE" not in message and "NOT reverted" not in message
        assert rows(spark, f"select id, v from {table} order by id") == [
            (1, "foreign"),
            *([(2, "later")] if later else []),
        ]
        # A later run of the node finds that commit and is not refused by it (E213).
        connections = project.adapter.connections
        fence = Fence(FenceSql(connections), connections.single_attempt)
        latest = history(spark, table)[-1].version
        later_run = FenceState(table, table, "merge", latest, latest, "inv-2", "model.test.target")
        with project.adapter.connection_named("next"):
            fence.check_earlier_runs(later_run, frozenset())

    def test_violation_with_a_later_commit_is_not_reverted_and_says_so(self, project, spark):
        table, vb, violation = self.refused_write(
            project,
            spark,
            "update {t} set v = 'foreign'",
            also_after="insert into {t} values (2, 'later')",
        )
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["UPDATE", "MERGE", "WRITE"]
        assert violation.report.outcome == Outcome.NOT_REVERTED
        message = str(violation)
        assert f"written as v{vb + 2} and NOT reverted" in message
        assert f"RESTORE TABLE {table} TO VERSION AS OF {vb + 1}" in message
        assert rows(spark, f"select id, v from {table} order by id") == [(1, "ours"), (2, "later")]

    def test_a_foreign_commit_between_our_steps_is_never_reverted(self, project, spark):
        table, vb, violation = self.refused_write(
            project,
            spark,
            "insert into {t} (id, v) values (2, 'foreign')",
            step_sql="alter table {t} add columns (note string)",
        )
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["ADD COLUMNS", "WRITE", "MERGE", "RESTORE"]
        alter, foreign, merge, restore = after
        assert alter.tag["step"] == "schema_change" and foreign.tag is None  # the race fired
        assert merge.read_version == foreign.version and restore.read_version == merge.version
        # Only our MERGE went: the foreign row and our ALTER stand.
        assert rows(spark, f"select * from {table} order by id") == [
            (1, "a", None),
            (2, "foreign", None),
        ]
        assert rows(spark, f"select * from {table} order by id") == rows(
            spark, f"select * from {table} version as of {foreign.version} order by id"
        )
        report = violation.report
        assert report.outcome == Outcome.REVERTED
        assert [c.version for c in report.standing] == [alter.version]
        message = str(violation)
        assert (
            f"written as v{merge.version}, then reverted by RESTORE (v{restore.version}); this "
            f"run's earlier steps v{alter.version} ADD COLUMNS (schema_change) were NOT reverted "
            f"(v{foreign.version} landed after them, so a RESTORE would undo that too)"
        ) in message
        assert f"RESTORE TABLE {table} TO VERSION AS OF {vb}`" in message
        assert "as the other writer(s) left it" not in message and "fence_retries" not in message

    def test_a_commit_landing_before_the_restore_is_given_back(self, project, spark):
        table, vb, violation = self.refused_write(
            project,
            spark,
            "update {t} set v = 'foreign'",
            before_restore=["insert into {t} values (3, 'late')"],
        )
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["UPDATE", "MERGE", "WRITE", "RESTORE", "RESTORE"]
        foreign, merge, late, restore, undo = after
        assert late.tag is None and late.read_version == merge.version  # the race fired
        assert restore.read_version == late.version and restore.tag["step"] == "revert"
        assert undo.read_version == restore.version and undo.tag["step"] == "revert_undo"
        # The late row is back, with our MERGE, as the message says.
        assert rows(spark, f"select id, v from {table} order by id") == [(1, "ours"), (3, "late")]
        report = violation.report
        assert report.outcome == Outcome.NOT_REVERTED and report.rolled_back == []
        message = str(violation)
        assert (
            f"written as v{merge.version} and NOT reverted (v{late.version} WRITE landed"
        ) in message
        assert (
            f"landed just before the RESTORE (v{restore.version}), which rolled it back too, so "
            f"v{undo.version} restored v{late.version}: the table is as it was before the RESTORE)"
        ) in message
        assert f"RESTORE TABLE {table} TO VERSION AS OF {foreign.version}`" in message

    def test_a_commit_landing_before_the_undo_is_named_missing(self, project, spark):
        table, vb, violation = self.refused_write(
            project,
            spark,
            "update {t} set v = 'foreign'",
            before_restore=[
                "insert into {t} values (3, 'late')",
                "insert into {t} values (4, 'later')",
            ],
        )
        after = [e for e in history(spark, table) if e.version > vb]
        operations = ["UPDATE", "MERGE", "WRITE", "RESTORE", "WRITE", "RESTORE"]
        assert [e.operation for e in after] == operations
        foreign, merge, late, restore, later, undo = after
        # Both races fired: each landed right before a RESTORE took its snapshot.
        assert late.tag is None and restore.read_version == late.version
        assert later.tag is None and later.read_version == restore.version
        assert undo.tag["step"] == "revert_undo" and undo.read_version == later.version
        # The undo gave back our MERGE and the late row, and took the later one.
        assert rows(spark, f"select id, v from {table} order by id") == [(1, "ours"), (3, "late")]
        report = violation.report
        assert report.outcome == Outcome.NOT_REVERTED and report.reverted == []
        assert [c.version for c in report.rolled_back] == [later.version]
        message = str(violation)
        assert (
            f"written as v{merge.version} and NOT reverted (v{late.version} WRITE landed just "
            f"before the RESTORE (v{restore.version}), which rolled it back too, so "
            f"v{undo.version} restored v{late.version}; but v{later.version} WRITE landed just "
            f"before that RESTORE (v{undo.version}), which rolled it back)"
        ) in message
        assert f"now missing from the table: v{later.version} WRITE." in message
        # The RESTORE it names gives the later row back without ours and without the late one.
        back = f"RESTORE TABLE {table} TO VERSION AS OF {later.version}"
        assert (
            f"`{back}` would bring them back and undo this run's v{merge.version} MERGE "
            f"(write), and v{late.version} WRITE by other writers: first make sure"
        ) in message
        assert rows(
            spark, f"select id, v from {table} version as of {later.version} order by id"
        ) == [(1, "foreign"), (4, "later")]


class TestStepThatCommittedNothing(OneRowTarget):
    """A pre-hook DELETE of ours that matches no row makes no commit; another writer's commit
    as it starts is then the only one after vB. It is theirs, never taken for our step: the
    step check refuses before any write, and there is nothing of ours to revert."""

    def refused_step(self, project, spark, where: str):
        """Our pre-hook step `delete ... where <where>` through the fence, their UPDATE of row
        1 (the row our DELETE reads) landing right before it starts: the step check's refusal."""
        table, vb = self.fresh_target(project, spark)
        theirs = f"update {table} set v = 'foreign' where id = 1"
        runner = ForeignAroundWrite(
            project.adapter.connections,
            ForeignWriter(spark),
            before=lambda _: theirs,
            times=1,
            writes=("delete",),
        )
        fence = Fence(runner, project.adapter.connections.single_attempt)
        state = FenceState(
            table, table, "append_if_unchanged", vb, vb, "inv-step", "model.test.target"
        )
        with (
            project.adapter.connection_named("step"),
            pytest.raises(FenceViolation) as raised,
        ):
            with fence.tagged(state, "pre_hook", strict=True):
                runner.execute(f"delete from {table} where {where}")
            fence.after_step(state, "pre_hook")
        assert runner.fired == 1
        return table, vb, raised.value

    def test_the_foreign_commit_stands_and_nothing_is_restored(self, project, spark):
        table, vb, violation = self.refused_step(project, spark, "id = 1 and v = 'never'")
        after = [e for e in history(spark, table) if e.version > vb]
        # The race fired (their UPDATE read vB), our DELETE committed nothing, no RESTORE ran.
        assert [(e.operation, e.tag, e.read_version) for e in after] == [("UPDATE", None, vb)]
        report = violation.report
        assert report.outcome == Outcome.NEVER_WRITTEN
        assert report.ours == [] and report.standing == [] and report.revert_version is None
        assert [c.version for c in report.landed] == [after[0].version]
        assert "the table is as the other writer(s) left it" in str(violation)
        assert rows(spark, f"select id, v from {table}") == [(1, "foreign")]

    def test_a_step_that_committed_over_a_foreign_commit_is_refused_and_undone(
        self, project, spark
    ):
        # The same race, our DELETE matching: strict, it commits on top of their UPDATE, which
        # landed before its snapshot. The step check judges the commits below our step, not
        # only above it: their UPDATE changed data, so our DELETE is reverted and theirs stands.
        table, vb, violation = self.refused_step(project, spark, "id = 1")
        after = [e for e in history(spark, table) if e.version > vb]
        assert [(e.operation, e.tag and e.tag["step"]) for e in after] == [
            ("UPDATE", None),
            ("DELETE", "pre_hook"),
            ("RESTORE", "revert"),
        ]
        assert after[1].read_version == after[0].version  # our step built on theirs
        report = violation.report
        # The write was never sent; the step of ours that was, is undone.
        assert report.outcome == Outcome.NEVER_WRITTEN and report.standing == []
        assert report.revert_version == after[2].version
        assert f"v{after[0].version} UPDATE" in str(violation)
        assert rows(spark, f"select id, v from {table}") == [(1, "foreign")]


class TestRetries(OneRowTarget):
    """fence_retries at the protocol level, with a foreign commit before every write."""

    def run(self, project, spark, retries, also_after=False):
        table, vb = self.fresh_target(project, spark)
        runner = ForeignAroundWrite(
            project.adapter.connections,
            ForeignWriter(spark),
            before=lambda fired: f"insert into {table} values ({100 + fired}, 'x')",
            after=also_after and f"insert into {table} values (200, 'later')",
        )
        # No jitter: each retry starts at once.
        fence = Fence(runner, project.adapter.connections.single_attempt, rng=lambda: 0.0)
        state = FenceState(table, table, "append_if_unchanged", vb, vb, "inv-r", "model.t")
        with (
            project.adapter.connection_named("retries"),
            pytest.raises(FenceViolation) as raised,
        ):
            fence.run(state, f"insert into {table} values (1, 'ours')", retries=retries)
        return raised.value, runner, table, vb

    def test_exhausted_retries_list_every_attempt(self, project, spark):
        violation, runner, table, vb = self.run(project, spark, retries=2)
        assert runner.fired == 3
        after = [e for e in history(spark, table) if e.version > vb]
        foreign = [e for e in after if e.operation == "WRITE" and e.tag is None]
        assert len(foreign) == 3  # the race fired before each of the three attempts
        assert [e.tag["attempt"] for e in ours(after)] == [1, 2, 3]
        text = str(violation)
        assert "attempts: 3 (fence_retries: 2), all refused:" in text
        assert text.count("written and reverted") == 3
        assert rows(spark, f"select count(*) from {table} where v = 'ours'") == [(0,)]
        assert rows(spark, f"select count(*) from {table} where v = 'x'") == [(3,)]

    def test_no_retry_when_a_commit_of_ours_remains(self, project, spark):
        violation, runner, table, vb = self.run(project, spark, retries=3, also_after=True)
        assert runner.fired == 1  # stopped at once: our commit could not be reverted
        after = [e for e in history(spark, table) if e.version > vb]
        foreign = [e for e in after if e.operation == "WRITE" and e.tag is None]
        assert len(foreign) == 2  # before our write, and on top of it
        assert violation.report.outcome == Outcome.NOT_REVERTED
        assert rows(spark, f"select count(*) from {table} where v = 'ours'") == [(1,)]
