"""The pinned session a fenced Python model reads its own table through."""

import pytest

from dbt.adapters.fenced_spark import python_model
from dbt.adapters.fenced_spark.fence.rewriter import pin_self_reads


class FakeSpark:
    def __init__(self):
        self.sent = []

    def sql(self, query, *args, **kwargs):
        self.sent.append(("sql", query))
        return query

    def table(self, name):
        self.sent.append(("table", name))
        return name

    @property
    def read(self):
        return self

    def createDataFrame(self, data):  # noqa: N802 - Spark's name
        return ("created", data)


def pin(current="analytics"):
    return python_model.Pin(
        schema="analytics",
        identifier="scores",
        table="`analytics`.`scores`",
        version=7,
        current_schema=lambda: current,
        pin_sql=lambda q: pin_self_reads(q, "analytics", "scores", 7),
    )


@pytest.mark.parametrize(
    "name",
    ["analytics.scores", "`analytics`.`scores`", "spark_catalog.analytics.scores", "SCORES"],
)
def test_table_of_its_own_table_reads_vb(name):
    spark, p = FakeSpark(), pin()
    session = python_model.PinnedSession(spark, p)
    assert session.table(name) == "SELECT * FROM `analytics`.`scores` VERSION AS OF 7"
    assert session.read.table(name) == "SELECT * FROM `analytics`.`scores` VERSION AS OF 7"
    assert len(p.reads) == 2


@pytest.mark.parametrize("name", ["analytics.events", "other.scores", "scores", "hive.x.scores"])
def test_other_tables_are_read_as_they_are(name):
    spark, p = FakeSpark(), pin(current="elsewhere")
    assert python_model.PinnedSession(spark, p).table(name) == name
    assert p.reads == []


def test_sql_reading_its_own_table_is_pinned_and_recorded():
    spark, p = FakeSpark(), pin()
    session = python_model.PinnedSession(spark, p)
    assert "VERSION AS OF 7" in session.sql("select max(id) from analytics.scores")
    assert session.sql("select 1 from analytics.events") == "select 1 from analytics.events"
    assert p.reads == ["select max(id) from analytics.scores"]


def test_everything_else_is_the_node_s_session():
    spark = FakeSpark()
    assert python_model.PinnedSession(spark, pin()).createDataFrame([1]) == ("created", [1])


def test_what_a_model_returns_must_be_a_dataframe():
    from dbt_common.exceptions import DbtRuntimeError

    with pytest.raises(DbtRuntimeError, match="model.p.m returned a builtins.list"):
        python_model.as_dataframe([1, 2], FakeSpark(), "model.p.m")


def test_connect_mode_is_set_only_while_connect_models_run(monkeypatch):
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)
    import os

    with python_model._connect_mode():
        with python_model._connect_mode():  # a second thread's model, overlapping
            assert os.environ["SPARK_CONNECT_MODE_ENABLED"] == "1"
        assert os.environ["SPARK_CONNECT_MODE_ENABLED"] == "1"  # the first still runs
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "0")
    with python_model._connect_mode():
        pass
    assert os.environ["SPARK_CONNECT_MODE_ENABLED"] == "0"  # what the process had, back
