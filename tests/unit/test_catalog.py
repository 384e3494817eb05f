"""dbt docs generate's columns: numbered from 1, typed as DESCRIBE prints them."""

from dbt.adapters.fenced_spark.impl import FencedSparkAdapter
from dbt.adapters.fenced_spark.relation import FencedSparkRelation

# What SHOW TABLE EXTENDED puts in a Delta table's `information`.
FLAT = """Database: s
Table: t
Owner: root
Type: MANAGED
Provider: delta
Schema: root
 |-- id: long (nullable = true)
 |-- n: integer (nullable = true)
 |-- small: short (nullable = true)
 |-- tiny: byte (nullable = true)
 |-- amount: decimal(10,2) (nullable = true)
 |-- name: string (nullable = true)
 |-- at: timestamp (nullable = true)
"""

NESTED = """Database: s
Table: t
Schema: root
 |-- id: long (nullable = true)
 |-- tags: array (nullable = true)
 |    |-- element: string (containsNull = true)
"""


def adapter() -> FencedSparkAdapter:
    return object.__new__(FencedSparkAdapter)  # parsing reads only the class's patterns


def relation(information: str) -> FencedSparkRelation:
    return FencedSparkRelation.create(
        schema="s", identifier="t", type="table", information=information
    )


def test_columns_are_numbered_from_one_with_sql_type_names():
    columns = adapter().parse_columns_from_information(relation(FLAT))
    assert [(c.column_index, c.column, c.dtype) for c in columns] == [
        (1, "id", "bigint"),
        (2, "n", "int"),
        (3, "small", "smallint"),
        (4, "tiny", "tinyint"),
        (5, "amount", "decimal(10,2)"),
        (6, "name", "string"),
        (7, "at", "timestamp"),
    ]


def test_a_nested_column_leaves_the_table_to_describe():
    # The tree says `array` alone; dbt-spark's catalog asks DESCRIBE when this returns nothing.
    assert adapter().parse_columns_from_information(relation(NESTED)) == []
