"""The self-read rewriter: which spellings of the target get pinned, and which never do."""

import random

import pytest

from dbt.adapters.fenced_spark.fence import rewriter
from dbt.adapters.fenced_spark.fence.rewriter import pin_self_reads, reads_self


def pin(sql: str) -> str:
    return pin_self_reads(sql, "analytics", "orders", 7)


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("select * from analytics.orders", "select * from analytics.orders VERSION AS OF 7"),
        ("select * from analytics.orders o", "select * from analytics.orders VERSION AS OF 7 o"),
        (
            "select * from analytics.orders as o where o.id > 1",
            "select * from analytics.orders VERSION AS OF 7 as o where o.id > 1",
        ),
        (
            "select * from `analytics`.`orders` t",
            "select * from `analytics`.`orders` VERSION AS OF 7 t",
        ),
        ("select * from ANALYTICS.Orders", "select * from ANALYTICS.Orders VERSION AS OF 7"),
        (
            "select * from spark_catalog.analytics.orders",
            "select * from spark_catalog.analytics.orders VERSION AS OF 7",
        ),
        (
            "select s.* from src s join analytics.orders t on s.id = t.id",
            "select s.* from src s join analytics.orders VERSION AS OF 7 t on s.id = t.id",
        ),
        (
            "select * from src where ts > (select max(ts) from analytics.orders)",
            "select * from src where ts > (select max(ts) from analytics.orders VERSION AS OF 7)",
        ),
        (
            "with w as (select max(ts) m from analytics.orders) select * from src, w",
            "with w as (select max(ts) m from analytics.orders VERSION AS OF 7)"
            " select * from src, w",
        ),
        (
            "select * from src where id not in (select id from analytics.orders)\n"
            "union all select * from analytics.orders",
            "select * from src where id not in (select id from analytics.orders VERSION AS OF 7)\n"
            "union all select * from analytics.orders VERSION AS OF 7",
        ),
    ],
)
def test_reads_are_pinned(sql, expected):
    assert pin(sql) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "select 'analytics.orders' as label from src",  # string literal
        "select 1 from src -- analytics.orders in a line comment",
        "select 1 /* from analytics.orders */ from src",  # block comment
        "select analytics.orders.id from src",  # qualified column name
        "select * from analytics.orders_history",  # a different table
        "select * from other.orders",  # same name, other schema
        "select * from orders",  # unqualified: may be a CTE, never guessed
        "with orders as (select 1 as id) select * from orders",
        "select * from analytics.orders VERSION AS OF 3",  # explicit time travel kept
        "select * from analytics.orders TIMESTAMP AS OF '2026-01-01'",
        "select * from other_catalog.analytics.orders",
        "select 1 as id",  # does not read itself
    ],
)
def test_non_reads_are_untouched(sql):
    assert pin(sql) == sql


def test_text_outside_the_rewritten_spots_is_kept_byte_for_byte():
    sql = "select  *\n  FROM analytics.orders   o  -- keep me\n WHERE o.x = 'a''b'"
    assert pin(sql) == sql.replace("analytics.orders", "analytics.orders VERSION AS OF 7")


def test_reads_self():
    assert reads_self("select max(ts) from analytics.orders", "analytics", "orders")
    assert not reads_self("select 'analytics.orders'", "analytics", "orders")


@pytest.mark.parametrize(
    "sql, expected",
    [
        (
            "select * from analytics.orders o lateral view explode(o.a) x as y",
            "select * from analytics.orders VERSION AS OF 7 o lateral view explode(o.a) x as y",
        ),
        (
            "select analytics.orders.id, 'analytics.orders' from analytics.orders",
            "select analytics.orders.id, 'analytics.orders' from analytics.orders VERSION AS OF 7",
        ),
    ],
)
def test_tokenizer_fallback_agrees(sql, expected, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise rewriter.SqlglotError("forced")

    monkeypatch.setattr(rewriter, "_reference_ends_parsed", refuse)
    assert pin(sql) == expected


FRAGMENTS_THAT_READ = [
    "select max(ts) from analytics.orders",
    "select id from `analytics`.`orders` t",
    "select count(*) from spark_catalog.analytics.orders",
]
FRAGMENTS_THAT_DO_NOT = [
    "select 'analytics.orders' as s",
    "select 1 as x -- analytics.orders\n",
    "select analytics.orders.id from src",
    "select * from analytics.orders_v2",
]


@pytest.mark.parametrize("seed", range(25))
def test_random_compositions_pin_exactly_the_reads(seed):
    rng = random.Random(seed)
    parts = [rng.choice(FRAGMENTS_THAT_READ + FRAGMENTS_THAT_DO_NOT) for _ in range(5)]
    sql = "select * from (" + ") a cross join (".join(parts) + ") b"
    reads = sum(part in FRAGMENTS_THAT_READ for part in parts)
    pinned = pin(sql)
    assert pinned.count("VERSION AS OF 7") == reads
    assert pinned.replace(" VERSION AS OF 7", "") == sql
