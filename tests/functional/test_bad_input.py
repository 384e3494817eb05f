"""Bad input: a clear error naming the model and the key, and nothing written."""

import pytest
from dbt.tests.util import run_dbt

from tests.functional.lakehouse import history, rows

BASE = "select id, 'v' as v from range(1, 3)"


def model(config: str, sql: str = BASE) -> str:
    return f"{{{{ config(materialized='incremental', {config}) }}}}\n{sql}"


def table_exists(spark, table: str) -> bool:
    return spark.catalog.tableExists(table)


class TestConfigErrors:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "no_key.sql": model("incremental_strategy='merge'"),
            "parquet_merge.sql": model(
                "incremental_strategy='merge', unique_key='id', file_format='parquet'"
            ),
            "bad_predicates.sql": model(
                "incremental_strategy='merge', unique_key='id', incremental_predicates={'a': 1}"
            ),
            "bad_strategy.sql": model("incremental_strategy='upsert', unique_key='id'"),
            "bad_fenced.sql": model("incremental_strategy='merge', unique_key='id', fenced='no'"),
        }

    @pytest.mark.parametrize(
        "name, words",
        [
            ("no_key", ["`unique_key`"]),
            ("parquet_merge", ["`file_format`", "'parquet'"]),
            ("bad_predicates", ["`incremental_predicates`"]),
            ("bad_strategy", ["`incremental_strategy`", "merge, append", "upsert"]),
            ("bad_fenced", ["`fenced`"]),
        ],
    )
    def test_error_names_model_and_key_and_writes_nothing(self, project, spark, name, words):
        results = run_dbt(["run", "--select", name], expect_pass=False)
        message = results.results[0].message
        assert f"{project.test_schema}.{name}" in message
        for word in words:
            assert word in message
        assert not table_exists(spark, f"{project.test_schema}.{name}")


class TestTargetErrors:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "was_view.sql": model("incremental_strategy='merge', unique_key='id'"),
            "was_parquet.sql": model("incremental_strategy='merge', unique_key='id'"),
            "dupes.sql": model(
                "incremental_strategy='merge', unique_key='id'",
                "select 1 as id, 'a' as v union all select 1 as id, 'b' as v",
            ),
        }

    def test_existing_view_is_refused(self, project, spark):
        spark.sql(f"create view {project.test_schema}.was_view as select 1 as id, 'x' as v")
        results = run_dbt(["run", "--select", "was_view"], expect_pass=False)
        message = results.results[0].message
        assert f"{project.test_schema}.was_view" in message and "exists as a view" in message
        assert "--full-refresh" in message
        assert rows(spark, f"select * from {project.test_schema}.was_view") == [(1, "x")]

    def test_existing_parquet_table_is_refused(self, project, spark):
        table = f"{project.test_schema}.was_parquet"
        spark.sql(f"create table {table} using parquet as select 1 as id, 'x' as v")
        results = run_dbt(["run", "--select", "was_parquet"], expect_pass=False)
        message = results.results[0].message
        assert table in message and "not a Delta table" in message
        assert rows(spark, f"select * from {table}") == [(1, "x")]

    def test_duplicate_source_keys_surface_delta_error_with_model(self, project, spark):
        table = f"{project.test_schema}.dupes"
        spark.sql(f"create table {table} using delta as select 1 as id, 'x' as v")
        before = history(spark, table)
        results = run_dbt(["run", "--select", "dupes"], expect_pass=False)
        message = results.results[0].message
        assert "model.test.dupes" in message and "nothing was written" in message
        assert "MULTIPLE_SOURCE_ROW" in message
        assert "\tat " not in message and "at org.apache" not in message  # no JVM stack
        assert history(spark, table) == before
