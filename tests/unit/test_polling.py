"""Over Thrift, a statement still running at its first poll is polled again after 10 ms,
doubling up to the profile's poll_interval, not after poll_interval itself; statements that
read or set only metadata are answered in the ExecuteStatement call (no server: a cursor that
reports RUNNING a given number of times)."""

from types import SimpleNamespace

import pytest
from dbt.adapters.spark import connections as spark_connections
from dbt_common.exceptions import DbtDatabaseError
from TCLIService.ttypes import TOperationState

from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager
from dbt.adapters.fenced_spark.fence_sql import FenceSql
from dbt.adapters.fenced_spark.nodes import Nodes
from dbt.adapters.fenced_spark.polling import BackoffPyhiveConnectionWrapper
from dbt.adapters.fenced_spark.relation import FencedSparkRelation
from dbt.adapters.fenced_spark.staging import Staging


class Refused(Exception):
    """pyhive's OperationalError: the server's response, with its status."""


class Cursor:
    def __init__(
        self, running: int, lost_once: bool = False, refuse: str = "", ended: str = ""
    ) -> None:
        self.running, self.lost_once, self.polls = running, lost_once, 0
        self.refuse, self.ran, self.cancelled = refuse, [], 0
        # The state a statement answered at once ends in (the server's own timeout).
        self.ended = ended
        self.during = lambda: None  # what another thread does while the call waits

    def execute(self, sql, bindings, async_):
        self.polls = 0
        self.ran.append((sql, "polled" if async_ else "at once"))
        if async_:
            return
        self.during()
        self.running = 0  # answered: finished, or ended as the server ended it
        if self.refuse:
            status = SimpleNamespace(errorMessage=self.refuse)
            raise Refused(SimpleNamespace(status=status))

    def cancel(self):
        self.cancelled += 1

    def poll(self):
        self.polls += 1
        if self.lost_once:
            self.lost_once = False
            raise ConnectionResetError("the server went away")
        state = (
            TOperationState.RUNNING_STATE
            if self.polls <= self.running
            else TOperationState.FINISHED_STATE
        )
        if self.ended and state == TOperationState.FINISHED_STATE:
            state = getattr(TOperationState, self.ended)
        if self.refuse and state == TOperationState.FINISHED_STATE:
            return SimpleNamespace(
                operationState=TOperationState.ERROR_STATE, errorMessage=self.refuse
            )
        return SimpleNamespace(operationState=state, errorMessage=None)


class Handle:
    def __init__(self, cursor: Cursor) -> None:
        self._cursor = cursor

    def cursor(self) -> Cursor:
        return self._cursor


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(spark_connections.time, "sleep", slept.append)
    return slept


def wrapper(cursor: Cursor, poll_interval: float = 5) -> BackoffPyhiveConnectionWrapper:
    wrapped = BackoffPyhiveConnectionWrapper(Handle(cursor), poll_interval=poll_interval)
    return wrapped.cursor()


def test_sleeps_back_off_from_10_ms_to_the_poll_interval(sleeps):
    wrapper(Cursor(running=12), poll_interval=1).execute("select 1")
    assert sleeps == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1, 1, 1, 1, 1]


def test_every_statement_starts_from_10_ms_again(sleeps):
    polled = wrapper(Cursor(running=3))
    polled.execute("select 1")
    polled.execute("select 2")
    assert sleeps == [0.01, 0.02, 0.04] * 2


def test_a_retry_after_a_lost_connection_waits_the_whole_poll_interval(sleeps):
    wrapper(Cursor(running=1, lost_once=True), poll_interval=3).execute("select 1")
    assert sleeps == [3, 0.01]  # dbt-spark's wait before its retry, then the retry's backoff


def test_query_timeout_still_ends_a_long_statement(sleeps, monkeypatch):
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(spark_connections.time, "time", lambda: next(clock))
    polled = BackoffPyhiveConnectionWrapper(
        Handle(Cursor(running=100)), poll_interval=5, query_timeout=25
    ).cursor()
    with pytest.raises(Exception, match="timeout of 25 seconds"):
        polled.execute("select 1")


@pytest.mark.parametrize(
    "sql, how",
    [
        ("SET spark.databricks.delta.commitInfo.userMetadata", "at once"),
        ("reset spark.databricks.delta.commitInfo.userMetadata", "at once"),
        ("describe extended `s`.`t`", "at once"),
        ("/* dbt's comment */ DESC s.t", "at once"),
        ("describe table s.t", "at once"),
        # statements that may run long: one long request is what polling avoids
        ("merge into s.t using v on v.id = t.id when matched then update set *", "polled"),
        ("create or replace temporary view v as select * from json.`/landing`", "polled"),
        ("select * from s.t", "polled"),
        ("insert into s.t select * from v", "polled"),
        ("show table extended in s like '*'", "polled"),
        ("EXPLAIN SELECT * FROM json.`/landing`", "polled"),
        ("SET VAR v = (SELECT max(id) FROM s.t)", "polled"),
        ("set /* a comment */ variable v = 1", "polled"),
        ("DESCRIBE QUERY SELECT * FROM json.`/landing`", "polled"),
        ("describe select * from s.t", "polled"),
        ("DESCRIBE HISTORY s.t", "polled"),
        ("describe detail s.t", "polled"),
        ("DESC TABLE s.t |> WHERE id > 1", "polled"),
        ("SET CATALOG glue", "polled"),
    ],
)
def test_metadata_statements_are_answered_at_once(sleeps, sql, how):
    cursor = Cursor(running=1)
    wrapper(cursor).execute(sql)
    assert cursor.ran == [(sql, how)]
    assert sleeps == ([] if how == "at once" else [0.01])


def test_the_fences_short_reads_are_answered_at_once(sleeps):
    cursor = Cursor(running=3)
    polled = wrapper(cursor)
    polled.read_at_once = True
    polled.execute("SELECT path FROM binaryFile.`/t/_delta_log/{0.json}`")
    assert cursor.ran[-1][1] == "at once"


def test_with_a_query_timeout_every_statement_is_polled(sleeps):
    cursor = Cursor(running=1)
    polled = BackoffPyhiveConnectionWrapper(Handle(cursor), poll_interval=5, query_timeout=60)
    polled.cursor().execute("SET x")
    assert cursor.ran == [("SET x", "polled")]


def test_a_refusal_at_once_raises_as_a_polled_one_does(sleeps):
    message = "[TABLE_OR_VIEW_NOT_FOUND] The table or view `s`.`t` cannot be found."
    with pytest.raises(DbtDatabaseError) as at_once:
        wrapper(Cursor(running=0, refuse=message)).execute("describe extended s.t")
    with pytest.raises(DbtDatabaseError) as polled:
        wrapper(Cursor(running=0, refuse=message)).execute("select * from s.t")
    assert str(at_once.value) == str(polled.value)
    assert message in str(at_once.value)


def test_a_statement_the_server_timed_out_fails_as_a_polled_one_does(sleeps):
    # spark.sql.thriftServer.queryTimeout ends it TIMEDOUT; the call itself reports success.
    with pytest.raises(DbtDatabaseError) as at_once:
        wrapper(Cursor(running=0, ended="TIMEDOUT_STATE")).execute("describe extended s.t")
    with pytest.raises(DbtDatabaseError) as polled:
        wrapper(Cursor(running=0, ended="TIMEDOUT_STATE")).execute("select * from s.t")
    assert str(at_once.value) == str(polled.value)
    assert "TIMEDOUT_STATE" in str(at_once.value)


def test_after_a_lost_connection_at_once_the_retry_and_the_rest_are_polled(sleeps):
    # A request that long may be what a proxy cut: polling keeps each one short.
    class Lost(Cursor):
        def execute(self, sql, bindings, async_):
            super().execute(sql, bindings, async_)
            if len(self.ran) == 1:
                raise ConnectionResetError("the server went away")

    cursor = Lost(running=0)
    polled = wrapper(cursor, poll_interval=3)
    polled.execute("SET x")
    polled.execute("SET y")
    assert cursor.ran == [("SET x", "at once"), ("SET x", "polled"), ("SET y", "polled")]
    assert sleeps == [3]


def test_a_cancel_while_a_statement_runs_at_once_fails_it_when_answered(sleeps):
    # Ctrl-C from dbt's main thread: no handle to cancel yet, and the connection is busy.
    cursor = Cursor(running=0)
    polled = wrapper(cursor)
    cursor.during = polled.cancel
    with pytest.raises(DbtDatabaseError, match="CANCELED_STATE"):
        polled.execute("SET spark.databricks.delta.commitInfo.userMetadata=x")
    assert cursor.cancelled == 0
    cursor.during = lambda: None
    polled.execute("SET y")  # the next statement is not taken for cancelled
    polled.cancel()  # nothing running at once: the operation is cancelled
    assert cursor.cancelled == 1


def manager_on(handle, primed: list) -> FencedSparkConnectionManager:
    manager = FencedSparkConnectionManager.__new__(FencedSparkConnectionManager)
    manager.get_thread_connection = lambda: SimpleNamespace(handle=handle)  # type: ignore[method-assign]
    manager.prime = lambda: primed.append(handle.read_at_once)  # type: ignore[method-assign]
    return manager


def test_the_runs_hook_statements_replayed_first_are_not_the_fences_short_reads(sleeps):
    # A new session gets the run's hook statements before the fence's read: they are polled.
    handle, primed = wrapper(Cursor(running=0)), []
    with manager_on(handle, primed).at_once():
        assert handle.read_at_once
    assert primed == [False]
    assert not handle.read_at_once


def test_a_nested_polled_read_gives_the_outer_one_back(sleeps):
    handle = wrapper(Cursor(running=0))
    manager = manager_on(handle, [])
    with manager.at_once():
        with manager.at_once(False):
            assert not handle.read_at_once
        assert handle.read_at_once


@pytest.mark.parametrize(
    "sql, at_once",
    [
        ("EXPLAIN SELECT path FROM binaryFile.`/t/_delta_log/{0.json,1.json}`", True),
        ("SHOW TBLPROPERTIES `s`.`t`", True),
        # jobs, which may wait behind others' on a shared cluster
        ("SELECT path, content FROM binaryFile.`/t/_delta_log/{0.json,1.json}`", False),
        ("SELECT 1 FROM (SELECT * FROM `s`.`t` VERSION AS OF 3) LIMIT 1", False),
    ],
)
def test_the_fence_answers_at_once_only_what_runs_no_spark_job(sql, at_once):
    asked = []
    connections = SimpleNamespace(fetch_rows=lambda sql, short: asked.append(short) or ([], []))
    FenceSql(connections).fetch(sql)  # type: ignore[arg-type]
    assert asked == [at_once]


STAGING = FencedSparkRelation.create(schema="s", identifier="m").staging_view("run")


def dropping(handle, staged_on, refuse: bool = False) -> tuple[Staging, list]:
    """The staging view's cleanup over a Thrift handle, recording what it sends and whether at
    once."""
    sent: list = []
    manager = manager_on(handle, [])

    def add_query(sql, auto_begin=True):
        sent.append((sql, handle.read_at_once))
        if refuse:
            raise DbtDatabaseError("Query failed with status: CANCELED_STATE")

    manager.add_query = add_query  # type: ignore[method-assign]
    nodes = Nodes(None, manager)
    nodes.node = lambda: SimpleNamespace(staged_on=staged_on, source=None)  # type: ignore[method-assign,assignment,return-value]
    staging = Staging(nodes, None, None, lambda: "thrift", None)  # type: ignore[arg-type]
    return staging, sent


def test_the_staging_view_is_dropped_at_once_on_the_session_that_holds_it(sleeps):
    handle = wrapper(Cursor(running=0))
    staging, sent = dropping(handle, staged_on=handle)
    staging.drop(STAGING)
    assert sent == [(f"DROP VIEW IF EXISTS {STAGING.render()}", True)]
    assert not handle.read_at_once


def test_no_drop_after_a_reconnect_or_a_failure_and_a_failed_drop_fails_nothing(sleeps):
    handle = wrapper(Cursor(running=0))
    # After a reconnect the name could find a permanent view of the session's schema.
    staging, sent = dropping(handle, staged_on=wrapper(Cursor(running=0)))
    staging.drop(STAGING)
    # A failed node's session may be cancelled or lost: it goes with its view.
    staging, failed = dropping(handle, staged_on=handle)
    staging.drop(STAGING, failed=True)
    assert sent == failed == []
    # The write's verdict is in: a cancel landing on the DROP does not make it a failure.
    staging, sent = dropping(handle, staged_on=handle, refuse=True)
    staging.drop(STAGING)
    assert len(sent) == 1
