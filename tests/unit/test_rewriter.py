"""The self-read rewriter: which spellings of the target get pinned, and which never do."""

import random

import pytest

from dbt.adapters.fenced_spark.fence import rewriter, statements
from dbt.adapters.fenced_spark.fence.rewriter import as_subquery, pin_self_reads, reads_self


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
        # Spark's other spellings of the temporal clause (sqlglot reads SYSTEM_VERSION as an
        # alias: pinned, the query no longer parsed).
        "select * from analytics.orders system_version as of 0",
        "select * from analytics.orders FOR SYSTEM_VERSION AS OF 0 o",
        "select * from analytics.orders system_time  as of '2026-01-01'",
        "select * from analytics.orders for system_time as of '2026-01-01'",
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


def _without_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args, **_kwargs):
        raise rewriter.SqlglotError("forced")

    monkeypatch.setattr(rewriter, "_reference_ends_parsed", refuse)


HINTS_AND_COMMENTS = [
    (
        "select /*+ BROADCAST(analytics.orders) */ * from src join analytics.orders o on s = o.id",
        "select /*+ BROADCAST(analytics.orders) */ * from src"
        " join analytics.orders VERSION AS OF 7 o on s = o.id",
    ),
    (
        "select /*+ BROADCAST(o), REPARTITION(3, analytics.orders.id) */ o.id\n"
        "from analytics.orders o",
        "select /*+ BROADCAST(o), REPARTITION(3, analytics.orders.id) */ o.id\n"
        "from analytics.orders VERSION AS OF 7 o",
    ),
    (
        "select /*+ MERGE(`analytics`.`orders`) */ 1 from analytics.orders",
        "select /*+ MERGE(`analytics`.`orders`) */ 1 from analytics.orders VERSION AS OF 7",
    ),
    (
        "select 1 -- analytics.orders\nfrom /* analytics.orders */ analytics.orders -- x",
        "select 1 -- analytics.orders\nfrom /* analytics.orders */ analytics.orders"
        " VERSION AS OF 7 -- x",
    ),
    (
        "select 1 /* a /* analytics.orders */ b */ from analytics.orders",
        "select 1 /* a /* analytics.orders */ b */ from analytics.orders VERSION AS OF 7",
    ),
]


@pytest.mark.parametrize("sql, expected", HINTS_AND_COMMENTS)
def test_hints_and_comments_are_kept_as_written(sql, expected, monkeypatch):
    monkeypatch.setattr(rewriter, "_reference_ends_tokenized", None)  # no silent fallback
    # A hint's names used to be pinned at offsets into the hint's own text:
    # `BROADCAST(analyt VERSION AS OF 7ics.orders)`, a syntax error on Spark.
    assert pin(sql) == expected


@pytest.mark.parametrize("sql, expected", HINTS_AND_COMMENTS)
def test_hints_and_comments_through_the_tokenizer(sql, expected, monkeypatch):
    _without_parser(monkeypatch)
    assert pin(sql) == expected


def test_a_hint_alone_is_not_a_read():
    assert not reads_self(
        "select /*+ BROADCAST(analytics.orders) */ * from src", "analytics", "orders"
    )


# Spark 4.1 cannot resolve `IDENTIFIER('s.t') VERSION AS OF n` (tried: UNRESOLVED_COLUMN on
# every column), so a pinned clause is written out as the name it holds.
IDENTIFIER_CLAUSES = [
    (
        "select * from IDENTIFIER('analytics.orders') t",
        "select * from `analytics`.`orders` VERSION AS OF 7 t",
    ),
    (
        "select * from identifier('`analytics`.`orders`') as t",
        "select * from `analytics`.`orders` VERSION AS OF 7 as t",
    ),
    (
        "select * from src join IDENTIFIER( 'SPARK_CATALOG.Analytics.`ORDERS`' ) o on 1 = 1",
        "select * from src join `SPARK_CATALOG`.`Analytics`.`ORDERS` VERSION AS OF 7 o on 1 = 1",
    ),
    (
        'select * from IDENTIFIER("analytics.orders")',
        "select * from `analytics`.`orders` VERSION AS OF 7",
    ),
]


@pytest.mark.parametrize("sql, expected", IDENTIFIER_CLAUSES)
def test_identifier_clauses_are_pinned(sql, expected, monkeypatch):
    monkeypatch.setattr(rewriter, "_reference_ends_tokenized", None)  # no silent fallback
    assert pin(sql) == expected


@pytest.mark.parametrize("sql, expected", IDENTIFIER_CLAUSES)
def test_identifier_clauses_through_the_tokenizer(sql, expected, monkeypatch):
    _without_parser(monkeypatch)
    assert pin(sql) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "select * from IDENTIFIER('analytics' || '.orders') t",  # not a literal: not known here
        "select * from IDENTIFIER(:name) t",
        "select * from IDENTIFIER('analytics.orders') VERSION AS OF 3 t",
        "select * from IDENTIFIER('analytics.orders2') t",
        "select * from IDENTIFIER('other_catalog.analytics.orders') t",
        "select * from IDENTIFIER('orders') t",
        "select * from IDENTIFIER('analytics.orders.id') t",
        "select * from IDENTIFIER('analytics.orders x') t",  # not a name
    ],
)
def test_other_identifier_clauses_are_untouched(sql):
    assert pin(sql) == sql


LOCATION = "/wh/analytics.db/orders"


def pin_at(sql: str, location: str = LOCATION) -> str:
    return pin_self_reads(sql, "analytics", "orders", 7, location)


@pytest.mark.parametrize(
    "path", [LOCATION, LOCATION + "/", "file:" + LOCATION, "file://" + LOCATION + "/"]
)
@pytest.mark.parametrize("location", [LOCATION, "file:" + LOCATION + "/", "file://" + LOCATION])
def test_path_reads_of_the_location_are_pinned(path, location):
    sql = f"select * from delta.`{path}` t where t.id > 0"
    expected = f"select * from delta.`{path}` VERSION AS OF 7 t where t.id > 0"
    assert pin_at(sql, location) == expected
    assert reads_self(sql, "analytics", "orders", location=location)


@pytest.mark.parametrize(
    "sql, expected",
    [
        (
            "select * from DELTA.`/wh/analytics.db/orders`"
            " union all select * from analytics.orders",
            "select * from DELTA.`/wh/analytics.db/orders` VERSION AS OF 7"
            " union all select * from analytics.orders VERSION AS OF 7",
        ),
        (
            "select * from spark_catalog.delta.`/wh/analytics.db/orders`",
            "select * from spark_catalog.delta.`/wh/analytics.db/orders` VERSION AS OF 7",
        ),
        (
            "select * from IDENTIFIER('delta.`/wh/analytics.db/orders`') t",
            "select * from `delta`.`/wh/analytics.db/orders` VERSION AS OF 7 t",
        ),
    ],
)
def test_path_reads_in_both_paths(sql, expected, monkeypatch):
    with monkeypatch.context() as parsed_only:
        parsed_only.setattr(rewriter, "_reference_ends_tokenized", None)
        assert pin_at(sql) == expected
    _without_parser(monkeypatch)
    assert pin_at(sql) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "select * from delta.`/wh/analytics.db/orders2`",
        "select * from delta.`/wh/analytics.db`",
        "select * from delta.`/other/wh/analytics.db/orders`",
        "select * from parquet.`/wh/analytics.db/orders`",  # not Delta: no time travel
        "select * from delta.`/wh/analytics.db/orders` VERSION AS OF 2",
        "select 'delta.`/wh/analytics.db/orders`' as p",
    ],
)
def test_other_paths_are_untouched(sql):
    assert pin_at(sql) == sql


def test_without_a_location_paths_are_not_guessed():
    sql = "select * from delta.`/wh/analytics.db/orders`"
    assert pin(sql) == sql
    assert not reads_self(sql, "analytics", "orders")


@pytest.mark.parametrize(
    "sql, expected",
    [
        (
            "select * from `analytics`.`orders`o",
            "select * from `analytics`.`orders` VERSION AS OF 7 o",
        ),
        (
            "select * from IDENTIFIER('analytics.orders')o",
            "select * from `analytics`.`orders` VERSION AS OF 7 o",
        ),
        # A doubled backquote is one in the name: the table `orders``x`, not an alias.
        ("select * from `analytics`.`orders``x`", "select * from `analytics`.`orders``x`"),
        (
            "select * from analytics.orders/* c */o",
            "select * from analytics.orders VERSION AS OF 7/* c */o",
        ),
    ],
)
def test_an_alias_written_close_stays_apart_from_the_version(sql, expected, monkeypatch):
    assert pin(sql) == expected
    _without_parser(monkeypatch)
    assert pin(sql) == expected


def test_a_table_query_of_the_target_is_pinned_as_a_subquery():
    # `TABLE s.t VERSION AS OF n` is a parse error in Spark: the same rows as a subquery.
    assert pin_self_reads("select 1 as id except table s.t", "s", "t", 7) == (
        "select 1 as id except (SELECT * FROM s.t VERSION AS OF 7)"
    )
    assert pin_self_reads("table s.t", "s", "t", 7) == "(SELECT * FROM s.t VERSION AS OF 7)"
    assert pin_self_reads("select 1 union all TABLE `s`.`t` order by 1", "s", "t", 3) == (
        "select 1 union all (SELECT * FROM `s`.`t` VERSION AS OF 3) order by 1"
    )
    # Another table, and TABLE as a statement's target, are left as they are.
    assert pin_self_reads("select 1 except table s.other", "s", "t", 7) == (
        "select 1 except table s.other"
    )
    assert "(SELECT" not in pin_self_reads("insert into table s.t select 1", "s", "t", 7)


# After a hook's `USE analytics`, a bare `orders` reads analytics.orders; a CTE of that name
# is the CTE, and without the session's schema nothing bare is guessed.
@pytest.mark.parametrize(
    "sql, expected",
    [
        ("select max(id) from orders", "select max(id) from orders VERSION AS OF 7"),
        ("select * from `orders` o", "select * from `orders` VERSION AS OF 7 o"),
        (
            "with orders as (select 1 as id) select * from orders",
            "with orders as (select 1 as id) select * from orders",
        ),
        (
            "with o as (select * from orders) select * from o",
            "with o as (select * from orders VERSION AS OF 7) select * from o",
        ),
        (
            "select orders.id from analytics.orders",
            "select orders.id from analytics.orders VERSION AS OF 7",
        ),
        ("select * from other.orders", "select * from other.orders"),
    ],
)
def test_bare_names_in_the_current_schema_are_pinned(sql, expected):
    assert pin_self_reads(sql, "analytics", "orders", 7, current_schema="analytics") == expected


def test_bare_names_elsewhere_or_unknown_are_not_pinned():
    sql = "select max(id) from orders"
    assert pin_self_reads(sql, "analytics", "orders", 7, current_schema="default") == sql
    assert pin_self_reads(sql, "analytics", "orders", 7) == sql


def test_bare_names_are_not_guessed_when_sqlglot_cannot_parse(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise rewriter.SqlglotError("forced")

    sql = "select max(id) from orders"
    monkeypatch.setattr(rewriter, "_reference_ends_parsed", refuse)
    assert pin_self_reads(sql, "analytics", "orders", 7, current_schema="analytics") == sql


def test_a_bare_write_after_use_is_a_write_of_the_target():
    kind = statements.statement_kind
    assert kind("delete from orders where id > 3", "analytics", "orders", None, "analytics") == (
        statements.WRITE
    )
    assert kind("delete from orders where id > 3", "analytics", "orders") is None


def test_names_bare():
    assert rewriter.names_bare("select * from orders", "orders")
    assert rewriter.names_bare("with orders as (select 1) select * from orders", "ORDERS")
    assert not rewriter.names_bare("select * from analytics.orders", "orders")
    assert not rewriter.names_bare("select orders.id from analytics.t orders_x", "orders")


@pytest.mark.parametrize(
    ("sql", "body"),
    [
        ("select 1 as id", "select 1 as id"),
        ("select 1 as id;\n", "select 1 as id"),
        ("select 1 as id -- the last line\n", "select 1 as id -- the last line"),
        (
            "with a as (select 1 as id)\nselect id from a ;  \n",
            "with a as (select 1 as id)\nselect id from a",
        ),
        ("select 1 as id;\n-- a note after the statement\n", "select 1 as id"),
        ("select 1 as id /* ; */ ; ;", "select 1 as id /* ; */"),
        ("select ';' as id -- ends in a comment;", "select ';' as id -- ends in a comment;"),
    ],
)
def test_the_model_sql_as_a_write_s_source_is_cut_at_its_last_semicolon(sql, body):
    import sqlglot

    source = as_subquery(sql)
    assert source == f"(\n{body}\n)"
    merged = f"merge into t using {source} as s on s.id = t.id when not matched then insert *"
    assert sqlglot.parse_one(merged, read="spark") is not None
