"""What the run sets, every model sees: on-run-start's confs and temp views reach every model's
session while a model's own pre-hook SET stays in it; the user's commit label survives a fenced
write; an unfiltered microbatch builds; a view becomes the incremental table. Stock dbt-spark,
whose embedded session is one shared session, is the control."""

import json
import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import ForeignAt, history, ours, rows

ON_RUN_START = [
    "set spark.sql.session.timeZone = Asia/Tokyo",
    "set spark.databricks.delta.schema.autoMerge.enabled = true",
    "create or replace temporary view run_hook_view as select 7 as seven",
]
# Stock's hooks run in the test process's own session: leave it as it was.
ON_RUN_END = [
    "reset spark.sql.session.timeZone",
    "reset spark.databricks.delta.schema.autoMerge.enabled",
    "drop view if exists run_hook_view",
]

TZ = """
{{ config(materialized='table') }}
select current_timezone() as tz, cast(timestamp '2024-01-01 00:00:00' as long) as epoch
"""
FROM_VIEW = "{{ config(materialized='table') }}\nselect seven from run_hook_view"
GROWS = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
{% if var('round', 1) == 1 %}
select 1 as id, 'a' as v
{% else %}
select 1 as id, 'b' as v, 'new' as extra
{% endif %}
"""
PRE_SET = """
{{ config(materialized='table', pre_hook="set spark.sql.session.timeZone = America/New_York") }}
select current_timezone() as tz
"""
# Runs after pre_set: stock's shared session hands it pre_set's zone, ours must not.
AFTER_SET = """
-- depends_on: {{ ref('pre_set') }}
{{ config(materialized='table') }}
select current_timezone() as tz
"""
AUDITED = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          pre_hook="set spark.databricks.delta.commitInfo.userMetadata = audit_b2",
          post_hook=["insert into " ~ this.schema ~ ".audit_sink values (1)",
                     "reset spark.databricks.delta.commitInfo.userMetadata"]) }}
select {{ var('round', 1) }} as id
"""
EVENTS = """
{{ config(materialized='table') }}
select id, cast(d as date) as d
from values (1, '2026-01-01'), (2, '2026-01-02'), (3, '2026-01-03') as t(id, d)
"""
# Its upstream has no event_time: dbt runs every batch on all of it.
DAILY = """
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='d',
          batch_size='day', begin='2026-01-01', partition_by=['d']) }}
select id, d from {{ ref('events') }}
"""
HOOKS = {
    "models": {"+file_format": "delta"},
    "on-run-start": ON_RUN_START,
    "on-run-end": ON_RUN_END,
}
WINDOW = ["--event-time-start", "2026-01-01", "--event-time-end", "2026-01-04"]


def models():
    return {
        "tz.sql": TZ,
        "from_view.sql": FROM_VIEW,
        "grows.sql": GROWS,
        "pre_set.sql": PRE_SET,
        "after_set.sql": AFTER_SET,
        "audited.sql": AUDITED,
        "events.sql": EVENTS,
        "daily.sql": DAILY,
    }


class RunSettings:
    EXCLUDE = ["daily"]

    @pytest.fixture(scope="class")
    def models(self):
        return models()

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return HOOKS

    @pytest.fixture(scope="class")
    def built(self, project, spark):
        spark.sql(f"create table {project.test_schema}.audit_sink (id int) using delta")
        first = run_dbt(["run", "--exclude", *self.EXCLUDE])
        second = run_dbt(["run", "--exclude", *self.EXCLUDE, "--vars", json.dumps({"round": 2})])
        return first, second

    def test_on_run_start_settings_reach_every_model(self, project, spark, built):
        s = project.test_schema
        assert rows(spark, f"select tz, epoch from {s}.tz") == [("Asia/Tokyo", 1704034800)]
        assert rows(spark, f"select seven from {s}.from_view") == [(7,)]

    def test_a_merge_under_the_runs_schema_auto_merge_adds_the_column(self, project, spark, built):
        table = f"{project.test_schema}.grows"
        assert rows(spark, f"select id, v, extra from {table}") == [(1, "b", "new")]

    def test_the_users_commit_label_is_kept(self, project, spark, built):
        s = project.test_schema
        last = history(spark, f"{s}.audited")[-1]
        assert last.operation == "MERGE" and self.label(last) == "audit_b2"
        # The post-hook's insert elsewhere commits after our write: the label was put back.
        assert history(spark, f"{s}.audit_sink")[-1].user_metadata == "audit_b2"


class TestRunSettings(RunSettings):
    @staticmethod
    def label(commit):
        assert ours([commit]) == [commit]
        return commit.tag["user_metadata"]

    def test_a_models_pre_hook_set_stays_in_that_model(self, project, spark, built):
        s = project.test_schema
        assert rows(spark, f"select tz from {s}.pre_set") == [("America/New_York",)]
        assert rows(spark, f"select tz from {s}.after_set") == [("Asia/Tokyo",)]

    def test_hook_statements_are_replayed_into_the_models_sessions(self, built, logs_dir):
        with open(f"{logs_dir}/dbt.log") as log:
            assert "3 session statement(s) of the run's hooks replayed into connection " in (
                log.read()
            )


class TestStockRunSettings(StockSparkProfile, RunSettings):
    """The same models on stock dbt-spark: the behaviour the fenced run must match. Not the
    pre-hook SET pair: stock's shared session leaks that zone into every model after it."""

    EXCLUDE = ["daily", "pre_set", "after_set"]

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return HOOKS

    @pytest.fixture(scope="class", autouse=True)
    def session_only(self, request):
        if request.config.getoption("--profile") != "session":
            pytest.skip("over a server stock dbt-spark's connections are separate sessions too")

    @staticmethod
    def label(commit):
        return commit.user_metadata


# A strict write sets maxCommitAttempts to 0 around itself. Spark's `${key}` in the post-hook
# records what the session holds after the write.
STRICT_AFTER_HOOK = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged',
          pre_hook="set spark.databricks.delta.maxCommitAttempts = 7",
          post_hook="insert into " ~ this.schema ~ ".attempts_seen select " ~ var('round', 1)
                    ~ ", '${spark.databricks.delta.maxCommitAttempts}'") }}
select {{ var('round', 1) }} as id
"""


class TestStrictWritePutsBackTheHooksConf:
    @pytest.fixture(scope="class")
    def models(self):
        return {"strict_after_hook.sql": STRICT_AFTER_HOOK}

    def test_the_hooks_max_commit_attempts_holds_after_the_write(
        self, project, spark, dbt_profile_target
    ):
        s = project.test_schema
        spark.sql(f"create table {s}.attempts_seen (round int, attempts string) using delta")
        run_dbt(["run", "--vars", json.dumps({"round": 1})])  # builds the table
        thrift = dbt_profile_target["method"] == "thrift"
        # The second run is a fenced strict write (maxCommitAttempts 0 around it).
        _, log = run_dbt_and_capture(
            ["run", "--vars", json.dumps({"round": 2})], expect_pass=not thrift
        )
        [write] = ours(history(spark, f"{s}.strict_after_hook"))
        assert write.tag["strategy"] == "append_if_unchanged" and write.tag["read_version"] == 0
        seen = rows(spark, f"select round, attempts from {s}.attempts_seen order by round")
        if thrift:
            # Only SQL reaches the session there: RESET unset the hook's 7 (docs/limits.md),
            # and the server's `${key}` of an unset key fails the post-hook.
            assert seen == [(1, "7")]
            assert "INVALID_CONF_VALUE" in log and "maxCommitAttempts" in log
        else:
            assert seen == [(1, "7"), (2, "7")]


# The run labels its commits in on-run-start. A batch model's first run builds the table with
# the build as the connection's first SQL: the fence's tag is set (through the session's conf)
# after the run's statements are replayed, not before, or the replayed label would replace it.
RUN_LABEL = {
    "models": {"+file_format": "delta"},
    "on-run-start": ["set spark.databricks.delta.commitInfo.userMetadata = run_label"],
    "on-run-end": ["reset spark.databricks.delta.commitInfo.userMetadata"],
}
BATCHED = """
{{ config(materialized='incremental', incremental_strategy='append',
          fence_batch_id=var('ds')) }}
select '{{ var('ds') }}' as ds
"""


class TestRunLabelUnderTheFencesTag:
    @pytest.fixture(scope="class")
    def models(self):
        return {"batched.sql": BATCHED}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return RUN_LABEL

    def test_the_build_and_the_write_carry_the_tag_and_keep_the_label(self, project, spark):
        table = f"{project.test_schema}.batched"
        for ds in ("d1", "d2", "d1"):  # build, fenced write, a re-run of the first batch
            run_dbt(["run", "--vars", json.dumps({"ds": ds})])
        entries = history(spark, table)
        assert [(e.operation.startswith("CREATE"), e.tag and e.tag["batch"]) for e in entries] == [
            (True, "d1"),
            (False, "d2"),
        ]
        assert entries[-1].tag["user_metadata"] == "run_label"
        assert rows(spark, f"select ds from {table} order by ds") == [("d1",), ("d2",)]


class UnfilteredMicrobatch:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": EVENTS, "daily.sql": DAILY}

    def test_every_batch_writes_its_own_days_rows(self, project, spark):
        table = f"{project.test_schema}.daily"
        for _ in range(2):
            run_dbt(["run", *WINDOW])
            got = rows(spark, f"select id, cast(d as string) from {table} order by id")
            assert got == [(1, "2026-01-01"), (2, "2026-01-02"), (3, "2026-01-03")]


class TestUnfilteredMicrobatch(UnfilteredMicrobatch):
    pass


class TestStockUnfilteredMicrobatch(StockSparkProfile, UnfilteredMicrobatch):
    pass


class TestViewBecomesIncremental:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "was_view.sql": "{{ config(materialized=var('m', 'view'), unique_key='id', "
            "incremental_strategy='merge') }}\nselect 1 as id, 'x' as v"
        }

    def test_the_view_is_replaced_by_the_table(self, project, spark):
        table = f"{project.test_schema}.was_view"
        run_dbt(["run"])
        _, log = run_dbt_and_capture(["run", "--vars", json.dumps({"m": "incremental"})])
        assert "exists as a view" in log and "replaced by a Delta table" in log
        assert "CREATE" in history(spark, table)[0].operation  # a Delta table, built anew
        assert rows(spark, f"select id, v from {table}") == [(1, "x")]
        run_dbt(["run", "--vars", json.dumps({"m": "incremental"})])  # now fenced
        assert ours(history(spark, table)) != []


# Hooks as users write them: a data statement behind nested comments runs once; a session
# statement inside EXECUTE IMMEDIATE reaches the models; a temp view over a table a model drops
# fails no model that does not use it.
HOOKS_AS_WRITTEN = {
    "models": {"+file_format": "delta"},
    "on-run-start": [
        "create table if not exists {{ target.schema }}.run_log (id int) using delta",
        "/* run log /* v2 */ use: one row per run */ "
        "insert into {{ target.schema }}.run_log select 1",
        "execute immediate 'SET spark.sql.session.timeZone = America/Los_Angeles'",
        "create or replace temporary view legacy as select * from {{ target.schema }}.legacy_src",
        # README's way to one value for the run: rendered once, replayed as a literal.
        "declare or replace variable run_started timestamp "
        "default timestamp '{{ run_started_at }}'",
    ],
    "on-run-end": ["reset spark.sql.session.timeZone", "drop view if exists legacy"],
}
MIGRATE = """
{{ config(materialized='table',
          post_hook="drop table if exists " ~ this.schema ~ ".legacy_src") }}
select id, run_started from legacy
"""
AFTER_MIGRATE = """
-- depends_on: {{ ref('migrate') }}
{{ config(materialized='table') }}
select current_timezone() as tz, run_started
"""


class TestHookStatementsAsWritten:
    @pytest.fixture(scope="class")
    def models(self):
        return {"migrate.sql": MIGRATE, "after_migrate.sql": AFTER_MIGRATE}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return HOOKS_AS_WRITTEN

    def test_data_runs_once_session_statements_reach_every_model(
        self, project, spark, dbt_profile_name
    ):
        s = project.test_schema
        spark.sql(f"create table {s}.legacy_src using delta as select 1 as id")
        _, log = run_dbt_and_capture(["--debug", "run"])
        assert rows(spark, f"select count(*) from {s}.run_log") == [(1,)]
        assert rows(spark, f"select id from {s}.migrate") == [(1,)]
        started = rows(spark, f"select run_started from {s}.migrate")
        assert started[0][0] is not None
        assert rows(spark, f"select run_started from {s}.after_migrate") == started
        assert rows(spark, f"select tz from {s}.after_migrate") == [("America/Los_Angeles",)]
        warned = "could not be replayed into this model's session" in log
        if re.search(r"Thrift session reused for connection 'model\.\w+\.after_m", log):
            # migrate left its session as the replay made it: after_migrate was served it,
            # hook statements and all, and nothing was replayed again (thrift.py).
            assert dbt_profile_name == "thrift" and not warned
            return
        # after_migrate's session replayed the temp view after migrate dropped its table.
        assert warned


# After the run's `USE`, the model reads its own table by its bare name: a self-read, fenced.
BARE_SELF_READ = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select id from range(0, {{ var('hi', 3) }})
{% if is_incremental() %}
where id > (select coalesce(max(id), -1) from bare_self)
{% endif %}
"""


class TestBareSelfReadAfterUse:
    @pytest.fixture(scope="class")
    def models(self):
        return {"bare_self.sql": BARE_SELF_READ}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "models": {"+file_format": "delta"},
            "on-run-start": ["use {{ target.schema }}"],
            "on-run-end": ["use default"],
        }

    def test_a_commit_after_vb_refuses_the_append(self, project, spark, monkeypatch):
        table = f"{project.test_schema}.bare_self"
        run_dbt(["run"])
        vb = history(spark, table)[-1].version
        foreign = ForeignAt(monkeypatch, spark, "vb", f"insert into {table} values (100)")
        results, log = run_dbt_and_capture(
            ["run", "--vars", json.dumps({"hi": 5})], expect_pass=False
        )
        after = [e for e in history(spark, table) if e.version > vb]
        assert foreign.fired == 1 and [(e.operation, e.tag) for e in after] == [("WRITE", None)]
        assert "running as append_if_unchanged (fenced)" in log
        (model,) = [r for r in results.results if r.node.name == "bare_self"]
        assert "never written" in model.message
        # Unfenced, the append read max(id) = 100 at the latest version and dropped 3 and 4.
        assert rows(spark, f"select id from {table} order by id") == [(0,), (1,), (2,), (100,)]
        run_dbt(["run", "--vars", json.dumps({"hi": 103})])  # recomputed from 100
        assert [e.version for e in ours(history(spark, table))] == [vb + 2]
        assert rows(spark, f"select max(id), count(*) from {table}") == [(102, 6)]
