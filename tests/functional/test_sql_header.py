"""A node's sql_header: its statements run on their own, once per run of the node, in its
session, before the statement dbt put them above; nothing else is cut or run twice."""

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.functional.lakehouse import ForeignAt, history, rows

ZONE = """{% call set_sql_header(config) %}
set time zone 'Asia/Kolkata';
{%- endcall %}
"""
# Creating a function twice in one session fails: the header must run once per node.
FUNCTION = """{% call set_sql_header(config) %}
create temporary function plus1(x int) returns int return x + 1;
{%- endcall %}
"""

ZONED = "{{ config(materialized='table') }}\n" + ZONE + "select current_timezone() as zone\n"
CONTRACTED = "{{ config(materialized='table') }}\n" + FUNCTION + "select plus1(1) as y\n"
RETRIED = (
    "{{ config(materialized='incremental', incremental_strategy='append', fence_retries=2) }}\n"
    + FUNCTION
    + """select plus1(id) as id from range(0, {{ var('hi', 3) }}) where true
{% if is_incremental() %}
and plus1(id) > (select coalesce(max(id), -1) from {{ this }})
{% endif %}
"""
)
# The header has no semicolon, and the post-hook starts with its text.
PREFIXED = """{{ config(materialized='table',
          post_hook="set spark.sql.shuffle.partitions = 200") }}
{% call set_sql_header(config) %}
set spark.sql.shuffle.partitions = 20
{%- endcall %}
select 1 as y
"""
REFUSED = """{{ config(materialized='table') }}
{% call set_sql_header(config) %}
set spark.sql.warehouse.dir = '/nowhere';
{%- endcall %}
select 1 as y
"""
SCHEMA = """
models:
  - name: contracted
    config:
      contract: {enforced: true}
    columns:
      - name: y
        data_type: int
"""
SNAPSHOT = (
    """
{% snapshot zoned_snapshot %}
{{ config(unique_key='id', strategy='check', check_cols='all') }}
"""
    + ZONE
    + """
select 1 as id, current_timezone() as zone
{% endsnapshot %}
"""
)
# Fails when its header did not run.
ZONED_TEST = ZONE + "select * from (select current_timezone() as z) where z <> 'Asia/Kolkata'\n"


class TestSqlHeader:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "zoned.sql": ZONED,
            "contracted.sql": CONTRACTED,
            "retried.sql": RETRIED,
            "prefixed.sql": PREFIXED,
            "refused.sql": REFUSED,
            "schema.yml": SCHEMA,
        }

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"zoned_snapshot.sql": SNAPSHOT}

    @pytest.fixture(scope="class")
    def tests(self):
        return {"zoned_test.sql": ZONED_TEST}

    def test_a_contract_check_and_the_create_share_one_run_of_the_header(self, project, spark):
        run_dbt(["run", "--select", "contracted"])
        assert rows(spark, f"select y from {project.test_schema}.contracted") == [(2,)]

    def test_a_fenced_retry_keeps_the_header_of_its_first_attempt(
        self, project, spark, monkeypatch
    ):
        run_dbt(["run", "--select", "retried"])
        table = f"{project.test_schema}.retried"
        writer = ForeignAt(monkeypatch, spark, "vb", f"insert into {table} values (4)")
        results = run_dbt(["run", "--select", "retried", "--vars", json.dumps({"hi": 5})])
        assert writer.fired == 1
        foreign = [e for e in history(spark, table) if e.tag is None and e.version > 0]
        assert [e.operation for e in foreign] == ["WRITE"]  # the race fired
        # Refused at vB, then retried on their commit: the retry ran with the function.
        assert results.results[0].adapter_response["read_version"] == foreign[0].version
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(1, 6)]

    def test_a_hook_that_starts_with_the_header_text_runs_whole(self, project):
        run_dbt(["run", "--select", "prefixed"])

    def test_a_refused_header_names_the_model_and_the_statement(self, project):
        _, out = run_dbt_and_capture(["run", "--select", "refused"], expect_pass=False)
        assert "refused: statement 1 of its sql_header failed" in out

    def test_a_snapshot_runs_its_header_on_every_run(self, project, spark):
        run_dbt(["snapshot"])
        run_dbt(["snapshot"])
        table = f"{project.test_schema}.zoned_snapshot"
        assert rows(spark, f"select zone, dbt_valid_to is null from {table}") == [
            ("Asia/Kolkata", True)
        ]

    def test_dbt_show_runs_the_header(self, project):
        _, out = run_dbt_and_capture(["show", "--select", "zoned"])
        assert "Asia/Kolkata" in out

    def test_a_data_test_gets_the_same_header_whether_stored_or_not(self, project):
        plain = run_dbt(["test", "--select", "zoned_test"], expect_pass=False)
        stored = run_dbt(["test", "--select", "zoned_test", "--store-failures"], False)
        assert plain.results[0].status == stored.results[0].status
