"""Python models: run in the node's own SparkSession (embedded, or a Spark Connect session),
incremental ones fenced like SQL. Stock dbt-spark runs Python models only on Databricks: on a
session or a Thrift server it has none to race, so these races have no stock control.

Each race first proves from DESCRIBE HISTORY that the foreign commit landed where intended,
then judges the outcome from the table's contents and history.
"""

import json
import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.fenced_spark import python_model
from tests.functional.lakehouse import (
    ForeignAt,
    dbt_process,
    history,
    ours,
    process_output,
    response_of,
    rows,
)

EVENTS = """
{{ config(materialized='table') }}
select id, score from values {{ var('events', '(1, 10), (2, 20)') }} as e(id, score)
"""

# A watermark model: on an incremental run it reads its own table (`dbt.this`) for the
# newest id it holds, and merges the events above it.
SCORES = """
from pyspark.sql import functions as F


def model(dbt, session):
    dbt.config(materialized="incremental", incremental_strategy="merge", unique_key="id")
    events = dbt.ref("events")
    if dbt.is_incremental:
        seen = session.sql(f"select coalesce(max(id), 0) as m from {dbt.this}").collect()[0].m
        events = events.filter(F.col("id") > F.lit(seen))
    return events.select("id", (F.col("score") * 2).alias("score"))
"""

# The same watermark, read with `session.table(...)`, appended: append_if_unchanged.
APPENDS = """
def model(dbt, session):
    dbt.config(materialized="incremental", incremental_strategy="append")
    events = dbt.ref("events")
    if dbt.is_incremental:
        mine = session.table(str(dbt.this))
        seen = mine.agg({"id": "max"}).collect()[0][0] or 0
        events = events.filter(events.id > seen)
    return events
"""

# Reads its own table by path: past the fence's pin (docs/limits.md).
BY_PATH = SCORES.replace(
    'seen = session.sql(f"select coalesce(max(id), 0) as m from {dbt.this}").collect()[0].m',
    'location = session.sql(f"describe detail {dbt.this}").collect()[0].location\n'
    '        seen = session.read.format("delta").load(location).agg({"id": "max"}).first()[0]',
)

# Never reads its own table: a blind append, unfenced as dbt-spark runs it (its temp table).
BLIND = """
def model(dbt, session):
    dbt.config(materialized="incremental", incremental_strategy="append")
    return dbt.ref("events")
"""

MORE = "(1, 10), (2, 20), (3, 30), (4, 40)"


def dbt_vars(**values) -> list[str]:
    return ["--vars", json.dumps(values)]


class PythonTables:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": EVENTS, "scores.py": SCORES, "appends.py": APPENDS}

    @pytest.fixture
    def tables(self, project):
        """Both models built from events 1 and 2; then events 3 and 4 arrive."""
        run_dbt(["run", "--full-refresh"])
        run_dbt(["run", "--select", "events", *dbt_vars(events=MORE)])
        return f"{project.test_schema}.scores", f"{project.test_schema}.appends"


@pytest.mark.skip_profile("thrift", reason="a Thrift client has no SparkSession to run Python in")
class TestFencedPythonModels(PythonTables):
    def test_a_python_merge_is_fenced_and_reads_its_table_at_vb(
        self, project, spark, monkeypatch, tables
    ):
        scores, _ = tables
        vb = history(spark, scores)[-1].version
        sent = []  # what the model's session.sql sent to Spark (a spy: Spark runs it)
        pinned = python_model.Pin.pinned
        monkeypatch.setattr(
            python_model.Pin, "pinned", lambda pin, q: sent.append(pinned(pin, q)) or sent[-1]
        )
        results = run_dbt(["run", *dbt_vars(events=MORE)])
        [watermark] = [q for q in sent if q.endswith(f"scores VERSION AS OF {vb}")]
        assert "max(id)" in watermark
        assert any(q.endswith("`appends` VERSION AS OF 0") for q in sent)  # session.table()
        response = response_of(project, "scores")
        assert response["fence_outcome"] == "committed"
        assert (response["read_version"], response["commit_version"]) == (vb, vb + 1)
        merge = history(spark, scores)[-1]
        assert merge.operation == "MERGE" and merge.read_version == vb
        assert merge.tag["node"] == "model.test.scores" and merge.tag["read_version"] == vb
        assert rows(spark, f"select id, score from {scores} order by id") == [
            (1, 20),
            (2, 40),
            (3, 60),
            (4, 80),
        ]
        # What ran, in target/run: the model's code, then the fence's statements as comments.
        with open(f"{project.project_root}/target/run/test/models/scores.py") as f:
            ran = f.read()
        assert "def model(dbt, session)" in ran and f"pinned to v{vb}" in ran
        assert re.search(r"^#\s+merge into", ran, re.M | re.I)
        assert len(results.results) == 3

    def test_race_a_foreign_commit_after_vb_refuses_the_python_merge(
        self, project, spark, monkeypatch, tables
    ):
        scores, _ = tables
        vb = history(spark, scores)[-1].version
        ForeignAt(monkeypatch, spark, "vb", f"insert into {scores} values (100, 1)")
        results = run_dbt(["run", "--select", "scores", *dbt_vars(events=MORE)], expect_pass=False)
        after = [e for e in history(spark, scores) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE"] and after[0].tag is None  # it landed
        assert after[0].version == vb + 1
        message = results.results[0].message
        assert "refused" in message and f"v{vb + 1} WRITE" in message
        assert "never written" in message
        assert ours(after) == []
        assert rows(spark, f"select id, score from {scores} order by id") == [
            (1, 20),
            (2, 40),
            (100, 1),
        ]

    def test_race_a_foreign_commit_refuses_the_python_append_if_unchanged(
        self, project, spark, monkeypatch, tables
    ):
        _, appends = tables
        vb = history(spark, appends)[-1].version
        ForeignAt(monkeypatch, spark, "vb", f"insert into {appends} values (3, 30)")
        results = run_dbt(["run", "--select", "appends", *dbt_vars(events=MORE)], expect_pass=False)
        after = [e for e in history(spark, appends) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE"] and after[0].tag is None
        message = results.results[0].message
        assert "append_if_unchanged" in message and "never written" in message
        # Without the fence both runs' rows would be there: id 3 twice, and 4.
        assert rows(spark, f"select id, score from {appends} order by id") == [
            (1, 10),
            (2, 20),
            (3, 30),
        ]


@pytest.mark.skip_profile("thrift", reason="a Thrift client has no SparkSession to run Python in")
class TestUnfencedPythonModels(PythonTables):
    @pytest.fixture(scope="class")
    def models(self):
        unfenced = SCORES.replace('unique_key="id")', 'unique_key="id", fenced=False)')
        return {
            "events.sql": EVENTS,
            "by_path.py": BY_PATH,
            "blind.py": BLIND,
            "unfenced.py": unfenced,
        }

    @pytest.fixture
    def tables(self, project):
        run_dbt(["run", "--full-refresh"])
        run_dbt(["run", "--select", "events", *dbt_vars(events=MORE)])
        return project.test_schema

    def test_an_append_is_fenced_and_fenced_false_runs_as_dbt_spark_runs_it(
        self, project, spark, tables
    ):
        results = run_dbt(["run", "--select", "blind", "unfenced"])
        outcome = {r.node.name: r.adapter_response.get("fence_outcome") for r in results.results}
        # What a Python model reads is known only once it has run: an append is always fenced.
        assert outcome == {"blind": "committed", "unfenced": None}
        blind = history(spark, f"{tables}.blind")
        assert [e.tag["strategy"] for e in ours(blind)] == ["append_if_unchanged"]
        assert rows(spark, f"select id, count(*) from {tables}.blind group by id order by id") == [
            (1, 2),
            (2, 2),
            (3, 1),
            (4, 1),
        ]
        unfenced = history(spark, f"{tables}.unfenced")
        assert unfenced[-1].operation == "MERGE" and ours(unfenced) == []
        assert rows(spark, f"select id, score from {tables}.unfenced order by id") == [
            (1, 20),
            (2, 40),
            (3, 60),
            (4, 80),
        ]

    def test_a_read_by_path_escapes_the_pin_but_not_the_fence(
        self, project, spark, monkeypatch, tables
    ):
        table = f"{tables}.by_path"
        vb = history(spark, table)[-1].version
        ForeignAt(monkeypatch, spark, "vb", f"insert into {table} values (3, 1)")
        results = run_dbt(["run", "--select", "by_path"], expect_pass=False)
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE"] and after[0].tag is None  # it landed
        # The model read the foreign row by path (watermark 3, where vB held 2): no pin saw
        # it. A Python model counts as having read its whole table, so the data change after
        # vB refuses it all the same, and nothing computed from the unpinned read is written.
        assert "assert" not in results.results[0].message
        assert "never written" in results.results[0].message
        assert "load(location)" in BY_PATH  # the replace above took
        assert rows(spark, f"select id, score from {table} order by id") == [
            (1, 20),
            (2, 40),
            (3, 1),
        ]


@pytest.mark.skip_profile("thrift", reason="a Thrift client has no SparkSession to run Python in")
class TestPythonInsertAndReplaceWhere(PythonTables):
    """The other fenced strategies take a Python model's DataFrame as they take model SQL."""

    @pytest.fixture(scope="class")
    def models(self):
        inserts = BLIND.replace(
            'incremental_strategy="append")', 'incremental_strategy="insert", unique_key="id")'
        )
        replaces = BLIND.replace(
            'incremental_strategy="append")',
            'incremental_strategy="replace_where", incremental_predicates="id >= 3")',
        ).replace('return dbt.ref("events")', 'return dbt.ref("events").filter("id >= 3")')
        return {"events.sql": EVENTS, "inserts.py": inserts, "replaces.py": replaces}

    def test_insert_and_replace_where_commit_fenced(self, project, spark, tables):
        results = run_dbt(["run", "--select", "inserts", "replaces"])
        outcome = {
            r.node.name: (
                r.adapter_response.get("fence_outcome"),
                r.adapter_response["read_version"],
            )
            for r in results.results
        }
        assert outcome == {"inserts": ("committed", 0), "replaces": ("committed", 0)}
        schema = project.test_schema
        assert rows(spark, f"select id, score from {schema}.inserts order by id") == [
            (1, 10),
            (2, 20),
            (3, 30),
            (4, 40),
        ]
        assert rows(spark, f"select id from {schema}.replaces order by id") == [(3,), (4,)]
        tags = [ours(history(spark, f"{schema}.{t}"))[-1].tag["strategy"] for t in outcome]
        assert tags == ["insert", "replace_where"]


@pytest.mark.skip_profile("thrift", reason="a Thrift client has no SparkSession to run Python in")
class TestPythonModelsRefused(PythonTables):
    """What a Python model cannot do, refused with the model's name and nothing written."""

    @pytest.fixture(scope="class")
    def models(self):
        other = SCORES.replace(
            'return events.select("id", (F.col("score") * 2).alias("score"))',
            'return session.newSession().range(3).withColumnRenamed("id", "x")',
        )
        batches = BLIND.replace(
            'incremental_strategy="append")',
            'incremental_strategy="microbatch", event_time="id", batch_size="day", '
            'begin="2026-01-01")',
        )
        return {"events.sql": EVENTS, "other_session.py": other, "batches.py": batches}

    def test_another_session_s_dataframe_and_microbatch_are_refused(self, project, spark):
        results, log = run_dbt_and_capture(["run"], expect_pass=False)
        message = {r.node.name: r.message or "" for r in results.results}
        # Over Connect pyspark itself refuses a second session (JVM_ATTRIBUTE_NOT_SUPPORTED).
        refusal = {
            "session": "model.test.other_session returned a DataFrame of another SparkSession",
            "connect": "JVM_ATTRIBUTE_NOT_SUPPORTED",
        }[str(project.adapter.config.credentials.method.value)]
        assert refusal in message["other_session"]
        # dbt reports a microbatch model's error per batch, in the log.
        assert message["batches"] == "ERROR"
        assert "batches: the microbatch strategy is not for Python models" in log
        tables = [r.tableName for r in spark.sql(f"show tables in {project.test_schema}").collect()]
        assert "other_session" not in tables and "batches" not in tables


@pytest.mark.skip_profile("thrift", reason="a Thrift client has no SparkSession to run Python in")
class TestPythonRetry(PythonTables):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+fence_retries": 1}}

    def test_a_retry_runs_the_python_again_at_the_new_version(
        self, project, spark, monkeypatch, tables
    ):
        scores, _ = tables
        vb = history(spark, scores)[-1].version
        # The foreign row holds id 3: the retry's watermark reads it and merges id 4 only.
        ForeignAt(monkeypatch, spark, "vb", f"insert into {scores} values (3, 1)")
        run_dbt(["run", "--select", "scores", *dbt_vars(events=MORE)])
        after = [e for e in history(spark, scores) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE", "MERGE"]
        assert after[0].tag is None and after[1].read_version == vb + 1
        assert after[1].tag["attempt"] == 2 and after[1].tag["read_version"] == vb + 1
        assert rows(spark, f"select id, score from {scores} order by id") == [
            (1, 20),
            (2, 40),
            (3, 1),
            (4, 80),
        ]


@pytest.mark.skip_profile("thrift", reason="a Thrift client has no SparkSession to run Python in")
@pytest.mark.skip_profile("session", reason="two dbt processes need a server: --profile connect")
class TestDoubleFiredPythonWatermark(PythonTables):
    """Two `dbt run` processes of one project, one Connect server: a job fired twice."""

    @pytest.fixture(scope="class")
    def models(self):
        # The pre-hook holds each run after it captured vB, so both read the same watermark.
        held = APPENDS.replace(
            'incremental_strategy="append")',
            'incremental_strategy="append", pre_hook=["select reflect('
            "'java.lang.Thread', 'sleep', cast(8000 as bigint))\"])",
        )
        return {"events.sql": EVENTS, "appends.py": held}

    def test_the_batch_is_appended_once(self, project, spark, tables):
        _, appends = tables
        vb = history(spark, appends)[-1].version
        runs = {
            n: dbt_process(project, n, {"events": MORE}, "--select", "appends")
            for n in ("first", "second")
        }
        codes = {n: run.wait(timeout=600) for n, run in runs.items()}
        outputs = {n: process_output(project, n) for n in runs}
        assert sorted(codes.values()) == [0, 1], outputs
        after = [e for e in history(spark, appends) if e.version > vb]
        loser = next(n for n, code in codes.items() if code)
        assert "refused" in outputs[loser] and f"version {vb}" in outputs[loser]
        # The loser's append was never written, or written and reverted (its strict write
        # read the winner's commit: Delta let it through, the verification did not).
        if any(e.operation == "RESTORE" for e in after):
            assert "reverted" in outputs[loser]
            assert [e.operation for e in after] == ["WRITE", "WRITE", "RESTORE"]
        else:
            assert "never written" in outputs[loser]
            assert [e.operation for e in after] == ["WRITE"]
        assert ours(after)[0].read_version == vb
        assert rows(spark, f"select id from {appends} order by id") == [(1,), (2,), (3,), (4,)]


class TestPythonOverThrift(PythonTables):
    @pytest.fixture(scope="class")
    def models(self):
        hooked = SCORES.replace(
            'unique_key="id")', 'unique_key="id", pre_hook=["create table hook_ran (x int)"])'
        )
        return {"events.sql": EVENTS, "scores.py": hooked}

    @pytest.mark.skip_profile("session", "connect", reason="the refusal is thrift's")
    def test_a_python_model_fails_before_it_runs_naming_the_methods(self, project, spark):
        results = run_dbt(["run"], expect_pass=False)
        failed = {r.node.name: r for r in results.results}
        assert failed["events"].status == "success"
        message = failed["scores"].message
        assert "model.test.scores" in message and "method 'thrift'" in message
        assert "session or connect" in message
        tables = [r.tableName for r in spark.sql(f"show tables in {project.test_schema}").collect()]
        assert "hook_ran" not in tables and "scores" not in tables  # nothing of it ran
