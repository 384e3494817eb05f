"""A node's sql_header is split off the statement dbt glues it to, one statement at a time; a
fragment that ends it and opens the query stays in front of the query."""

from types import SimpleNamespace

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import sql_header

COMMENT = '/* {"app": "dbt", "node_id": "model.p.m"} */\n'


def test_statements_split_at_semicolons_outside_literals_and_comments():
    header = "set time zone 'Asia/Kolkata';\n-- a comment; still one\nset spark.x = 'a;b';\n"
    assert sql_header.statements(header) == [
        "set time zone 'Asia/Kolkata'",
        "-- a comment; still one\nset spark.x = 'a;b'",
    ]


def test_a_header_without_a_semicolon_is_one_statement():
    assert sql_header.statements("create temporary function f as 'x.Y'") == [
        "create temporary function f as 'x.Y'"
    ]


def test_split_off_keeps_dbt_query_comment_on_the_statement():
    header = "set time zone 'UTC';"
    sql = f"{COMMENT}  {header}\n  create or replace table s.t as select 1"
    assert sql_header.split_off(sql, header) == (
        f"{COMMENT}  \n  create or replace table s.t as select 1"
    )


def test_a_statement_that_does_not_start_with_the_header_is_left_alone():
    header = "set time zone 'UTC';"
    assert sql_header.split_off(f"{COMMENT}select 1 -- {header}", header) is None


def test_a_hook_that_merely_starts_with_the_header_text_is_left_alone():
    header = "set spark.sql.shuffle.partitions = 20"
    hook = f"{COMMENT}set spark.sql.shuffle.partitions = 200"
    assert sql_header.split_off(hook, header) is None
    glued = f"{COMMENT}{header}\ncreate table t as select 1"
    assert sql_header.split_off(glued, header) == f"{COMMENT}\ncreate table t as select 1"


def test_a_node_without_a_header_or_with_only_a_comment_has_none():
    def node(header):
        return SimpleNamespace(name="m", config={"sql_header": header})

    assert sql_header.of_node(node(None)) is None
    assert sql_header.of_node(node("-- nothing to run\n")) is None
    assert sql_header.of_node(None) is None
    assert sql_header.of_node(node("set time zone 'UTC';")) == sql_header.NodeHeader(
        "m", "set time zone 'UTC';"
    )


def test_a_part_spark_reads_as_a_comment_is_sent_not_dropped():
    # Spark's lexer goes on with a `--` comment past a backslash-newline; sqlglot does not.
    # The part reaches Spark, which refuses it out loud, instead of vanishing.
    header = "-- C:\\tmp\\\nset spark.sql.ansi.enabled=true;\nset b=2;"
    assert sql_header.statements(header) == [
        "-- C:\\tmp\\\nset spark.sql.ansi.enabled=true",
        "set b=2",
    ]
    assert sql_header.statements("/* a */ set a=1; -- only a comment\n; set b=2") == [
        "/* a */ set a=1",
        "set b=2",
    ]


def test_what_is_left_after_the_header_is_a_statement_unless_only_comments():
    assert not sql_header.has_statement(" -- the header was all of it\n;")
    assert sql_header.has_statement("-- c \\\nselect 1")
    assert sql_header.has_statement("select 1")


def test_a_with_after_the_last_semicolon_is_a_fragment_of_the_query():
    header = "set time zone 'UTC';\n-- vars\nwith _v as (select 'a;b' as x)\n"
    assert sql_header.split(header) == (
        "set time zone 'UTC';",
        "-- vars\nwith _v as (select 'a;b' as x)",
    )
    assert sql_header.split("\nwith _v as (select 1)") == ("", "with _v as (select 1)")
    assert sql_header.split("select /*+ REPARTITION(2) */") == ("", "select /*+ REPARTITION(2) */")


def test_a_part_without_a_semicolon_that_opens_no_query_is_a_statement():
    # Glued in front of a CREATE, Spark would read the CREATE as the SET's value.
    for header in ["set spark.sql.shuffle.partitions = 20", "select 1", "set a=1; set b=2"]:
        assert sql_header.split(header) == (header, "")
    assert sql_header.split("set a=1; -- done\n") == ("set a=1; -- done\n", "")
    assert sql_header.split("set a = 'unclosed") == ("set a = 'unclosed", "")


def test_a_node_header_keeps_its_statements_and_its_fragment_apart():
    node = SimpleNamespace(name="m", config={"sql_header": "set a=1;\nwith v as (select 1)"})
    assert sql_header.of_node(node) == sql_header.NodeHeader(
        "m", "set a=1;", fragment="with v as (select 1)"
    )


def test_the_fragment_goes_in_front_of_the_query_unless_it_has_a_with_of_its_own():
    assert sql_header.in_front("", "select 1", "m") == "select 1"
    assert sql_header.in_front("with v as (select 1)", "select * from v", "m") == (
        "with v as (select 1)\nselect * from v"
    )
    with pytest.raises(DbtRuntimeError, match="m: its sql_header ends in a WITH clause"):
        sql_header.in_front("with v as (select 1)", "-- c\nWITH w as (select 2) select 1", "m")


def test_a_fragment_glued_in_front_of_a_create_is_refused_naming_the_header():
    fragment = "with v as (select 1)"
    with pytest.raises(DbtRuntimeError, match="m: its sql_header ends in `with ...` with no"):
        sql_header.check_placed(f"{COMMENT}{fragment}\n create table t as select 1", fragment, "m")
    sql_header.check_placed(f"{COMMENT}{fragment}\n select * from v limit 5", fragment, "m")
    sql_header.check_placed(f"{COMMENT}create table t as {fragment} select 1", fragment, "m")
