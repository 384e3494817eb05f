"""What the run's hooks set reaches every connection's session, in order, once; what a model
sets stays in its own."""

from types import SimpleNamespace

import pytest

from dbt.adapters.fenced_spark.run_state import RunState

COMMENT = '/* {"app": "dbt", "node_id": "master"} */\n'


@pytest.mark.parametrize(
    "sql",
    [
        "set spark.sql.session.timeZone = Asia/Tokyo",
        "SET spark.databricks.delta.schema.autoMerge.enabled=true",
        "SET TIME ZONE 'Asia/Tokyo'",
        "set var x = 1",
        "RESET",
        "reset spark.sql.ansi.enabled",
        "use analytics",
        "DECLARE VARIABLE x INT DEFAULT 1",
        "create or replace temporary view v as select 1",
        "CREATE TEMP VIEW v AS SELECT 1",
        "create temporary function f as 'com.x.F'",
        "-- a hook\ncreate or replace temp view v as select 1",
        COMMENT + "set spark.sql.ansi.enabled=false",
        # Spark nests block comments: the statement starts after the outer one closes.
        "/* tz /* was UTC */ now Tokyo */ set spark.sql.session.timeZone = Asia/Tokyo",
        "SET CATALOG spark_catalog",
        "CREATE TEMPORARY TABLE tmp_sink USING delta OPTIONS (path '/x')",
        "EXECUTE IMMEDIATE 'SET spark.sql.session.timeZone = America/Los_Angeles'",
        "execute immediate 'DECLARE OR REPLACE VARIABLE v INT DEFAULT 42'",
        'execute immediate "create temp view v as select \\"a\\" as s"',
    ],
)
def test_session_statements_are_recognised(sql):
    assert RunState().session_statement(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "set spark.sql.session.timeZone",  # reads the conf
        "SET -v",
        "insert into t values (1)",
        "create or replace view v as select 1",  # a persistent view is data
        "create table t (id int)",
        "drop view v",  # not a temp view of the run
        "select 'set a=b'",
        COMMENT + "create schema if not exists s",
        # An INSERT behind a nested comment that holds `use`: replayed, it would run again.
        "/* run log /* v2 */ use: one row per run */ insert into s.run_log select 1",
        "/* an unclosed /* comment */ set a=1",
        "execute immediate 'insert into t values (1)'",
        "execute immediate stmt",  # a statement in a variable cannot be read
    ],
)
def test_everything_else_is_not(sql):
    assert not RunState().session_statement(sql)


def test_a_drop_of_a_table_in_a_schema_named_like_a_temp_view_is_not():
    run = RunState()
    run.record(connection("master"), "create temp view s as select 1")
    assert run.session_statement("drop view s")
    for sql in ("drop table s.t", "DROP TABLE IF EXISTS s . t", "drop table sv.t", "drop view sv"):
        assert not run.session_statement(sql)


def test_a_line_comment_ends_at_a_carriage_return_as_in_spark():
    assert not RunState().session_statement("-- set a=1\rinsert into t values (1)\nset a=1")


def connection(name):
    return SimpleNamespace(name=name, handle=SimpleNamespace())


def test_hook_statements_replay_once_in_order_into_other_connections():
    state, master, ran = RunState(), connection("master"), []
    state.record(master, "set a=1")
    state.record(master, "create temp view v as select 1")
    state.record(master, "drop view v")  # undoes the run's own temp view
    state.record(master, "create temp view `run-day` as select 2")
    state.record(master, "alter view `RUN-day` as select 3")
    state.record(master, "drop view other")  # not session state
    state.record(master, "insert into t values (1)")
    model = connection("model.p.orders")
    state.prime(model, ran.append)
    state.prime(model, ran.append)
    assert ran == [
        "set a=1",
        "create temp view v as select 1",
        "drop view v",
        "create temp view `run-day` as select 2",
        "alter view `RUN-day` as select 3",
    ]
    state.prime(master, ran.append)  # the hooks' own connection ran them already
    assert len(ran) == 5


def test_a_replay_that_fails_is_tried_again_from_that_statement():
    state, master = RunState(), connection("master")
    state.record(master, "set a=1")
    state.record(master, "set b=2")
    model, ran, failures = connection("model.p.t"), [], []

    def flaky(sql):
        if sql == "set b=2" and not failures:
            failures.append(sql)
            raise RuntimeError("lost")
        ran.append(sql)

    with pytest.raises(RuntimeError):
        state.prime(model, flaky)
    state.prime(model, flaky)
    assert ran == ["set a=1", "set b=2"]  # each once: the retry starts at the failed one


def test_a_models_own_set_is_never_recorded():
    state, ran = RunState(), []
    state.record(connection("model.p.a"), "set spark.sql.ansi.enabled=false")
    state.prime(connection("model.p.b"), ran.append)
    assert ran == []


def test_a_run_operation_and_on_run_end_count_as_the_run():
    state, ran = RunState(), []
    state.record(connection("macro_grant_all"), "use analytics")
    state.prime(connection("master"), ran.append)  # on-run-end sees on-run-start's and others'
    assert ran == ["use analytics"]
