"""What a node read of its target: each read's filter may only ever be wider than the read."""

import pytest

from dbt.adapters.fenced_spark.fence.footprint import WHOLE_TABLE, ReadFilter, read_filters


def filters(sql: str) -> list[ReadFilter]:
    return read_filters(sql, "s", "t")


def test_a_single_table_read_keeps_its_own_conjuncts():
    assert filters("select max(id) from s.t where p = 'a' and id > 3") == [
        ReadFilter("(p = 'a') AND (id > 3)")
    ]
    assert filters("select * from s.t as o where o.id = 2") == [ReadFilter("(id = 2)")]
    assert filters("select * from s.t where s.t.id = 1") == [ReadFilter("(id = 1)")]


def test_no_read_of_the_target_no_filter():
    assert filters("select 1 from s.other where p = 'a'") == []


@pytest.mark.parametrize(
    "sql",
    [
        "select max(id) from s.t",  # no WHERE
        "select * from src join s.t on src.id = t.id where t.p = 'a'",  # a join
        "select * from s.t tablesample (5 rows) where p = 'a'",  # sampled before WHERE
        "select * from s.t as o(a, b) where a = 1",  # the alias renames the columns
        "from s.t |> limit 1 |> where p = 'a'",  # pipe steps run in order
        "select * from IDENTIFIER('s.t') where p = 'a'",  # a reference the parser skips
        "table s.t",
    ],
)
def test_reads_that_cannot_be_bounded_read_the_whole_table(sql):
    assert WHOLE_TABLE in filters(sql)


def test_an_alias_hides_the_tables_name():
    # `orders.x` beside `FROM s.orders t` is the outer table's column: never the target's.
    sql = (
        "select * from raw.orders where not exists (select 1 from s.orders t "
        "where t.order_id = orders.order_id and t.p = 1)"
    )
    assert read_filters(sql, "s", "orders") == [ReadFilter("(p = 1)")]


@pytest.mark.parametrize(
    "conjunct",
    [
        "id > (select 1)",  # a subquery
        "rand() < 0.5",  # not deterministic
        "uuid() = 'x'",
        "ts > current_date()",
        "to_date(s, 'yyyy-MM-dd') is null",  # sqlglot would print it without its format
        "my_udf(id) = 1",  # unknown
        "other.t.id = 1",  # another schema's t
        "k.f = 1",  # a struct field or another table: not provably the target's
    ],
)
def test_conjuncts_it_cannot_re_evaluate_are_dropped(conjunct):
    assert filters(f"select * from s.t where p = 'a' and {conjunct}") == [ReadFilter("(p = 'a')")]


def test_sql_it_cannot_parse_reads_the_whole_table():
    assert filters("select * from s.t where (((") == [WHOLE_TABLE]
