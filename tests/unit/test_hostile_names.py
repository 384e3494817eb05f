"""Hostile names in the SQL the adapter writes: quoting, keyword names, the tag's JSON.
The same names on real Spark + Delta: tests/functional/test_hostile_names.py."""

import json

import pytest

from dbt.adapters.fenced_spark.fence import rewriter
from dbt.adapters.fenced_spark.fence.history import FenceTag
from dbt.adapters.fenced_spark.fence.protocol import set_conf_sql
from dbt.adapters.fenced_spark.fence.rewriter import pin_self_reads, reads_self
from dbt.adapters.fenced_spark.impl import FencedSparkAdapter
from dbt.adapters.fenced_spark.relation import FencedSparkColumn, FencedSparkRelation

# Spark takes all of these unquoted as a schema or table name; sqlglot reads them as keywords.
KEYWORDS = ["select", "from", "order", "table", "timestamp", "version", "where", "join"]


@pytest.mark.parametrize("keyword", KEYWORDS)
@pytest.mark.parametrize(
    "schema, table, spelled",
    [
        ("s", "{k}", "s.{k}"),
        ("{k}", "t", "{k}.t"),
        ("{k}", "{k}", "{k}.{k}"),
        ("{k}", "{k}", "`{k}`.`{k}`"),
        ("s", "{k}", "spark_catalog.s.{k}"),
    ],
)
def test_keyword_names_are_pinned(keyword, schema, table, spelled):
    name = spelled.format(k=keyword)
    sql = f"select max(x.id) from {name} x where x.id > 0"
    pinned = pin_self_reads(sql, schema.format(k=keyword), table.format(k=keyword), 7)
    assert pinned == sql.replace(f"{name} x", f"{name} VERSION AS OF 7 x")
    assert reads_self(sql, schema.format(k=keyword), table.format(k=keyword))


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_keyword_names_through_the_tokenizer(keyword, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise rewriter.SqlglotError("forced")

    monkeypatch.setattr(rewriter, "_reference_ends_parsed", refuse)
    sql = f"select * from {keyword}.{keyword} where c = '{keyword}.{keyword}'"
    assert pin_self_reads(sql, keyword, keyword, 7) == sql.replace(
        f"{keyword}.{keyword} where", f"{keyword}.{keyword} VERSION AS OF 7 where"
    )


@pytest.mark.parametrize(
    "sql",
    [
        "select a.select from other.t a",  # a column named like the table
        "select 'from.select' as label",
        "select 1 -- from.select",
        "select * from from.select_v2",
        "select from.select.id from src",  # a qualified column
    ],
)
def test_keyword_names_elsewhere_are_untouched(sql):
    assert pin_self_reads(sql, "from", "select", 7) == sql


@pytest.mark.parametrize(
    "name",
    ["a`b", "sp ace", "it's", 'say "hi"', "semi;colon", "ünï", "注文", "42", "`", "``x``"],
)
def test_quoted_spellings_are_pinned(name):
    quoted = "`" + name.replace("`", "``") + "`"
    sql = f"select * from `order`.{quoted} t where t.c = '{name.replace(chr(39), '')}'"
    assert pin_self_reads(sql, "order", name, 3) == sql.replace(
        f"{quoted} t", f"{quoted} VERSION AS OF 3 t"
    )


def test_relation_names_double_a_backquote():
    relation = FencedSparkRelation.create(schema="s`x", identifier="a`b c")
    assert relation.fence_name == "`s``x`.`a``b c`"
    assert relation.quote(identifier=True).include(schema=False).render() == "`a``b c`"
    staging = relation.quote(identifier=True).staging_view("inv")
    assert staging.render().startswith("`a``b c__fence_")


def test_columns_double_a_backquote():
    column = FencedSparkColumn.of(FencedSparkColumn(column="k`ey; 'ünï'", dtype="bigint"))
    assert column.quoted == "`k``ey; 'ünï'`"
    assert column.data_type == "bigint"
    assert FencedSparkAdapter.quote(None, "a`b") == "`a``b`"  # type: ignore[arg-type]


HOSTILE = [
    "back`quote",
    'it\'s "quoted"',
    "semi;colon -- /* */",
    "${spark.app.name}",
    "ünï 注文",
    "back\\slash\nnew line",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_tag_json_round_trips(text):
    tag = FenceTag(f"inv-{text}", f"model.p.{text}", "merge", 3, 2, "revert")
    encoded = tag.to_json()
    assert FenceTag.parse(encoded) == tag
    assert json.loads(encoded)["node"] == f"model.p.{text}"
    # Nothing Spark's SQL text handling could touch: no `${`, no raw newline, ASCII only.
    assert "$" not in encoded and "\n" not in encoded and encoded.isascii()


def test_set_conf_sql_doubles_backquotes():
    assert set_conf_sql("k", "a`b``c") == "SET k=`a``b````c`"


def test_quote_renders_a_missing_name_as_dbt_spark_does():
    # dbt's test utilities quote credentials.database, which is None on Spark.
    assert FencedSparkAdapter.quote(None, None) == "`None`"  # type: ignore[arg-type]
    assert FencedSparkAdapter.quote(None, "a`b") == "`a``b`"  # type: ignore[arg-type]
