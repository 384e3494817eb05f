"""Bad input: a clear error naming the model and the key, and nothing written."""

from pathlib import Path

import pytest
from dbt.exceptions import ParsingError
from dbt.tests.util import run_dbt
from dbt_common.exceptions import CompilationError

from tests.functional.lakehouse import history, rows

BASE = "select id, 'v' as v from range(1, 3)"


def model(config: str, sql: str = BASE) -> str:
    return f"{{{{ config(materialized='incremental', {config}) }}}}\n{sql}"


def table_exists(spark, table: str) -> bool:
    schema, name = table.split(".")
    return bool(spark.sql(f"show tables in {schema} like '{name}'").collect())


class TestConfigErrors:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "no_key.sql": model("incremental_strategy='insert'"),
            "parquet_merge.sql": model(
                "incremental_strategy='merge', unique_key='id', file_format='parquet'"
            ),
            "bad_predicates.sql": model(
                "incremental_strategy='merge', unique_key='id', incremental_predicates={'a': 1}"
            ),
            "bad_strategy.sql": model("incremental_strategy='upsert', unique_key='id'"),
            "bad_fenced.sql": model("incremental_strategy='merge', unique_key='id', fenced='no'"),
            "no_predicate.sql": model("incremental_strategy='replace_where'"),
            "number_predicate.sql": model(
                "incremental_strategy='replace_where', incremental_predicates=7"
            ),
            "negative_retries.sql": model("incremental_strategy='append', fence_retries=-1"),
            "text_retries.sql": model("incremental_strategy='append', fence_retries='3'"),
            "unfenced_cas.sql": model("incremental_strategy='append_if_unchanged', fenced=false"),
            "list_batch.sql": model("incremental_strategy='append', fence_batch_id=['a']"),
            "blank_batch.sql": model("incremental_strategy='append', fence_batch_id=' '"),
            "unfenced_batch.sql": model(
                "incremental_strategy='append', fence_batch_id='a', fenced=false"
            ),
            "overwrite_batch.sql": model(
                "incremental_strategy='insert_overwrite', fence_batch_id='a'"
            ),
            # dbt-databricks' configs, which dbt-spark would ignore (validate_databricks.sql).
            "sync_merge.sql": model(
                "incremental_strategy='merge', unique_key='id', "
                "not_matched_by_source_action='delete'"
            ),
            "clustered.sql": model("incremental_strategy='merge', liquid_clustered_by=['id']"),
            "delete_insert.sql": model("incremental_strategy='delete+insert', unique_key='id'"),
        }

    @pytest.fixture(scope="class")
    def run(self, project):
        # Every model fails on its own before any SQL: one dbt run judges them all (a run per
        # case cost the Connect leg a dbt start each).
        results = run_dbt(["run"], expect_pass=False)
        assert all(r.status == "error" for r in results.results)
        return results

    @pytest.mark.parametrize(
        "name, words",
        [
            ("no_key", ["`unique_key`", "insert", "'append'"]),
            ("parquet_merge", ["`file_format`", "'parquet'"]),
            ("bad_predicates", ["`incremental_predicates`"]),
            ("bad_strategy", ["`incremental_strategy`", "merge, insert, append", "upsert"]),
            ("bad_fenced", ["`fenced`"]),
            ("no_predicate", ["`incremental_predicates`", "replace_where", "silently"]),
            ("number_predicate", ["`incremental_predicates`", "7"]),
            ("negative_retries", ["`fence_retries`", "-1"]),
            ("text_retries", ["`fence_retries`", '"3"']),
            ("unfenced_cas", ["append_if_unchanged", "exists only fenced", "`fenced`"]),
            ("list_batch", ["`fence_batch_id`", '["a"]']),
            ("blank_batch", ["`fence_batch_id`", "non-empty"]),
            ("unfenced_batch", ["`fence_batch_id`", "`fenced` is false"]),
            ("overwrite_batch", ["`fence_batch_id`", "insert_overwrite", "never applies it twice"]),
            ("sync_merge", ["`not_matched_by_source_action`", "a sync would delete nothing"]),
            ("clustered", ["`liquid_clustered_by`", "not supported yet", "not be clustered"]),
            ("delete_insert", ["delete+insert", "not supported yet", "merge strategy"]),
        ],
    )
    def test_error_names_model_and_key_and_writes_nothing(self, project, spark, run, name, words):
        message = next(r.message for r in run.results if r.node.name == name)
        assert f"{project.test_schema}.{name}" in message
        for word in words:
            assert word in message
        assert not table_exists(spark, f"{project.test_schema}.{name}")


class TestTargetErrors:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "was_parquet.sql": model("incremental_strategy='merge', unique_key='id'"),
            "dupes.sql": model(
                "incremental_strategy='merge', unique_key='id'",
                "select 1 as id, 'a' as v union all select 1 as id, 'b' as v",
            ),
            "key_not_selected.sql": model("incremental_strategy='merge', unique_key=['id', 'ID2']"),
            "key_selected.sql": model(
                "incremental_strategy='merge', unique_key=['id', 's.x'], "
                "sql_header='create or replace temporary function twice(x int) returns int "
                "return x * 2;'",
                "select twice(1) as id, named_struct('x', 1) as s",
            ),
            # The header ends in the WITH that opens the query: the check reads it in front.
            "key_from_header.sql": model(
                "incremental_strategy='merge', unique_key=['id', 'ID2'], "
                "sql_header='with base as (select 1 as id, 2 as k)'",
                "select id, k as v from base",
            ),
        }

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

    def refused_key(self, project, *flags: str) -> None:
        results = run_dbt(["run", "--select", "key_not_selected", *flags], expect_pass=False)
        message = results.results[0].message
        assert f"{project.test_schema}.key_not_selected" in message
        assert "`unique_key` names ID2" in message and "Its columns are: id, v" in message
        assert "Nothing was written." in message

    def test_unique_key_not_selected_is_refused_before_the_write(self, project, spark):
        table = f"{project.test_schema}.key_not_selected"
        spark.sql(f"create table {table} using delta as select 1 as id, 'x' as v")
        before = history(spark, table)
        self.refused_key(project)
        assert history(spark, table) == before

    def test_unique_key_not_selected_is_refused_on_the_first_run_too(self, project, spark):
        # dbt-spark's CREATE never uses the key: it would build the table, and the next run's
        # MERGE fail after Spark ran. Refused before the CREATE, and before a full refresh's.
        table = f"{project.test_schema}.key_not_selected"
        spark.sql(f"drop table if exists {table}")
        self.refused_key(project)
        assert not table_exists(spark, table)
        spark.sql(f"create table {table} using delta as select 1 as id, 'x' as v")
        before = history(spark, table)
        self.refused_key(project, "--full-refresh")
        assert history(spark, table) == before

    def test_a_key_missing_from_a_query_its_header_opens_is_refused_too(self, project, spark):
        table = f"{project.test_schema}.key_from_header"
        spark.sql(f"drop table if exists {table}")
        results = run_dbt(["run", "--select", "key_from_header"], expect_pass=False)
        message = results.results[0].message
        assert "`unique_key` names ID2" in message and "Its columns are: id, v" in message
        assert not table_exists(spark, table)

    def test_a_key_the_model_selects_builds_on_the_first_run(self, project, spark):
        # A struct's field, and a column made by a temporary function of the sql_header: the
        # check reads the model's columns as Spark analyses the SQL, header first.
        table = f"{project.test_schema}.key_selected"
        spark.sql(f"drop table if exists {table}")
        run_dbt(["run", "--select", "key_selected"])
        run_dbt(["run", "--select", "key_selected"])
        assert rows(spark, f"select id, s.x from {table}") == [(2, 1)]


class TestMisspeltFenceKeys:
    """A key that starts with `fence` and is none of the adapter's fails the parse, from a
    config() call, a models YAML or dbt_project.yml: nothing runs."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "in_call.sql": model(
                "incremental_strategy='merge', unique_key='id', fence_retry=3, "
                "fence_isolaton='version'"
            ),
            "in_yaml.sql": model("incremental_strategy='append'"),
            "in_project.sql": "select 1 as id",
            "properties.yml": "models:\n  - name: in_yaml\n    config:\n      fence_batchid: x\n",
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"test": {"in_project": {"+Fence_Retries": 2}}}}

    def parse_error(self, project, where: str) -> str:
        """The error for the model in `where`, the others' keys made right."""
        files = {
            "in_call": ("models/in_call.sql", ", fence_retry=3, fence_isolaton='version'", ""),
            "in_yaml": ("models/properties.yml", "fence_batchid", "fence_batch_id"),
            "in_project": ("dbt_project.yml", "Fence_Retries", "fence_retries"),
        }
        originals = {}
        for name, (path, bad, good) in files.items():
            file = Path(project.project_root) / path
            originals[file] = file.read_text()
            if name != where:
                file.write_text(originals[file].replace(bad, good))
        try:
            with pytest.raises(CompilationError) as raised:
                run_dbt(["parse", "--no-partial-parse"])
            return str(raised.value)
        finally:
            for file, text in originals.items():
                file.write_text(text)

    def test_a_key_in_config_names_the_model_and_the_nearest_keys(self, project):
        message = self.parse_error(project, "in_call")
        assert f"Model {project.test_schema}.in_call: unknown fence config" in message
        assert "`fence_retry`: did you mean `fence_retries`?" in message
        assert "`fence_isolaton`: did you mean `fence_isolation`?" in message

    def test_a_key_in_a_models_yaml(self, project):
        message = self.parse_error(project, "in_yaml")
        assert f"{project.test_schema}.in_yaml" in message
        assert "`fence_batchid`: did you mean `fence_batch_id`?" in message

    def test_a_key_in_dbt_project_yml(self, project):
        message = self.parse_error(project, "in_project")
        assert f"{project.test_schema}.in_project" in message
        assert "`Fence_Retries`: did you mean `fence_retries`?" in message

    def test_run_fails_before_any_sql(self, project, spark):
        with pytest.raises(CompilationError):
            run_dbt(["run"])
        assert not table_exists(spark, f"{project.test_schema}.in_call")
        assert not table_exists(spark, f"{project.test_schema}.in_project")


class TestMicrobatchWithoutEventTime:
    """dbt-core refuses this at parse time, naming the model and the key; nothing runs."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "no_event_time.sql": model(
                "incremental_strategy='microbatch', batch_size='day', begin='2026-01-01'"
            )
        }

    def test_parse_error_names_model_and_key(self, project, spark):
        with pytest.raises(ParsingError) as raised:
            run_dbt(["run"])
        assert "no_event_time" in str(raised.value) and "'event_time'" in str(raised.value)
        assert not table_exists(spark, f"{project.test_schema}.no_event_time")


class TestSafeappendAlias:
    @pytest.fixture(scope="class")
    def models(self):
        return {"legacy.sql": model("incremental_strategy='safeappend'")}

    def test_runs_as_append_if_unchanged_and_warns(self, project, spark, logs_dir):
        run_dbt(["run"])
        results = run_dbt(["run"])
        assert results.results[0].adapter_response["fence_outcome"] == "committed"
        last = history(spark, f"{project.test_schema}.legacy")[-1]
        assert last.tag["strategy"] == "append_if_unchanged"
        with open(f"{logs_dir}/dbt.log") as log:
            assert "`incremental_strategy: safeappend` is deprecated" in log.read()
