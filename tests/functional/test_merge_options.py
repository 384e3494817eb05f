"""dbt-spark's merge options keep working under the fence, and the SQL each strategy emits."""

import json
import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.functional.lakehouse import history, ours, rows


def merge_model(config: str) -> str:
    return f"""
{{{{ config(materialized='incremental', incremental_strategy='merge', {config}) }}}}
select id, region, '{{{{ var("round", "r0") }}}}' as name, {{{{ var("n", 0) }}}} as n
from values (1, 'eu'), (1, 'us'), (2, 'eu') as t(id, region)
"""


class TestMergeOptions:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "composite.sql": merge_model("unique_key=['id', 'region']"),
            "only_n.sql": merge_model("unique_key=['id', 'region'], merge_update_columns=['n']"),
            "not_n.sql": merge_model("unique_key=['id', 'region'], merge_exclude_columns=['n']"),
            "eu_only.sql": merge_model(
                "unique_key=['id', 'region'], "
                "incremental_predicates=[\"DBT_INTERNAL_DEST.region = 'eu'\"]"
            ),
        }

    def test_options_shape_the_fenced_merge(self, project, spark):
        run_dbt(["run"])
        run_dbt(["run", "--vars", json.dumps({"round": "r1", "n": 1})])
        schema = project.test_schema

        def table(name):
            return rows(spark, f"select id, region, name, n from {schema}.{name} order by 1, 2, 3")

        assert table("composite") == [(1, "eu", "r1", 1), (1, "us", "r1", 1), (2, "eu", "r1", 1)]
        assert table("only_n") == [(1, "eu", "r0", 1), (1, "us", "r0", 1), (2, "eu", "r0", 1)]
        assert table("not_n") == [(1, "eu", "r1", 0), (1, "us", "r1", 0), (2, "eu", "r1", 0)]
        # Rows outside the predicate do not match, so 'us' is inserted again, as in dbt-spark.
        assert table("eu_only") == [
            (1, "eu", "r1", 1),
            (1, "us", "r0", 0),
            (1, "us", "r1", 1),
            (2, "eu", "r1", 1),
        ]
        for name in ("composite", "only_n", "not_n", "eu_only"):
            (commit,) = ours(history(spark, f"{schema}.{name}"))
            assert commit.tag["node"] == f"model.test.{name}"


def flat(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


class TestEmittedSql:
    """Each strategy's write, rendered by dbt through this adapter's and dbt-spark's macros."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "target.sql": "{{ config(materialized='table') }} "
            "select 1 as id, 'a' as v, date'2026-01-01' as d"
        }

    def render(self, project, strategy, **settings):
        run_dbt(["run"])
        adapter = project.adapter
        target = adapter.Relation.create(schema=project.test_schema, identifier="target")
        source = target.staging_view("inv-1")
        settings = {"unique_key": "id", "incremental_predicates": None, **settings}
        with adapter.connection_named("render"):
            sql = adapter.execute_macro(
                "fence_write_sql",
                kwargs={
                    "strategy": strategy,
                    "source": source,
                    "target": target,
                    "settings": settings,
                },
            )
        return flat(str(sql)), f"{project.test_schema}.target", source.render()

    def test_merge_is_dbt_sparks_merge(self, project):
        sql, target, source = self.render(project, "merge", unique_key=["id", "v"])
        assert f"merge into {target} as DBT_INTERNAL_DEST using {source} as" in sql
        assert "on DBT_INTERNAL_SOURCE.id = DBT_INTERNAL_DEST.id and" in sql
        assert "DBT_INTERNAL_SOURCE.v = DBT_INTERNAL_DEST.v" in sql
        assert sql.endswith("when matched then update set * when not matched then insert *")

    def test_insert_inserts_only_missing_keys_and_never_updates(self, project):
        sql, target, source = self.render(project, "insert", unique_key=["id", "v"])
        assert sql == (
            f"merge into {target} as DBT_INTERNAL_DEST using {source} as DBT_INTERNAL_SOURCE "
            "on DBT_INTERNAL_SOURCE.id = DBT_INTERNAL_DEST.id "
            "and DBT_INTERNAL_SOURCE.v = DBT_INTERNAL_DEST.v "
            "when not matched then insert *"
        )
        sql, _, _ = self.render(
            project, "insert", incremental_predicates=["DBT_INTERNAL_DEST.d >= date'2026-01-01'"]
        )
        assert "on DBT_INTERNAL_DEST.d >= date'2026-01-01' and DBT_INTERNAL_SOURCE.id = " in sql

    def test_append_if_unchanged_is_a_plain_insert(self, project):
        sql, target, source = self.render(project, "append_if_unchanged")
        assert sql == f"insert into table {target} select `id`, `v`, `d` from {source}"

    def test_replace_where_ands_the_predicates_in_one_statement(self, project):
        sql, target, source = self.render(
            project, "replace_where", incremental_predicates=["d >= date'2026-01-01'", "v = 'a'"]
        )
        assert sql == (
            f"insert into {target} replace where (d >= date'2026-01-01') and (v = 'a') "
            f"select `id`, `v`, `d` from {source}"
        )

    def test_staging_view_is_unique_per_run_node_and_attempt(self, project):
        target = project.adapter.Relation.create(schema="s", identifier="orders")
        names = {
            target.staging_view(inv, attempt).render()
            for inv in ("inv-1", "inv-2")
            for attempt in (1, 2)
        }
        assert len(names) == 4 and all(n.startswith("orders__fence_") for n in names)
        other = project.adapter.Relation.create(schema="s", identifier="orders2")
        assert other.staging_view("inv-1").render() not in names


KEYLESS = """
{{ config(materialized='incremental', incremental_strategy='merge') }}
select id from range({{ var('lo', 0) }}, {{ var('hi', 3) }})
"""
KEYLESS_WATERMARK = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key=[]) }}
select id from range(0, {{ var('hi', 3) }})
{% if is_incremental() %} where id > (select max(id) from {{ this }}) {% endif %}
"""


class TestKeylessMerge:
    """A merge without unique_key inserts every row, as dbt-spark's does; fenced like append."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"keyless.sql": KEYLESS, "keyless_watermark.sql": KEYLESS_WATERMARK}

    def test_a_blind_keyless_merge_appends_unfenced(self, project, spark):
        run_dbt(["run", "--select", "keyless"])
        table = f"{project.test_schema}.keyless"
        _, output = run_dbt_and_capture(
            ["run", "--select", "keyless", "--vars", json.dumps({"lo": 2, "hi": 4})]
        )
        assert (
            "merges without unique_key (inserts every row, as in dbt-spark) and does not read "
            "{{ this }}: a blind append, unfenced as dbt-spark runs it"
        ) in output
        assert rows(spark, f"select id from {table} order by id") == [(0,), (1,), (2,), (2,), (3,)]
        commit = history(spark, table)[-1]
        assert commit.operation == "MERGE" and commit.tag is None  # dbt-spark's MERGE ON FALSE

    def test_a_keyless_merge_that_reads_this_is_fenced(self, project, spark):
        run_dbt(["run", "--select", "keyless_watermark"])
        table = f"{project.test_schema}.keyless_watermark"
        vb = history(spark, table)[-1].version
        _, output = run_dbt_and_capture(
            ["run", "--select", "keyless_watermark", "--vars", json.dumps({"hi": 5})]
        )
        assert (
            "merges without unique_key (inserts every row, as in dbt-spark) and reads {{ this }}: "
            "running as append_if_unchanged (fenced)"
        ) in output
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(5)]
        commit = history(spark, table)[-1]
        assert commit.version == vb + 1 and commit.tag["strategy"] == "append_if_unchanged"


STRUCT_KEY = """
{{ config(materialized='incremental', incremental_strategy='merge',
          unique_key=var('key', 'k.id')) }}
select named_struct('id', id, 'region', 'eu') as k, '{{ var("round", "r0") }}' as name
from range(0, {{ var('hi', 2) }})
"""


class TestStructKey:
    """A struct field as `unique_key`, as dbt-spark merges it; a path that is not there is
    refused before the write, naming it."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"struct_key.sql": STRUCT_KEY}

    def test_a_struct_field_key_merges(self, project, spark):
        run_dbt(["run"])
        run_dbt(["run", "--vars", json.dumps({"round": "r1", "hi": 3})])
        table = f"{project.test_schema}.struct_key"
        assert rows(spark, f"select k.id, name from {table} order by 1") == [
            (0, "r1"),
            (1, "r1"),
            (2, "r1"),
        ]
        assert history(spark, table)[-1].tag["strategy"] == "merge"

        for key in ("k.nope", "name.id", "kk.id"):
            results = run_dbt(["run", "--vars", json.dumps({"key": key})], expect_pass=False)
            message = results.results[0].message
            assert f"`unique_key` names {key}, which the model does not select" in message
        assert history(spark, table)[-1].tag["strategy"] == "merge"  # nothing written since


EXCEPT_TABLE = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select id from range(0, {{ var('hi', 2) }})
{% if is_incremental() %} except table {{ this }} {% endif %}
"""


class TestTableQuery:
    """`except table {{ this }}`, which stock dbt-spark runs: pinned as a subquery (a TABLE
    query takes no time travel), fenced as an append that reads its target."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"except_table.sql": EXCEPT_TABLE}

    def test_except_table_this_runs_fenced(self, project, spark):
        run_dbt(["run"])
        table = f"{project.test_schema}.except_table"
        vb = history(spark, table)[-1].version
        run_dbt(["run", "--vars", json.dumps({"hi": 4})])
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(4)]
        (commit,) = [e for e in history(spark, table) if e.version > vb]
        assert commit.tag["strategy"] == "append_if_unchanged" and commit.tag["read_version"] == vb
