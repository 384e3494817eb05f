"""Partition pruning's pieces: DESCRIBE's partition columns, the conjuncts about them alone,
and the VALUES query that Spark answers for a commit's partition values."""

from dbt.adapters.fenced_spark.fence.partitions import partition_only, partition_types, values_sql


def test_partition_types_come_from_describes_partition_section():
    rows = [
        ("a", "int", None),
        ("P", "int", None),
        ("d", "date", None),
        ("# Partition Information", "", ""),
        ("# col_name", "data_type", "comment"),
        ("P", "int", None),
        ("d", "date", None),
        ("", "", ""),
        ("# Detailed Table Information", "", ""),
        ("Name", "spark_catalog.s.t", ""),
    ]
    assert partition_types(rows) == {"P": "int", "d": "date"}
    assert partition_types(rows[:3]) == {}


def test_only_plain_conjuncts_about_partition_columns_alone_are_kept():
    columns = {"P", "d"}
    assert partition_only("(p = 0) AND (id > 3)", columns) == "(p = 0)"
    assert partition_only("P in (1, 2) and d >= '2026-01-01'", columns) == (
        "(P IN (1, 2)) AND (d >= '2026-01-01')"
    )
    # Anything that mixes in another column, a qualifier, a subquery, a UDF or rand() is dropped.
    assert partition_only("p = 0 or id = 1", columns) is None
    assert partition_only("t.p = 0", columns) is None
    assert partition_only("p = (select max(p) from x)", columns) is None
    assert partition_only("my_udf(p) = 1", columns) is None
    assert partition_only("p > rand()", columns) is None
    assert partition_only("this is not sql ((", columns) is None


def test_values_sql_casts_every_value_and_null():
    sql = values_sql(
        "(p = 0)",
        {(("P", "1"), ("d", None)), (("P", "it's"), ("d", "2026-01-02"))},
        {"P": "int", "d": "date"},
    )
    assert sql.startswith("SELECT 1 FROM VALUES ") and sql.endswith(
        " AS partitions(`P`, `d`) WHERE (p = 0) LIMIT 1"
    )
    assert "(CAST('1' AS int), CAST(NULL AS date))" in sql
    assert "(CAST('it\\'s' AS int), CAST('2026-01-02' AS date))" in sql
