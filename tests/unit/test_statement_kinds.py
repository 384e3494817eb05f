"""Every statement that can hold a query on the target is a read (fence/statements.py): its
kind, the text the fence sends (pinned where Spark allows it), and what it counts in the
footprint (its filter, or the whole table where the fence cannot bound it, never nothing).
The pinned forms were run on Spark 4.1.4 + Delta 4.4 (tests/functional/test_session_variables.py
races the pre-hook ones)."""

import pytest

from dbt.adapters.fenced_spark.fence import rewriter
from dbt.adapters.fenced_spark.fence.footprint import statement_reads
from dbt.adapters.fenced_spark.fence.node import (
    COUNT,
    PIN,
    STEP,
    STEP_READ,
    TAG,
    NodeTransaction,
    Phase,
)
from dbt.adapters.fenced_spark.fence.statements import (
    OPAQUE,
    READ,
    UNPINNED,
    WRITE,
    leaves_state,
    pin_statement,
    statement_kind,
)

T = "analytics.orders"
WHOLE = "the whole table"


def kind(sql: str, current_schema: str | None = None) -> str | None:
    return statement_kind(sql, "analytics", "orders", current_schema=current_schema)


def pin(sql: str, current_schema: str | None = None) -> str:
    return pin_statement(sql, "analytics", "orders", 7, current_schema=current_schema)


def reads(sql: str) -> list[str]:
    return [f.describe() for f in statement_reads(sql, "analytics", "orders")]


# (statement, pinned as sent, footprint)
PINNED = [
    (
        f"set var wm = (select max(id) from {T} where p = 'a')",
        f"set var wm = (select max(id) from {T} VERSION AS OF 7 where p = 'a')",
        ["where (p = 'a')"],
    ),
    (
        f"SET VARIABLE wm = (select max(id) from {T})",
        f"SET VARIABLE wm = (select max(id) from {T} VERSION AS OF 7)",
        [WHOLE],
    ),
    (
        f"set var (lo, hi) = (select min(id), max(id) from {T} where id > 3)",
        f"set var (lo, hi) = (select min(id), max(id) from {T} VERSION AS OF 7 where id > 3)",
        ["where (id > 3)"],
    ),
    (
        # sqlglot keeps this as a Command: the token scan pins it, the footprint is whole.
        f"set var a = (with c as (select id from {T} where id = 1) select max(id) from c), b = 5",
        f"set var a = (with c as (select id from {T} VERSION AS OF 7 where id = 1) "
        "select max(id) from c), b = 5",
        [WHOLE],
    ),
    (
        f"declare or replace variable wm bigint default (select max(id) from {T} where id < 9)",
        f"declare or replace variable wm bigint default (select max(id) from {T} "
        "VERSION AS OF 7 where id < 9)",
        ["where (id < 9)"],
    ),
    (
        f"cache table c as select * from {T} where id = 2",
        f"cache table c as select * from {T} VERSION AS OF 7 where id = 2",
        ["where (id = 2)"],
    ),
    (
        f"CACHE LAZY TABLE c OPTIONS ('storageLevel' 'DISK_ONLY') "
        f"with w as (select * from {T} where p = 'b') select * from w",
        f"CACHE LAZY TABLE c OPTIONS ('storageLevel' 'DISK_ONLY') "
        f"with w as (select * from {T} VERSION AS OF 7 where p = 'b') select * from w",
        ["where (p = 'b')"],
    ),
    (
        f"cache table c as table {T}",
        f"cache table c as (SELECT * FROM {T} VERSION AS OF 7)",
        [WHOLE],
    ),
    (
        f"create or replace temp view v as select * from {T} where id = 2",
        f"create or replace temp view v as select * from {T} VERSION AS OF 7 where id = 2",
        ["where (id = 2)"],
    ),
    (
        f"create or replace global temporary view v as select * from {T}",
        f"create or replace global temporary view v as select * from {T} VERSION AS OF 7",
        [WHOLE],
    ),
    (
        f"create temporary function hi() returns bigint return (select max(id) from {T})",
        f"create temporary function hi() returns bigint return (select max(id) from {T} "
        "VERSION AS OF 7)",
        [WHOLE],
    ),
    (
        f"execute immediate 'select max(id) from {T} where id = 2' into wm",
        f"execute immediate 'select max(id) from {T} VERSION AS OF 7 where id = 2' into wm",
        ["where (id = 2)"],
    ),
    (
        f'EXECUTE IMMEDIATE "set var wm = (select max(id) from {T})"',
        f'EXECUTE IMMEDIATE "set var wm = (select max(id) from {T} VERSION AS OF 7)"',
        [WHOLE],
    ),
    (
        f"execute immediate 'execute immediate \"select id from {T}\"'",
        f"execute immediate 'execute immediate \"select id from {T} VERSION AS OF 7\"'",
        [WHOLE],
    ),
    (
        f"insert overwrite directory '/x' using parquet select * from {T}",
        f"insert overwrite directory '/x' using parquet select * from {T} VERSION AS OF 7",
        [WHOLE],
    ),
    (
        f"with w as (select * from {T} where id = 2) insert into analytics.o select * from w",
        f"with w as (select * from {T} VERSION AS OF 7 where id = 2) "
        "insert into analytics.o select * from w",
        ["where (id = 2)"],
    ),
    (
        f"from {T} insert into analytics.o select * insert into analytics.p select id",
        f"from {T} VERSION AS OF 7 insert into analytics.o select * insert into analytics.p "
        "select id",
        [WHOLE],
    ),
    (
        f"create table analytics.o shallow clone {T}",
        f"create table analytics.o shallow clone {T} VERSION AS OF 7",
        [WHOLE],
    ),
]


@pytest.mark.parametrize("sql, pinned, footprint", PINNED)
def test_a_read_is_pinned_and_counted(sql, pinned, footprint):
    assert kind(sql) == READ
    assert pin(sql) == pinned
    assert reads(sql) == footprint


# Reads no pin reaches: run as written, counted (a view's filter, else the whole table).
UNPINNED_READS = [
    (f"create view analytics.v as select * from {T} where id = 2", ["where (id = 2)"]),
    (f"alter view analytics.v as select * from {T}", [WHOLE]),
    (f"create function analytics.f() returns bigint return (select max(id) from {T})", [WHOLE]),
    ("execute immediate q", [WHOLE]),  # a variable: whatever it names
    ("execute immediate sql_text into wm using 3 as x", [WHOLE]),
    (f"execute immediate 'select max(id) from ' || '{T}'", [WHOLE]),
    ("execute immediate 'select max(id) from ' 'analytics.orders'", [WHOLE]),
    (f"execute immediate 'select * from {T} where v = \\'x\\''", [WHOLE]),  # an escape
    (f"execute immediate 'select * from {T} where v = ''x'''", [WHOLE]),
    (f"execute immediate 'select 1' using (select max(id) from {T}) as x", [WHOLE]),
    (f"cache table {T}", [WHOLE]),
    ("cache lazy table `analytics`.`orders`", [WHOLE]),
    (f"analyze table {T} compute statistics", [WHOLE]),
    (f"frobnicate {T}", [WHOLE]),
    (f"select 'a quote left open from {T}", [WHOLE]),  # not even tokenized
    ("begin execute immediate q; end", [WHOLE]),
]


@pytest.mark.parametrize("sql, footprint", UNPINNED_READS)
def test_a_read_no_pin_reaches_is_counted(sql, footprint):
    assert kind(sql) == UNPINNED
    assert reads(sql) == footprint


def test_a_permanent_view_is_not_pinned():
    """Pinned, the catalog would keep vB in the view for every later reader."""
    sql = f"create or replace view analytics.v as select * from {T}"
    node = transaction(Phase.PRE_HOOK)
    assert node.action(sql) == COUNT
    node.count(sql)
    assert node.reads == [sql]


@pytest.mark.parametrize(
    "sql",
    [
        f"with w as (select * from analytics.o) insert into {T} select * from w",
        f"from analytics.o insert into analytics.p select * insert into {T} select id",
        f"with w as (select 1 as id) merge into {T} t using w on t.id = w.id "
        "when matched then delete",
        f"execute immediate 'delete from {T} where id = 2'",
        f"load data inpath '/x' into table {T}",
    ],
)
def test_a_write_behind_a_with_a_from_or_an_execute_is_a_write(sql):
    assert kind(sql) == WRITE


@pytest.mark.parametrize(
    "sql",
    [
        f"begin declare x int; set x = (select max(id) from {T}); select x; end",
        f"begin insert into {T} values (1); end",
        f"call cat.system.compact({T})",
        f"convert to delta {T}",
    ],
)
def test_a_statement_that_may_write_the_target_unseen_is_a_step_that_reads_it_all(sql):
    assert kind(sql) == OPAQUE
    assert reads(sql) == [WHOLE]


@pytest.mark.parametrize(
    "sql",
    [
        f"explain select * from {T}",
        f"describe query select * from {T}",
        f"describe history {T}",
        f"show tblproperties {T}",
        f"set spark.sql.x = {T}",
        f"refresh table {T}",
        f"uncache table {T}",
        "declare or replace variable wm bigint default 5",
        "set var wm = 5",
        "execute immediate 'select 1'",
        "cache table c as select * from analytics.other",
        "begin select 1; end",
        "drop temporary variable wm",
        f"select * from {T} version as of 3",  # the user time-travels on purpose
    ],
)
def test_what_reads_no_rows_of_the_target_is_left_alone(sql):
    assert kind(sql) is None


def test_the_name_a_statement_makes_is_not_a_read():
    """A cache, view or function spelled as the target (bare, after `USE analytics`) is
    made, not read: only the query's read is pinned."""
    for sql, pinned in [
        (
            f"cache table orders as select * from {T}",
            f"cache table orders as select * from {T} VERSION AS OF 7",
        ),
        (
            f"create temp view orders as select * from {T}",
            f"create temp view orders as select * from {T} VERSION AS OF 7",
        ),
    ]:
        assert pin(sql, current_schema="analytics") == pinned
        footprint = statement_reads(sql, "analytics", "orders", current_schema="analytics")
        assert [f.describe() for f in footprint] == [WHOLE]


def test_a_bare_name_inside_execute_immediate_is_seen():
    sql = "execute immediate 'select max(id) from orders'"
    assert rewriter.names_bare(sql, "orders")
    assert kind(sql, current_schema="analytics") == READ
    assert pin(sql, current_schema="analytics") == (
        "execute immediate 'select max(id) from orders VERSION AS OF 7'"
    )


def test_sql_sqlglot_keeps_as_a_command_is_scanned_not_skipped():
    with pytest.raises(rewriter.SqlglotError):
        rewriter.parsed_statements(f"set var a = (select 1 from {T}), b = 5")
    assert rewriter.reads_self(f"set var a = (select 1 from {T}), b = 5", "analytics", "orders")


def transaction(phase: Phase) -> NodeTransaction:
    txn = NodeTransaction("analytics", "orders", "`analytics`.`orders`", T, "n", "i")
    txn.phase = phase
    txn.start("merge", 7)
    return txn


SET_VAR = f"set var wm = (select max(id) from {T})"
OPAQUE_SQL = f"begin insert into {T} values (1); end"
UNBOUND = "execute immediate q"


@pytest.mark.parametrize(
    "phase, pinned, unbound, opaque",
    [
        (Phase.COMPILE, PIN, COUNT, STEP_READ),
        (Phase.MATERIALIZE, None, None, None),
        (Phase.PRE_HOOK, PIN, COUNT, STEP_READ),
        (Phase.MODEL, PIN, COUNT, COUNT),  # the sql_header: no step there
        (Phase.SCHEMA_CHANGE, None, None, STEP_READ),
        (Phase.POST_HOOK, None, None, TAG),
        (Phase.DONE, None, None, None),
    ],
)
def test_what_each_kind_is_in_each_phase(phase, pinned, unbound, opaque):
    txn = transaction(phase)
    assert txn.action(SET_VAR) == pinned
    assert txn.action(UNBOUND) == unbound
    assert txn.action(OPAQUE_SQL) == opaque
    assert txn.action(f"execute immediate 'delete from {T}'") == (
        STEP
        if phase in (Phase.COMPILE, Phase.PRE_HOOK, Phase.SCHEMA_CHANGE)
        else TAG
        if phase == Phase.POST_HOOK
        else None
    )


def test_reads_are_remembered_and_those_kept_in_the_session_stop_a_retry():
    txn = transaction(Phase.COMPILE)
    assert txn.pin(SET_VAR) == f"set var wm = (select max(id) from {T} VERSION AS OF 7)"
    assert txn.compile_reads == [SET_VAR] and txn.kept_reads == []
    txn.phase = Phase.PRE_HOOK
    txn.pin(f"select max(id) from {T}")  # its rows go to the caller only
    txn.count(UNBOUND)
    txn.pin(SET_VAR)
    assert txn.kept_reads == [UNBOUND, SET_VAR]
    assert txn.reads == [SET_VAR, f"select max(id) from {T}", UNBOUND, SET_VAR]


@pytest.mark.parametrize(
    "sql, kept",
    [
        (f"select * from {T}", False),
        (f"with w as (select 1) select * from {T}", False),
        (f"with w as (select * from {T}) insert into analytics.o select * from w", True),
        (SET_VAR, True),
        ("cache table c as select 1", True),
        ("create temp view v as select 1", True),
        ("execute immediate q", True),
    ],
)
def test_leaves_state(sql, kept):
    assert leaves_state(sql) is kept
