"""Thrift's connection wrapper: dbt-spark's polling with a backoff from 10 ms, the statements
answered at once (no job, never long), and a session that left nothing kept for a later node
(thrift.py)."""

import threading
from typing import Any

from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark import connections as spark_connections
from dbt.adapters.spark.connections import PyhiveConnectionWrapper
from dbt_common.exceptions import DbtDatabaseError, DbtRuntimeError

from dbt.adapters.fenced_spark import thrift
from dbt.adapters.fenced_spark.run_state import leading_words

logger = AdapterLogger("FencedSpark")

# Whether the connection this thread just closed kept its Thrift session: once kept, another
# thread may already serve from it.
closing = threading.local()
# Statements that run no Spark job and cannot run long are answered over Thrift inside the
# ExecuteStatement call (runAsync=false), on the thread serving the connection. In the
# background each would start on a thread new to Hive's pool (it grows to 100 threads before
# reusing one and lets idle ones go after 10 s), whose first metastore or file-system lookup
# costs 15-25 ms. Not SHOW (SHOW TABLE EXTENDED of a big schema takes minutes), SET VAR (runs
# its query), SET CATALOG (may start a catalog plugin), DESCRIBE of a query (may infer a
# schema), DESCRIBE HISTORY or DETAIL (may run a job): one long request is what polling avoids.
_AT_ONCE = {"SET", "RESET", "DESCRIBE", "DESC"}
_NOT_AT_ONCE = {
    *("VAR", "VARIABLE", "CATALOG", "QUERY", "HISTORY", "DETAIL"),
    *("SELECT", "WITH", "FROM", "VALUES", "MAP", "REDUCE", "("),
}


def answered_at_once(sql: str) -> bool:
    first, _, second = leading_words(sql, 2).upper().partition(" ")
    # `|>`: a query in pipe syntax (DESCRIBE TABLE t |> WHERE ...)
    return first in _AT_ONCE and second not in _NOT_AT_ONCE and "|>" not in sql


class BackoffPyhiveConnectionWrapper(PyhiveConnectionWrapper):
    """dbt-spark sleeps `poll_interval` (5 s by default) before it looks again at a statement
    still running at its first poll, though most finish within milliseconds. Its loop reads
    `self.poll_interval` for each sleep: here that read is 10 ms, doubling up to the profile's
    `poll_interval`, the ceiling. `query_timeout` and `query_retries` work as in dbt-spark."""

    FIRST = 0.01

    def __init__(
        self,
        *args: Any,
        pool: str | None = None,
        profile_confs: Any = (),
        **kwargs: Any,
    ) -> None:
        self._next = self.FIRST
        self.read_at_once = False  # the fence's short statements (the manager's at_once)
        self.fence_own = False  # the fence's reads and conf SETs (the manager's fence_own)
        self._at_once = threading.Lock()  # orders a cancel from another thread with the call
        self._running_at_once = self._cancelled = self._lost = False
        # The session is kept for a later node if what ran in it left nothing (thrift.py).
        self.pool = pool
        self.leftovers = thrift.Leftovers(profile_confs)
        self.kept_at = 0.0
        super().__init__(*args, **kwargs)

    def cursor(self) -> "BackoffPyhiveConnectionWrapper":
        # dbt-spark opens a pyhive cursor per statement and leaves the last one open: its
        # operation lived until the session closed, and a kept session lives on.
        self._close_cursor()
        return super().cursor()  # type: ignore[return-value]

    def _close_cursor(self) -> None:
        if self._cursor:
            try:
                self._cursor.close()
            except Exception as exc:
                logger.debug(f"Exception while closing cursor: {exc}")
                self.leftovers.failed(exc)
            self._cursor = None

    def fetchall(self) -> Any:
        # A fetch cut off midway leaves the session's socket in an unknown state.
        try:
            return super().fetchall()
        except BaseException as exc:
            self.leftovers.failed(exc)
            raise

    @property
    def description(self) -> Any:
        try:
            return super().description
        except BaseException as exc:
            self.leftovers.failed(exc)
            raise

    def reused(self) -> "BackoffPyhiveConnectionWrapper":
        # A kept session for a new connection: nothing of the last one's statements carries.
        self._cursor = None
        self._next = self.FIRST
        self.read_at_once = self.fence_own = False
        return self

    def execute(self, sql: str, bindings: Any = None) -> None:
        # No statement but the fence's own may commit under its tag or read its confs.
        if not self.fence_own:
            self.send_deferred()
        super().execute(sql, bindings)

    def send_deferred(self) -> None:
        """The RESETs the fence's last write left waiting (thrift.Leftovers.deferred). One that
        fails stays waiting, so whatever is sent next tries it first again."""
        if self.leftovers.deferred and self._cursor is None:
            self.cursor()  # sent before dbt opened a cursor (a kept session's first statement)
        while self.leftovers.deferred:
            key = min(self.leftovers.deferred)
            logger.debug(f"fenced_spark: RESET {key}, left by the fence's last write, goes first")
            try:
                super().execute(f"RESET {key}")
            except Exception as exc:
                raise DbtRuntimeError(
                    f"RESET {key} failed on this Thrift session, so the statement after it was "
                    f"not sent: the fence's last write set {key}, and nothing but the fence's "
                    f"own reads runs in this session until it is reset. "
                    f"{getattr(exc, 'msg', exc)}"
                ) from exc
            del self.leftovers.deferred[key]

    def close(self) -> None:
        # dbt closes a connection after each node: a session that left nothing is kept.
        if not self.leftovers.clean:
            super().close()
            return
        self._close_cursor()
        closing.kept = thrift.keep(self)
        if not closing.kept:
            super().close()

    @property  # type: ignore[override]
    def poll_interval(self) -> float:
        delay, self._next = self._next, min(self._next * 2, self.ceiling)
        return min(delay, self.ceiling)

    @poll_interval.setter
    def poll_interval(self, value: float) -> None:
        self.ceiling = value

    def _execute_with_polling(self, sql: str, bindings: Any) -> None:
        self._next = self.FIRST
        # With a query_timeout every statement is polled: only a poll can time one out. After a
        # lost connection, too: a request that long is what polling keeps short.
        at_once = self.read_at_once or answered_at_once(sql)
        self.leftovers.saw(sql)
        try:
            if at_once and self.query_timeout is None and not self._lost:
                self._execute_at_once(sql, bindings)
            else:
                super()._execute_with_polling(sql, bindings)
        except BaseException as exc:
            # A retry after a lost connection waits the whole poll_interval, as in dbt-spark.
            self._next = self.ceiling
            self._lost = self._lost or isinstance(exc, spark_connections.CONNECTION_LOST_EXCEPTIONS)
            self.leftovers.failed(exc)
            raise
        self.leftovers.ran(sql)

    def _execute_at_once(self, sql: str, bindings: Any) -> None:
        # dbt-spark's own execute, poll and state checks, around a call answered at once: its
        # one poll then finds the statement ended (or ended by the server's own timeout).
        with self._at_once:
            self._running_at_once, self._cancelled = True, False
        cursor, self._cursor = self._cursor, _AnsweredAtOnce(self._cursor)
        try:
            super()._execute_with_polling(sql, bindings)
        finally:
            self._cursor = cursor
            with self._at_once:
                self._running_at_once, cancelled = False, self._cancelled
        if cancelled:
            # as a cancelled statement fails when polled
            raise DbtDatabaseError("Query failed with status: CANCELED_STATE")

    def cancel(self) -> None:
        # A statement run at once has no handle to cancel before its answer, and its
        # connection is busy with the call: it fails as cancelled when its answer comes.
        self.leftovers.failed()
        with self._at_once:
            if self._running_at_once:
                self._cancelled = True
                return
        super().cancel()


class _AnsweredAtOnce:
    """A pyhive cursor whose execute runs with runAsync=false: the call returns when the
    statement has ended."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def execute(self, sql: str, bindings: Any, async_: bool) -> None:
        try:
            self._cursor.execute(sql, bindings, async_=False)
        except Exception as exc:
            # The server's refusal comes with the call's answer: raised as a polled one is.
            status = getattr(exc.args[0], "status", None) if exc.args else None
            message = getattr(status, "errorMessage", None)
            if not message:
                raise
            raise DbtDatabaseError(message) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)
