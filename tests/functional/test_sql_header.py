"""A node's sql_header: its statements run on their own, once per run of the node, in its
session, before the statement dbt put them above; nothing else is cut or run twice. A header
that ends in the start of the query (a WITH, no `;`) stays in front of the query, on every path."""

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
        # The header is split off the statement it opens; the post-hook, which starts with
        # the header's text, is its own statement and must reach Spark whole, once.
        _, out = run_dbt_and_capture(["--debug", "run", "--select", "prefixed"])
        sent = [line.strip() for line in out.splitlines() if "shuffle.partitions" in line]
        assert sent == [
            "set spark.sql.shuffle.partitions = 20",
            "set spark.sql.shuffle.partitions = 200",
        ]

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
        # dbt runs a data test's query without its sql_header (its one row is the session's
        # own zone), stored or not: the same answer either way, never the header run twice.
        plain = run_dbt(["test", "--select", "zoned_test"], expect_pass=False)
        stored = run_dbt(["test", "--select", "zoned_test", "--store-failures"], False)
        assert [(r.status, r.failures) for r in plain.results] == [("fail", 1)]
        assert [(r.status, r.failures) for r in stored.results] == [("fail", 1)]


# dbt's own BaseShowSqlHeader model: the header opens the model's query.
OPENS = """{% call set_sql_header(config) %}
with _variables as (
    select 1 as my_variable
)
{%- endcall %}
"""
# A statement, then the start of the query: the statement runs on its own, the WITH stays.
BOTH = """{% call set_sql_header(config) %}
set time zone 'Asia/Kolkata';
with _variables as (select 1 as id, current_timezone() as zone)
{%- endcall %}
"""
OPENED = OPENS + "select my_variable from _variables\n"
OPENED_TABLE = "{{ config(materialized='table') }}\n" + BOTH + "select id, zone from _variables\n"
# Fenced on its second run: the write's own source (a subquery), and a staged view.
OPENED_MERGE = (
    "{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}\n"
    + BOTH
    + "select id, zone from _variables\n"
)
OPENED_STAGED = OPENED_MERGE.replace("unique_key='id'", "unique_key='id', on_schema_change='fail'")
# A hint is part of the query too: Spark takes it after SELECT only.
HINTED = """{{ config(materialized='table') }}
{% call set_sql_header(config) %}
select /*+ REPARTITION(1) */
{%- endcall %}
1 as y
"""
# The fragment reads the target: the model reads {{ this }}, fenced, its read pinned.
SELF_READ = """{{ config(materialized='incremental', incremental_strategy='append',
                          fence_retries=1) }}
{% call set_sql_header(config) %}
with _top as (select coalesce(max(id), 0) as top from {{ this }})
{%- endcall %}
select top + 1 as id from _top
"""
TWO_WITHS = (
    "{{ config(materialized='table') }}\n" + OPENS + "with x as (select 1 as y) select y from x\n"
)
# As dbt's default create: the whole header glued above CREATE, where Spark takes no WITH.
GLUED = """{% materialization glued, adapter='fenced_spark' %}
  {% call statement('main') %}
    {{ config.get('sql_header') }}
    create table {{ this }} using delta as {{ sql }}
  {% endcall %}
  {{ return({'relations': [this]}) }}
{% endmaterialization %}
"""
OPENED_SCHEMA = """
models:
  - name: opened_table
    config:
      contract: {enforced: true}
    columns:
      - name: id
        data_type: int
      - name: zone
        data_type: string
"""
OPENED_SNAPSHOT = (
    """
{% snapshot opened_snapshot %}
{{ config(unique_key='id', strategy='check', check_cols=['zone']) }}
"""
    + BOTH
    + """
select id, zone from _variables
{% endsnapshot %}
"""
)


class TestHeaderThatOpensTheQuery:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "opened.sql": OPENED,
            "opened_table.sql": OPENED_TABLE,
            "opened_merge.sql": OPENED_MERGE,
            "opened_staged.sql": OPENED_STAGED,
            "hinted.sql": HINTED,
            "self_read.sql": SELF_READ,
            "two_withs.sql": TWO_WITHS,
            "glued.sql": "{{ config(materialized='glued') }}\n" + OPENED,
            "schema.yml": OPENED_SCHEMA,
        }

    @pytest.fixture(scope="class")
    def macros(self):
        return {"glued.sql": GLUED}

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"opened_snapshot.sql": OPENED_SNAPSHOT}

    def test_dbt_show_keeps_it_on_the_query(self, project):
        shown = run_dbt(["show", "--select", "opened"])
        assert [tuple(row) for row in shown.results[0].agate_table] == [(1,)]
        shown = run_dbt(["show", "--select", "opened_table"])
        assert [tuple(row) for row in shown.results[0].agate_table] == [(1, "Asia/Kolkata")]

    def test_creates_contracts_and_fenced_writes_put_it_in_front_of_the_query(self, project, spark):
        built = "opened opened_table opened_merge opened_staged hinted"
        run_dbt(["run", "--select", built])
        results = run_dbt(["run", "--select", built])
        outcomes = {r.node.name: r.adapter_response.get("fence_outcome") for r in results}
        assert outcomes["opened_merge"] == outcomes["opened_staged"] == "committed"
        schema = project.test_schema
        assert rows(spark, f"select * from {schema}.opened") == [(1,)]
        assert rows(spark, f"select * from {schema}.hinted") == [(1,)]
        for name in ["opened_table", "opened_merge", "opened_staged"]:
            assert rows(spark, f"select id, zone from {schema}.{name}") == [(1, "Asia/Kolkata")]

    def test_a_fragment_that_reads_the_target_is_pinned_and_retried(
        self, project, spark, monkeypatch
    ):
        table = f"{project.test_schema}.self_read"
        spark.sql(f"create table {table} (id bigint) using delta")
        spark.sql(f"insert into {table} values (1)")
        _, out = run_dbt_and_capture(["--debug", "run", "--select", "self_read"])
        assert "appends and reads {{ this }}: running as append_if_unchanged" in out
        assert f"from {table} VERSION AS OF 1)" in out
        writer = ForeignAt(monkeypatch, spark, "vb", f"insert into {table} values (10)")
        run_dbt(["run", "--select", "self_read"])
        assert writer.fired == 1
        # Refused at vB, then recomputed on their commit: 10 + 1, not 2 + 1.
        assert rows(spark, f"select id from {table} order by id") == [(1,), (2,), (10,), (11,)]

    def test_a_snapshot_keeps_it_on_its_query(self, project, spark):
        run_dbt(["snapshot"])
        results = run_dbt(["snapshot"])  # fenced: dbt's check query and the staging
        assert results.results[0].adapter_response["fence_outcome"] == "committed"
        table = f"{project.test_schema}.opened_snapshot"
        assert rows(spark, f"select id, zone, dbt_valid_to is null from {table}") == [
            (1, "Asia/Kolkata", True)
        ]

    def test_where_it_cannot_stand_the_error_names_the_header(self, project):
        _, out = run_dbt_and_capture(["run", "--select", "two_withs glued"], expect_pass=False)
        assert "two_withs: its sql_header ends in a WITH clause that opens the model's query" in out
        assert "glued: its sql_header ends in `with ...` with no `;`" in out
