"""A Thrift session kept for the next node (thrift.py): which statements keep it from serving
another node, how a kept one is checked before it serves, and the conf read it spares. The
functional proof is test_statements.py over a real Thrift server."""

from types import SimpleNamespace

import pytest
from dbt.adapters.spark import connections as spark_connections
from dbt.adapters.spark.connections import PyhiveConnectionWrapper, SparkConnectionManager
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import thrift
from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager
from dbt.adapters.fenced_spark.fence.delta.words import MAX_COMMIT_ATTEMPTS
from dbt.adapters.fenced_spark.fence_sql import FenceSql
from dbt.adapters.fenced_spark.polling import BackoffPyhiveConnectionWrapper

COMMENT = '/* {"app": "dbt", "node_id": "model.p.m"} */\n'


def ran(leftovers: thrift.Leftovers, *statements: str) -> thrift.Leftovers:
    """Each statement seen, then succeeded, as the wrapper reports them."""
    for sql in statements:
        leftovers.saw(sql)
        leftovers.ran(sql)
    return leftovers


@pytest.mark.parametrize(
    "sql",
    [
        "select * from s.t",
        "describe extended s.t",
        "show table extended in s like '*'",
        "EXPLAIN SELECT path FROM binaryFile.`/t/_delta_log/{/00.json}`",
        "merge into s.t using v on s.t.id = v.id when matched then update set *",
        "insert into s.t select * from v",
        "create or replace table s.t using delta as select 1",
        "create table if not exists s.t (id int) using delta",
        "create view s.v as select 1",
        "alter table s.t add columns (c int)",
        "drop table if exists s.t",
        "drop view s.v",
        "delete from s.t where id = 1",
        "SET spark.databricks.delta.commitInfo.userMetadata",  # a read
        "set -v",
        "set",
        COMMENT + "select 1",
        'select 1\n/* {"app": "dbt"} */',  # query-comment: append
        "SET spark.databricks.delta.commitInfo.userMetadata /* appended */",
        "create or replace materialized view s.mv as select 1",
    ],
)
def test_statements_that_leave_nothing(sql):
    assert ran(thrift.Leftovers(), sql).clean


@pytest.mark.parametrize(
    "sql",
    [
        "use analytics",
        "USE `default`",
        "set catalog other",
        "set time zone 'UTC'",
        "set var x = 1",
        "declare x int",
        "reset",
        "add jar /x.jar",
        "create temporary function f as 'com.example.F'",
        "cache table s.t",
        "create global temporary view g as select 1",
        "execute immediate 'set spark.sql.x=1'",
        "set spark.sql.caseSensitive=true",
        "SET `spark.sql.caseSensitive` = true",
        "set spark.sql.catalog.ext=org.apache.iceberg.spark.SparkCatalog",
        "set spark.sql.thriftserver.scheduler.pool=heavy",
        COMMENT + "use analytics",
        # Spark's SET writes these under another key, which their RESET leaves set.
        "set mapred.reduce.tasks=7",
        "set mapreduce.job.reduces=7",
        "set hivevar:spark.sql.session.timeZone=UTC",
        # Spark's lexer goes on with a `--` comment past a backslash-newline.
        "-- x \\\nselect\nuse other_db",
        # Spark substitutes `${...}` before it parses.
        "/* ${c} */ select 1",
        # Names the rules do not read.
        "create temp view identifier('x') as select 1",
        'drop view if exists "legacy"',
        "alter view identifier('legacy') as select 1",
    ],
)
def test_statements_that_change_the_session_for_good(sql):
    leftovers = ran(thrift.Leftovers(), sql)
    assert not leftovers.clean
    assert not leftovers.reusable  # not merely holding something a later statement undoes


@pytest.mark.parametrize(
    "key", ["mapred.reduce.tasks", "hivevar:spark.sql.caseSensitive", "hivevar:x"]
)
def test_a_reset_of_an_alias_undoes_nothing(key):
    assert not ran(thrift.Leftovers(), f"set {key}=1", f"reset {key}").clean


def test_a_conf_set_then_reset_leaves_nothing():
    leftovers = ran(
        thrift.Leftovers(), 'SET spark.databricks.delta.commitInfo.userMetadata=`{"a": 1}`'
    )
    assert not leftovers.clean
    assert not leftovers.untouched("spark.databricks.delta.commitInfo.userMetadata")
    assert ran(leftovers, "RESET spark.databricks.delta.commitInfo.userMetadata").clean
    assert leftovers.untouched("spark.databricks.delta.commitInfo.userMetadata")


def test_a_reset_that_failed_undoes_nothing():
    leftovers = ran(thrift.Leftovers(), "set spark.sql.shuffle.partitions=7")
    leftovers.saw("reset spark.sql.shuffle.partitions")
    leftovers.failed(RuntimeError("lost"))
    assert not leftovers.clean


def test_a_temp_view_made_then_dropped_leaves_nothing():
    leftovers = ran(thrift.Leftovers(), "create or replace temporary view m__fence_0a as select 1")
    assert not leftovers.clean
    leftovers.saw("DROP VIEW IF EXISTS m__fence_0a")
    assert not leftovers.clean  # only once it succeeded
    leftovers.ran("DROP VIEW IF EXISTS m__fence_0a")
    assert leftovers.clean
    # Under spark.sql.caseSensitive another spelling names another view: the session closes.
    other = ran(thrift.Leftovers(), "create temp view Foo as select 1", "drop view if exists foo")
    assert not other.clean


def test_a_temp_view_left_behind_or_renamed_keeps_the_session_closed():
    leftovers = thrift.Leftovers()
    leftovers.saw("create temporary view m__dbt_tmp as select 1")
    assert not leftovers.clean
    renamed = thrift.Leftovers()
    renamed.saw("create temporary view v as select 1")
    renamed.saw("alter view v rename to w")
    renamed.saw("drop view if exists w")
    renamed.ran("drop view if exists w")
    assert not renamed.clean


def test_what_the_profile_and_the_run_set_is_theirs():
    # The profile's OpenSession confs and the run's replayed hook statements are in every
    # session of the run: a node that sets or resets one leaves its session unlike a new one.
    leftovers = thrift.Leftovers({"set:hiveconf:spark.sql.shuffle.partitions": "4"})
    assert not leftovers.untouched("spark.sql.shuffle.partitions")
    leftovers.replaying = True
    replayed = ("set spark.sql.ansi.enabled=false", "use a", "create temp view h as select 1")
    for sql in replayed:
        leftovers.saw(sql)
        leftovers.ran(sql)
    leftovers.replaying = False
    assert leftovers.clean
    # Each would leave a new session as it found it; not a session the run's statements set.
    for statements in (
        ("reset spark.sql.shuffle.partitions",),
        ("set spark.sql.ansi.enabled=true", "reset spark.sql.ansi.enabled"),
        ("set hivevar:spark.sql.ansi.enabled=true",),
        ("drop view h",),
        ("drop view if exists identifier('h')",),
        ("create or replace temporary view h as select 2", "drop view h"),
    ):
        fresh = thrift.Leftovers({"spark.sql.shuffle.partitions": "4"})
        fresh.replaying = True
        fresh.saw("set spark.sql.ansi.enabled=false")
        fresh.saw("create temp view h as select 1")
        fresh.replaying = False
        assert not ran(fresh, *statements).clean, statements
    assert ran(thrift.Leftovers(), "create temp view h as select 2", "drop view h").clean


def test_a_conf_the_run_set_through_an_alias_is_theirs():
    key = "spark.databricks.delta.commitInfo.userMetadata"
    leftovers = thrift.Leftovers()
    leftovers.replaying = True
    ran(leftovers, f"set hivevar:{key}=audit", "set mapred.reduce.tasks=4")
    leftovers.replaying = False
    assert leftovers.clean
    assert not leftovers.untouched(key)  # its value is the run's, not the server's
    assert not ran(leftovers, "reset spark.sql.shuffle.partitions").clean


def test_a_replayed_statement_with_a_substitution_may_have_set_anything():
    leftovers = thrift.Leftovers()
    leftovers.replaying = True
    ran(leftovers, "set ${x}=1")
    leftovers.replaying = False
    assert leftovers.clean
    assert not leftovers.untouched("spark.sql.ansi.enabled")
    assert not ran(leftovers, "reset spark.sql.ansi.enabled").clean


class FakePyhive:
    """pyhive's Connection as the wrapper and thrift.py use it."""

    def __init__(self, alive=True):
        self.closed = False
        self.alive = alive
        self.asked = 0
        self.cursors: list[SimpleNamespace] = []
        self.sessionHandle = "session"
        self.client = SimpleNamespace(GetInfo=self._get_info)

    def _get_info(self, request):
        self.asked += 1
        if not self.alive:
            raise ConnectionResetError("Invalid SessionHandle")
        return SimpleNamespace(status=SimpleNamespace(statusCode=0))

    def cursor(self):
        cursor = SimpleNamespace(closed=False)
        cursor.close = lambda: setattr(cursor, "closed", True)
        self.cursors.append(cursor)
        return cursor

    def close(self):
        self.closed = True


def wrapper(pyhive, pool="profile"):
    return BackoffPyhiveConnectionWrapper(pyhive, poll_interval=5, pool=pool)


@pytest.fixture(autouse=True)
def nothing_kept():
    thrift.release_kept()
    yield
    thrift.release_kept()


def test_a_clean_session_is_kept_and_serves_the_next_connection():
    pyhive = FakePyhive()
    handle = wrapper(pyhive)
    handle.cursor()
    handle.close()
    assert not pyhive.closed and pyhive.cursors[0].closed  # its last statement closed
    assert thrift.reuse("another profile", "model.p.b") is None
    assert thrift.reuse("profile", "model.p.b") is handle
    assert pyhive.asked == 1  # asked before it serves
    assert thrift.reuse("profile", "model.p.c") is None  # one connection at a time


def test_a_session_that_left_something_is_closed():
    pyhive = FakePyhive()
    handle = wrapper(pyhive)
    handle.leftovers.saw("set spark.sql.shuffle.partitions=7")
    handle.close()
    assert pyhive.closed
    assert thrift.reuse("profile", "model.p.b") is None


def test_a_cancelled_session_is_closed():
    pyhive = FakePyhive()
    handle = wrapper(pyhive)
    handle.cancel()
    handle.close()
    assert pyhive.closed


def test_without_a_pool_nothing_is_kept():
    pyhive = FakePyhive()
    wrapper(pyhive, pool=None).close()
    assert pyhive.closed


def test_a_session_the_server_let_go_is_closed_and_none_served():
    pyhive = FakePyhive()
    wrapper(pyhive).close()
    pyhive.alive = False
    assert thrift.reuse("profile", "model.p.b") is None
    assert pyhive.closed


def test_kept_sessions_are_closed_at_the_end_of_the_invocation():
    pyhive = FakePyhive()
    wrapper(pyhive).close()
    thrift.release_kept()
    assert pyhive.closed
    assert thrift.reuse("profile", "model.p.b") is None


def test_the_server_default_of_a_conf_is_read_once_where_nothing_set_it():
    key = "spark.databricks.delta.commitInfo.userMetadata"
    reads: list[str] = []

    def read():
        reads.append(key)
        return None

    first, second = wrapper(FakePyhive()), wrapper(FakePyhive())
    assert thrift.server_default(first, key, read) is None
    assert thrift.server_default(second, key, read) is None
    assert len(reads) == 1
    second.leftovers.saw(f"set {key}=audit")  # a pre-hook's label: read from the session
    assert thrift.server_default(second, key, lambda: "audit") == "audit"
    profiled = BackoffPyhiveConnectionWrapper(
        FakePyhive(), poll_interval=5, pool="profile", profile_confs={key: "label"}
    )
    assert thrift.server_default(profiled, key, lambda: "label") == "label"
    thrift.release_kept()  # the invocation's end: read again in the next one
    thrift.server_default(first, key, read)
    assert len(reads) == 2


def test_a_reset_undoes_the_set_of_its_exact_key_only():
    # Spark's conf keys are case-sensitive: RESET of another spelling leaves the SET in force.
    wrong = ran(
        thrift.Leftovers(),
        "SET spark.sql.session.timeZone=UTC",
        "RESET spark.sql.session.timezone",
    )
    assert not wrong.clean
    quoted = ran(
        thrift.Leftovers(),
        "SET `spark.sql.session.timeZone` = UTC",
        "RESET `spark.sql.session.timeZone`",
    )
    assert quoted.clean


def test_a_backquoted_key_is_the_key():
    key = "spark.databricks.delta.commitInfo.userMetadata"
    leftovers = thrift.Leftovers()
    leftovers.saw(f"SET `{key}` = audit")
    assert not leftovers.untouched(key)
    profiled = thrift.Leftovers({"spark.sql.ansi.enabled": "false"})
    profiled.saw("RESET `spark.sql.ansi.enabled`")
    assert not profiled.clean


def test_comments_anywhere_do_not_hide_a_drop_of_the_runs_view():
    for drop in ("DROP /* x */ VIEW h", "DROP VIEW -- c\n h", "alter table h rename to x"):
        leftovers = thrift.Leftovers()
        leftovers.replaying = True
        leftovers.saw("create or replace temporary view h as select 1")
        leftovers.replaying = False
        leftovers.saw(drop)
        leftovers.ran(drop)
        assert not leftovers.clean, drop


def test_a_qualified_drop_reaches_no_temp_view():
    # `IF` is no view's name: a DROP of a qualified table after an unreadable replay is data.
    leftovers = thrift.Leftovers()
    leftovers.replaying = True
    ran(leftovers, "execute immediate 'SET spark.sql.session.timeZone = UTC'")
    leftovers.replaying = False
    assert ran(leftovers, "drop table if exists s.migrate", "drop view if exists s.v").clean


def test_a_view_renamed_by_alter_table_is_not_dropped():
    leftovers = ran(
        thrift.Leftovers(),
        "create temp view v as select 1",
        "alter table v rename to w",
        "drop view v",
    )
    assert not leftovers.clean


def test_a_replayed_statement_the_rules_cannot_read_may_have_set_anything():
    # on-run-start's EXECUTE IMMEDIATE 'SET k=v' and SET TIME ZONE are the run's: a node that
    # resets or drops by a bare name may undo them, which the next node would not get back.
    for replayed, then in (
        ("execute immediate 'SET spark.sql.ansi.enabled=false'", "reset spark.sql.ansi.enabled"),
        ("execute immediate 'create temp view h as select 1'", "drop view if exists h"),
        ("SET TIME ZONE 'UTC'", "set spark.sql.session.timeZone = America/New_York"),
    ):
        leftovers = thrift.Leftovers()
        leftovers.replaying = True
        leftovers.saw(replayed)
        leftovers.replaying = False
        assert leftovers.clean
        leftovers.saw(then)
        leftovers.ran(then)
        leftovers.saw("reset spark.sql.session.timeZone")
        leftovers.ran("reset spark.sql.session.timeZone")
        assert not leftovers.clean, (replayed, then)


def test_a_session_idle_too_long_or_spoilt_while_kept_is_closed(monkeypatch):
    idle, spoilt = FakePyhive(), FakePyhive()
    idle_handle = wrapper(idle)
    idle_handle.close()
    monkeypatch.setattr(idle_handle, "kept_at", idle_handle.kept_at - 61)
    assert thrift.reuse("profile", "model.p.b") is None
    assert idle.closed and idle.asked == 0
    spoilt_handle = wrapper(spoilt)
    spoilt_handle.close()
    spoilt_handle.cancel()  # dbt's cancel, landing after the node released it
    assert thrift.reuse("profile", "model.p.b") is None
    assert spoilt.closed


def test_sessions_kept_first_are_closed_once_idle_too_long(monkeypatch):
    old, new = FakePyhive(), FakePyhive()
    old_handle = wrapper(old)
    old_handle.close()
    monkeypatch.setattr(old_handle, "kept_at", old_handle.kept_at - 61)
    wrapper(new).close()  # the next kept one sweeps the pool
    assert old.closed and not new.closed


class FakeSocket:
    def __init__(self):
        self.timeouts: list[float | None] = []
        self._timeout = None

    def setTimeout(self, ms):  # noqa: N802 (Thrift's name)
        self.timeouts.append(ms)
        self._timeout = None if ms is None else ms / 1000


@pytest.mark.parametrize(
    "statements",
    [
        # the backquoted name is `a``b`, qualified: not the view a
        ("create temp view a as select 1", "drop view if exists `a``b`.c"),
        # Spark finds a view by any case of its name: the view renamed is not dropped
        ("create temp view V as select 1", "alter view v rename to w", "drop view if exists V"),
        # whitespace inside backquotes is the name's
        ("create temp view `a  b` as select 1", "drop view if exists `a b`"),
    ],
)
def test_a_view_left_under_a_name_the_drop_did_not_name(statements):
    assert not ran(thrift.Leftovers(), *statements).clean


def test_a_view_dropped_by_its_name_as_written():
    assert ran(thrift.Leftovers(), "create temp view `a  b` as select 1", "drop view `a  b`").clean


def test_a_kept_session_is_asked_and_closed_with_a_timeout():
    pyhive = FakePyhive()
    pyhive._transport = SimpleNamespace(_trans=(socket := FakeSocket()))  # SASL over a socket
    wrapper(pyhive).close()
    assert thrift.reuse("profile", "model.p.b") is not None
    assert socket.timeouts == [thrift.QUIET_TIMEOUT_MS, None]  # and pyhive's none after
    thrift.close(SimpleNamespace(handle=pyhive))
    assert socket.timeouts[2:] == [thrift.QUIET_TIMEOUT_MS, None] and pyhive.closed


def test_the_socket_under_a_buffered_transport_gets_the_timeout_too():
    # NOSASL: pyhive wraps its socket in Thrift's TBufferedTransport, which hides it.
    from thrift.transport.TTransport import TBufferedTransport

    socket = FakeSocket()
    with thrift.bounded(SimpleNamespace(_transport=TBufferedTransport(socket))):
        assert socket.timeouts == [thrift.QUIET_TIMEOUT_MS]
    assert socket.timeouts[-1] is None


def test_a_session_that_does_not_answer_its_close_has_its_socket_closed():
    pyhive = FakePyhive()
    pyhive._transport = SimpleNamespace(closed=False)
    pyhive._transport.close = lambda: setattr(pyhive._transport, "closed", True)

    def silent():
        raise TimeoutError("timed out")

    pyhive.close = silent
    thrift.close(SimpleNamespace(handle=pyhive))
    assert pyhive._transport.closed


def test_what_a_node_committed_stays_known_in_the_session_it_leaves():
    # The fence resets lastCommitVersionInSession before its write only where the session may
    # hold another commit's version (connections.session_may_have_committed).
    handle = wrapper(FakePyhive())
    handle._fenced_may_have_committed = True
    handle.close()
    assert getattr(thrift.reuse("profile", "model.p.b"), "_fenced_may_have_committed", False)


def test_run_connections_are_not_kept_and_a_kept_one_is_no_longer_the_connections():
    for name, kept in (("master", False), ("macro_grant", False), ("model.p.a", True)):
        pyhive = FakePyhive()
        connection = SimpleNamespace(name=name, handle=wrapper(pyhive))
        FencedSparkConnectionManager._close_handle(connection)
        assert pyhive.closed is not kept, name
        assert (connection.handle is None) is kept, name
        thrift.release_kept()


def test_a_new_connection_asked_for_takes_no_kept_session(monkeypatch):
    kept = wrapper(FakePyhive())
    kept.close()
    opened = []

    def spark_open(cls, connection):
        opened.append(connection.name)
        connection.handle = SimpleNamespace(name="new")
        return connection

    monkeypatch.setattr(SparkConnectionManager, "open", classmethod(spark_open))
    creds = SimpleNamespace(method="thrift", to_dict=lambda omit_none: {"host": "h"})
    monkeypatch.setattr(thrift, "pool_key", lambda creds: "profile")

    def connection(name):
        return SimpleNamespace(name=name, state="init", credentials=creds, handle=None)

    assert FencedSparkConnectionManager.open(connection("model.p.b")).handle is kept
    kept.close()
    reopened = FencedSparkConnectionManager.open(connection("model.p.c"), new=True)
    assert opened == ["model.p.c"] and reopened.handle.name == "new"


def test_each_statement_closes_the_last_ones_operation():
    pyhive = FakePyhive()
    handle = wrapper(pyhive)
    handle.cursor()
    handle.cursor()
    assert [c.closed for c in pyhive.cursors] == [True, False]


class Manager:
    """What FenceSql uses of FencedSparkConnectionManager, over one wrapper."""

    fence_own = FencedSparkConnectionManager.fence_own

    def __init__(self, handle):
        self.connection = SimpleNamespace(handle=handle)

    def get_thread_connection(self):
        return self.connection

    def add_query(self, sql, auto_begin=False):
        self.connection.handle.cursor()
        self.connection.handle.execute(sql)

    def fetch_rows(self, sql, at_once=False):
        with self.fence_own():  # as FencedSparkConnectionManager.fetch_rows
            self.add_query(sql)
        return [], []

    def session_may_have_committed(self):
        return True


TAG, ATTEMPTS = "spark.databricks.delta.commitInfo.userMetadata", MAX_COMMIT_ATTEMPTS


@pytest.fixture
def sent(monkeypatch):
    statements: list[str] = []
    monkeypatch.setattr(
        PyhiveConnectionWrapper,
        "_execute_with_polling",
        lambda self, sql, bindings: statements.append(sql),
    )
    return statements


def strict_write(fence: FenceSql, tag: str, sql: str) -> None:
    """Fence.tagged around a strict write, as protocol.py sends it."""
    fence.set_session_conf(TAG, tag)
    fence.set_session_conf(ATTEMPTS, "0")
    fence.execute(sql)
    fence.set_session_conf(TAG, None)
    fence.set_session_conf(ATTEMPTS, None)


def test_the_fences_resets_wait_for_a_statement_not_its_own(sent):
    handle = wrapper(FakePyhive())
    fence = FenceSql(Manager(handle))
    strict_write(fence, "a", "insert into s.t select 1")
    assert sent == [f"SET {TAG}=`a`", f"SET {ATTEMPTS}=`0`", "insert into s.t select 1"]
    assert fence.session_conf(TAG) is None and len(sent) == 3  # what its RESET will leave
    handle.close()  # kept: the session holds nothing its RESETs will not undo
    assert thrift.reuse("profile", "model.p.b") is handle
    # The next node's strict write: the fence's reads go first; maxCommitAttempts is still 0.
    fence.fetch("EXPLAIN SELECT path FROM binaryFile.`/t/_delta_log`")
    strict_write(fence, "b", "insert into s.t select 2")
    assert sent[3:] == [
        "EXPLAIN SELECT path FROM binaryFile.`/t/_delta_log`",
        f"SET {TAG}=`b`",
        "insert into s.t select 2",
    ]
    # Anything else, a hook's read of the conf among them, comes after both RESETs.
    handle.cursor()
    handle.execute(f"set {ATTEMPTS}")
    assert sent[6:] == [f"RESET {TAG}", f"RESET {ATTEMPTS}", f"set {ATTEMPTS}"]
    assert not handle.leftovers.deferred and handle.leftovers.clean


def test_a_merge_after_a_strict_write_runs_with_the_servers_attempts(sent):
    fence = FenceSql(Manager(wrapper(FakePyhive())))
    strict_write(fence, "a", "insert into s.t select 1")
    fence.set_session_conf(TAG, "b")  # a merge sets only its tag
    fence.execute("merge into s.t using v on false when not matched then insert *")
    assert sent[3:] == [
        f"SET {TAG}=`b`",
        f"RESET {ATTEMPTS}",
        "merge into s.t using v on false when not matched then insert *",
    ]


def test_a_label_to_put_back_and_a_reset_the_fence_did_not_set_go_at_once(sent):
    handle = wrapper(FakePyhive())
    fence = FenceSql(Manager(handle))
    fence.set_session_conf(TAG, "tag")
    fence.execute("insert into s.t select 1")
    fence.set_session_conf(TAG, "audit")  # the label the session had before the fence's tag
    fence.set_session_conf(ATTEMPTS, None)  # no SET of the fence's before it here
    assert sent[2:] == [f"SET {TAG}=`audit`", f"RESET {ATTEMPTS}"]
    assert not handle.leftovers.deferred


def test_a_session_with_resets_waiting_that_left_something_else_is_closed(sent):
    pyhive = FakePyhive()
    handle = wrapper(pyhive)
    strict_write(FenceSql(Manager(handle)), "a", "insert into s.t select 1")
    handle.leftovers.saw("create temporary view v as select 1")
    handle.close()
    assert pyhive.closed


def test_a_reset_that_failed_stays_waiting_and_nothing_goes_out_before_it(monkeypatch, sent):
    handle = wrapper(FakePyhive())
    strict_write(FenceSql(Manager(handle)), "a", "insert into s.t select 1")

    def lost(self, sql, bindings):
        sent.append(sql)
        raise EOFError("connection lost")

    monkeypatch.setattr(PyhiveConnectionWrapper, "_execute_with_polling", lost)
    handle.query_retries = 0
    with pytest.raises(DbtRuntimeError) as failed:
        handle.execute("insert into other.t select 1")
    assert failed.value.msg.startswith(
        f"RESET {TAG} failed on this Thrift session, so the statement after it was not sent"
    )
    assert sent[3:] == [f"RESET {TAG}"]  # the insert was never sent
    assert set(handle.leftovers.deferred) == {TAG, ATTEMPTS}  # both still waiting
    assert not handle.leftovers.clean  # and the session is not kept


def test_a_waiting_reset_of_a_key_the_runs_hooks_may_have_set_closes_the_session(sent):
    handle = wrapper(FakePyhive())
    handle.leftovers.replaying = True
    handle.leftovers.saw("execute immediate 'set spark.databricks.delta.maxCommitAttempts=50'")
    handle.leftovers.replaying = False
    strict_write(FenceSql(Manager(handle)), "a", "insert into s.t select 1")
    assert handle.leftovers.deferred and not handle.leftovers.clean


def test_a_set_that_failed_leaves_the_reset_waiting(monkeypatch, sent):
    handle = wrapper(FakePyhive())
    fence = FenceSql(Manager(handle))
    strict_write(fence, "a", "insert into s.t select 1")

    def refused(self, sql, bindings):
        raise DbtRuntimeError("SET refused")

    monkeypatch.setattr(PyhiveConnectionWrapper, "_execute_with_polling", refused)
    with pytest.raises(DbtRuntimeError):
        fence.set_session_conf(TAG, "b")
    assert handle.leftovers.deferred == {TAG: "a", ATTEMPTS: "0"}


def test_the_runs_hook_statements_are_replayed_after_the_waiting_resets(monkeypatch, sent):
    handle = wrapper(FakePyhive())
    strict_write(FenceSql(Manager(handle)), "a", "insert into s.t select 1")
    manager = object.__new__(FencedSparkConnectionManager)
    monkeypatch.setattr(manager, "get_thread_connection", lambda: SimpleNamespace(handle=handle))

    def add_query(self, sql, auto_begin=True):
        handle.fence_own = True  # as inside the fence's own read that primes the session
        handle.execute(sql)

    monkeypatch.setattr(SparkConnectionManager, "add_query", add_query)
    manager._replay("set spark.sql.shuffle.partitions=7")
    assert sent[3:] == [f"RESET {TAG}", f"RESET {ATTEMPTS}", "set spark.sql.shuffle.partitions=7"]
    assert not handle.leftovers._theirs_unread  # the RESETs were not taken for the hooks
    assert not handle.leftovers.deferred


def test_a_waiting_reset_ahead_of_the_fences_write_keeps_the_profiles_retries(monkeypatch, sent):
    handle = wrapper(FakePyhive())
    handle.query_retries = 1
    fence = FenceSql(Manager(handle))
    strict_write(fence, "a", "insert into s.t select 1")
    fence.set_session_conf(TAG, "b")  # a merge sets only its tag
    lost: list[str] = []

    def lost_once(self, sql, bindings):
        sent.append(sql)
        if sql.startswith("RESET") and not lost:
            lost.append(sql)
            raise EOFError("connection lost")

    monkeypatch.setattr(PyhiveConnectionWrapper, "_execute_with_polling", lost_once)
    monkeypatch.setattr(spark_connections.time, "sleep", lambda seconds: None)
    manager = object.__new__(FencedSparkConnectionManager)
    monkeypatch.setattr(manager, "get_thread_connection", lambda: SimpleNamespace(handle=handle))
    merge = "merge into s.t using v on false when not matched then insert *"
    with manager.single_attempt():
        assert handle.query_retries == 0  # the write itself is sent once
        fence.execute(merge)
    assert sent[3:] == [f"SET {TAG}=`b`", f"RESET {ATTEMPTS}", f"RESET {ATTEMPTS}", merge]
    assert handle.query_retries == 1 and not handle.leftovers.deferred


def test_a_kept_sessions_waiting_reset_opens_a_cursor_if_none_is_open(monkeypatch, sent):
    pyhive = FakePyhive()
    handle = wrapper(pyhive)
    handle.leftovers.deferred[ATTEMPTS] = "0"
    handle.reused()  # no cursor until dbt opens one for its statement
    manager = object.__new__(FencedSparkConnectionManager)
    monkeypatch.setattr(manager, "get_thread_connection", lambda: SimpleNamespace(handle=handle))
    with manager.single_attempt():
        pass
    assert sent == [f"RESET {ATTEMPTS}"] and len(pyhive.cursors) == 1
