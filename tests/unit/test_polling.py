"""Over Thrift, a statement still running at its first poll is polled again after 10 ms,
doubling up to the profile's poll_interval, not after poll_interval itself (no server: a
cursor that reports RUNNING a given number of times)."""

from types import SimpleNamespace

import pytest
from dbt.adapters.spark import connections as spark_connections
from TCLIService.ttypes import TOperationState

from dbt.adapters.fenced_spark.connections import BackoffPyhiveConnectionWrapper


class Cursor:
    def __init__(self, running: int, lost_once: bool = False) -> None:
        self.running, self.lost_once, self.polls = running, lost_once, 0

    def execute(self, sql, bindings, async_):
        self.polls = 0

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
