"""What a statement on the target is, at each phase of the node's transaction, and what
escapes it (docs/limits.md lists the same)."""

import pytest

from dbt.adapters.fenced_spark.fence.node import PIN, STEP, TAG, NodeTransaction, Phase
from dbt.adapters.fenced_spark.fence.statements import READ, WRITE, statement_kind

READS = "select max(id) from analytics.orders"
WRITES = "delete from analytics.orders where id >= 5"


def node(phase: Phase) -> NodeTransaction:
    txn = NodeTransaction(
        "analytics", "orders", "`analytics`.`orders`", "analytics.orders", "n", "i"
    )
    txn.phase = phase
    txn.start("merge", 7)
    return txn


@pytest.mark.parametrize(
    "phase, read, write",
    [
        (Phase.COMPILE, PIN, STEP),
        (Phase.MATERIALIZE, None, None),
        (Phase.PRE_HOOK, PIN, STEP),
        (Phase.MODEL, PIN, None),  # the sql_header runs here, before the write
        (Phase.SCHEMA_CHANGE, None, STEP),
        (Phase.POST_HOOK, None, TAG),
        (Phase.DONE, None, None),
    ],
)
def test_what_a_statement_on_the_target_is_in_each_phase(phase, read, write):
    txn = node(phase)
    assert txn.action(READS) == read
    assert txn.action(WRITES) == write
    assert txn.action("select * from analytics.other") is None
    assert txn.action("describe table analytics.orders") is None


def test_a_node_whose_target_is_not_delta_touches_nothing():
    txn = node(Phase.COMPILE)
    txn.unfenced = True
    assert txn.action(READS) is None


def test_compile_time_reads_are_pinned_and_remembered():
    txn = node(Phase.COMPILE)
    assert txn.pin(READS) == "select max(id) from analytics.orders VERSION AS OF 7"
    txn.phase = Phase.PRE_HOOK
    txn.pin(READS)
    assert txn.compile_reads == [READS]


@pytest.mark.parametrize(
    "sql, kind",
    [
        (READS, READ),
        ("with w as (select id from `analytics`.`orders`) select * from w", READ),
        ("insert into analytics.audit select count(*) from analytics.orders", READ),
        ("select * from IDENTIFIER('analytics.orders')", READ),
        ("update analytics.orders set x = 1", WRITE),
        ("merge into analytics.orders t using s on s.id = t.id when matched then delete", WRITE),
        ("insert overwrite table analytics.orders select 1", WRITE),
        ("alter table `analytics`.`orders` add columns (note string)", WRITE),
        ("optimize analytics.orders", WRITE),
        ("truncate table analytics.orders", WRITE),
        ("/* a comment */ delete from analytics.orders", WRITE),
        ("set spark.sql.shuffle.partitions = 4", None),
        ("show tables in analytics", None),
        ("insert into analytics.audit values (1)", None),
    ],
)
def test_statement_kinds(sql, kind):
    assert statement_kind(sql, "analytics", "orders") == kind


@pytest.mark.parametrize(
    "sql",
    [
        "select * from analytics.orders_view",  # a view over the target: its name only
        "select * from IDENTIFIER(:table)",  # a name bound at run time
        "select * from IDENTIFIER('analytics' || '.orders')",
        "select * from orders",  # unqualified: may be a CTE
    ],
)
def test_what_escapes_is_not_taken_for_a_read_of_the_target(sql):
    assert statement_kind(sql, "analytics", "orders") is None


def test_a_delta_path_read_is_a_read_of_the_target_once_its_location_is_known():
    sql = "select max(id) from delta.`file:/wh/analytics.db/orders`"
    assert statement_kind(sql, "analytics", "orders") is None
    assert statement_kind(sql, "analytics", "orders", "/wh/analytics.db/orders") == READ
