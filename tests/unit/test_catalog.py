"""dbt docs generate's columns: numbered from 1, typed as DESCRIBE prints them."""

import agate

from dbt.adapters.fenced_spark.impl import FencedSparkAdapter
from dbt.adapters.fenced_spark.relation import FencedSparkRelation

# What SHOW TABLE EXTENDED gives a view or a parquet table: the schema tree's type names.
TREE = """Database: s
Table: t
Schema: root
 |-- id: long (nullable = true)
 |-- code: string (nullable = true)
"""


def adapter() -> FencedSparkAdapter:
    return object.__new__(FencedSparkAdapter)  # parsing reads only the class's own patterns


def relation() -> FencedSparkRelation:
    return FencedSparkRelation.create(schema="s", identifier="t", type="table", information=TREE)


def test_the_catalog_reads_describe_not_the_schema_tree():
    # dbt-spark's catalog asks DESCRIBE for a relation this returns nothing for.
    assert adapter().parse_columns_from_information(relation()) == []


def test_describe_columns_are_numbered_from_one():
    rows = agate.Table(
        [
            ("id", "bigint", None),
            ("code", "varchar(3)", None),
            ("tags", "array<string>", None),
            ("", "", ""),
            ("# Detailed Table Information", "", ""),
            ("Owner", "root", ""),
        ],
        ["col_name", "data_type", "comment"],
    ).rows
    columns = adapter().parse_describe_extended(relation(), rows)
    assert [(c.column_index, c.column, c.dtype) for c in columns] == [
        (1, "id", "bigint"),
        (2, "code", "varchar(3)"),
        (3, "tags", "array<string>"),
    ]


def test_a_delta_tables_stats_come_from_describe_detail():
    from dbt.adapters.fenced_spark import catalog

    stats = catalog.detail_stats({"sizeInBytes": 2048, "numFiles": 3, "format": "delta"})
    assert stats["stats:bytes:value"] == 2048 and stats["stats:files:value"] == 3
    assert stats["stats:bytes:include"] is True and stats["stats:files:label"] == "Files"
    assert catalog.detail_stats({"sizeInBytes": None}) == {}
    # dbt-spark's own (a table after ANALYZE) are kept, and no DESCRIBE DETAIL is sent for them.
    assert catalog.has_stats({"column_name": "id", "stats:bytes:value": 1})
    assert not catalog.has_stats({"column_name": "id"})
