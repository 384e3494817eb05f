import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.events.types import SQLQuery, SQLQueryStatus
from dbt.adapters.spark import connections as spark_connections
from dbt.adapters.spark.connections import (
    PyhiveConnectionWrapper,
    SparkConnectionManager,
    SparkConnectionMethod,
)
from dbt.adapters.spark.session import Cursor, SessionConnectionWrapper
from dbt_common.events.contextvars import get_node_info
from dbt_common.events.functions import fire_event
from dbt_common.exceptions import DbtDatabaseError, DbtRuntimeError
from dbt_common.utils import cast_to_str

from dbt.adapters.fenced_spark import connect, session, thrift
from dbt.adapters.fenced_spark.credentials import FencedConnectionMethod
from dbt.adapters.fenced_spark.run_state import (
    RunState,
    first_word,
    is_run_connection,
    leading_words,
    without_leading_comments,
)

logger = AdapterLogger("FencedSpark")

T = TypeVar("T")

# Statements that change no table (nor do the session's, run_state.py, but USE and SET
# CATALOG, after which a name may mean another table): what a DESCRIBE of a table said before
# them still holds.
_NO_TABLE_CHANGE = {"SELECT", "EXPLAIN", "DESCRIBE", "DESC", "SHOW", "SET", "RESET"}
_NAMES_ANOTHER = re.compile(r"(USE|SET\s+CATALOG)\b", re.I)
# Set on a connection's handle, which lives exactly as long as its session.
_MAY_HAVE_COMMITTED = "_fenced_may_have_committed"
# Whether the connection this thread just closed kept its Thrift session: once kept, another
# thread may already serve from it.
_closing = threading.local()
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


class SessionCursor(Cursor):
    # dbt-spark's cursor runs on the process-wide session; ours runs on the connection's own.
    def __init__(self, spark: Any) -> None:
        super().__init__()
        self._spark = spark

    def execute(self, sql: str, *parameters: Any) -> None:
        if parameters:
            sql = sql % parameters
        with spark_errors():
            self._df = self._spark.sql(sql)


@contextmanager
def spark_errors() -> Iterator[None]:
    """Spark's failures as DbtRuntimeError, carrying the JVM's own message."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        yield
    except PySparkException as exc:
        # Over Connect the message carries the server's JVM stack: the user gets the words.
        raise DbtRuntimeError(connect.message(exc)) from exc
    except Py4JJavaError as exc:
        # PySpark 4.1 formats errors with Spark's error catalogue, which lacks Delta's classes
        # (INTERNAL_ERROR "Cannot find main error class"); the JVM exception it was formatting
        # is the context, and its getMessage() is Delta's real message.
        original = exc.__context__ if isinstance(exc.__context__, Py4JJavaError) else exc
        raise DbtRuntimeError(str(original.java_exception.getMessage())) from exc


class SessionHandle:
    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def cursor(self) -> SessionCursor:
        return SessionCursor(self.spark)

    def close(self) -> None:
        pass  # the embedded session lives as long as the process


class ConnectHandle(SessionHandle):
    def __init__(self, spark: Any, url: str) -> None:
        super().__init__(spark)
        self.leftovers = connect.Leftovers(url)
        self.read_at_once = False  # the fence's short statements (the manager's at_once)

    def cursor(self) -> SessionCursor:
        return ConnectCursor(self)

    def close(self) -> None:
        # Kept for the next node where it can be made new (connect.py): a new session would
        # compile every query's code again.
        connect.release(self.spark, self.leftovers)


class ConnectCursor(SessionCursor):
    def __init__(self, handle: ConnectHandle) -> None:
        super().__init__(handle.spark)
        self._handle = handle
        self._leftovers = handle.leftovers
        self._short = False

    def execute(self, sql: str, *parameters: Any) -> None:
        # What the statement leaves decides whether the session may serve the next node.
        self._leftovers.saw(sql)
        self._short = answered_at_once(sql) or self._handle.read_at_once
        with self._ends_reuse_if_it_fails(), connect.short_call(self._spark, self._short):
            super().execute(sql, *parameters)

    def fetchall(self) -> Any:
        with self._ends_reuse_if_it_fails(), connect.short_call(self._spark, self._short):
            return super().fetchall()

    def fetchone(self) -> Any:
        with self._ends_reuse_if_it_fails(), connect.short_call(self._spark, self._short):
            return super().fetchone()

    @contextmanager
    def _ends_reuse_if_it_fails(self) -> Iterator[None]:
        try:
            yield
        except BaseException as exc:
            self._leftovers.failed(exc)
            raise


class FencedSessionConnectionWrapper(SessionConnectionWrapper):
    handle: SessionHandle  # type: ignore[assignment]

    def close(self) -> None:
        # dbt closes a connection after each node: a Connect session is released with it.
        super().close()
        self.handle.close()

    def fetchall(self) -> list[Any] | None:
        # The session cursor already raises DbtRuntimeError; lazy queries fail here instead.
        with spark_errors():
            return super().fetchall()

    @classmethod
    def _fix_binding(cls, value: Any) -> str | float:
        # dbt-spark renders None as 'None' and leaves quotes unescaped, so seeds load a blank
        # cell as the string 'None' and break on O'Brien.
        if value is None:
            return "null"
        if isinstance(value, str):
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return super()._fix_binding(value)


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
        _closing.kept = thrift.keep(self)
        if not _closing.kept:
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


class FencedSparkConnectionManager(SparkConnectionManager):
    TYPE = "fenced_spark"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run_state = RunState()
        self._changes = threading.local()

    def add_query(self, sql: str, *args: Any, **kwargs: Any) -> tuple[Connection, Any]:
        # Each connection has its own session: what the run's hooks set is replayed into it
        # first (run_state.py), and a hook's own session statement is recorded for the others.
        connection = self.get_thread_connection()
        self.run_state.prime(connection, self._replay)
        if _NAMES_ANOTHER.match(without_leading_comments(sql)) or (
            first_word(sql) not in _NO_TABLE_CHANGE and not self.run_state.session_statement(sql)
        ):
            self.may_have_changed_tables()
        self.sent_one()
        result = super().add_query(sql, *args, **kwargs)
        self.run_state.record(connection, sql)
        return result

    def statements_sent(self) -> int:
        """How many statements, conf calls, frame reads and Python model runs this thread has
        sent (tried): whether anything ran between two points."""
        return int(getattr(self._changes, "sent", 0))

    def sent_one(self) -> None:
        self._changes.sent = self.statements_sent() + 1

    def table_changes(self) -> int:
        """How many statements (or Python model runs) on this thread could have changed a
        table: a table's columns read when it was N are still its columns while it is N."""
        return int(getattr(self._changes, "count", 0))

    def may_have_changed_tables(self) -> None:
        self.sent_one()
        self._changes.count = self.table_changes() + 1
        setattr(self.get_thread_connection().handle, _MAY_HAVE_COMMITTED, True)

    def session_may_have_committed(self) -> bool:
        """Whether this connection's session has run anything that could commit to a table,
        in this node or an earlier one it served (thrift.py). Known only over Thrift, whose
        handle lives as long as its session; any other (an ODBC driver may pool sessions)
        may have."""
        handle = self.get_thread_connection().handle
        if not isinstance(handle, BackoffPyhiveConnectionWrapper):
            return True
        return bool(getattr(handle, _MAY_HAVE_COMMITTED, False))

    def prime(self) -> None:
        # Before a call on this thread's session that is no statement (the fence's confs): the
        # run's hook statements first, as add_query does, or a replayed SET would undo ours.
        self.run_state.prime(self.get_thread_connection(), self._replay)

    def cleanup_all(self) -> None:
        # The Connect and Thrift sessions kept for a next node end with the invocation.
        super().cleanup_all()
        connect.release_kept()
        thrift.release_kept()

    def keep_no_session(self, failed: BaseException | None = None) -> None:
        """This connection's Connect or Thrift session is not kept for another node: something
        ran in it whose traces cannot be cleared (a Python model; a session lost and replaced);
        with `failed`, only if that call got no answer from the server (Connect)."""
        leftovers = self._leftovers()
        if leftovers is None:
            return
        if failed is None:
            leftovers.reusable = False
        else:
            leftovers.failed(failed)

    def _leftovers(self) -> connect.Leftovers | thrift.Leftovers | None:
        # This thread's Connect or Thrift session's; None for the embedded session.
        handle = self.get_thread_connection().handle
        if isinstance(handle, BackoffPyhiveConnectionWrapper):
            return handle.leftovers
        handle = getattr(handle, "handle", None)
        return handle.leftovers if isinstance(handle, ConnectHandle) else None

    @contextmanager
    def exception_handler(self, sql: str) -> Iterator[None]:
        # dbt-spark re-raises every error as a new DbtRuntimeError, whose text nests one more
        # "Runtime Error" header; one that already is one says what happened as it is.
        try:
            with super().exception_handler(sql):
                yield
        except DbtRuntimeError as exc:
            original = exc.__context__
            if isinstance(original, DbtRuntimeError):
                raise original from original.__cause__
            raise

    def _replay(self, sql: str) -> None:
        # A statement that no longer runs (a temp view over a table a model has dropped since)
        # must not fail models that do not use it; one that does fails on its own.
        leftovers = self._leftovers()
        handle = self.get_thread_connection().handle
        if isinstance(handle, BackoffPyhiveConnectionWrapper):
            # Never after a hook's statement: the RESETs the fence's last write left waiting.
            handle.send_deferred()
        try:
            if leftovers is not None:
                leftovers.replaying = True
            super().add_query(sql, auto_begin=False)
        except DbtRuntimeError as exc:
            logger.warning(
                f"fenced_spark: the run's hook statement could not be replayed into this "
                f"model's session (docs/connections.md, Run-level settings); the model runs "
                f"without it: "
                f"{sql.strip()}\n{exc.msg}"
            )
        finally:
            if leftovers is not None:
                leftovers.replaying = False

    @classmethod
    def _close_handle(cls, connection: Connection) -> None:
        # on-run-start/-end and run-operation statements often change their session: not kept.
        handle = connection.handle
        if isinstance(handle, BackoffPyhiveConnectionWrapper) and is_run_connection(
            connection.name
        ):
            handle.leftovers.reusable = False
        _closing.kept = False
        super()._close_handle(connection)
        if _closing.kept:
            connection.handle = None  # kept for another connection: no longer this one's

    @classmethod
    def open(cls, connection: Connection, new: bool = False) -> Connection:
        # `session` and `connect` are ours: a session per connection, on the embedded Delta JVM
        # or on a Spark Connect server; dbt-spark opens the others.
        if connection.state == ConnectionState.OPEN:
            return connection
        creds = connection.credentials
        if creds.method == SparkConnectionMethod.SESSION:
            handle = SessionHandle(session.connection_session(creds))
        elif creds.method == FencedConnectionMethod.CONNECT:
            spark = connect.open_session(creds, connection.name)
            handle = ConnectHandle(spark, str(creds.host))
        else:
            pool = thrift.pool_key(creds)
            kept = None if new else thrift.reuse(pool, connection.name)
            if kept is not None:
                connection.handle = kept.reused()
                connection.state = ConnectionState.OPEN
                return connection
            opened = super().open(connection)
            if type(opened.handle) is PyhiveConnectionWrapper:
                pyhive = opened.handle
                opened.handle = BackoffPyhiveConnectionWrapper(
                    pyhive.handle,
                    poll_interval=pyhive.poll_interval,
                    query_timeout=pyhive.query_timeout,
                    query_retries=pyhive.query_retries,
                    pool=pool,
                    profile_confs=creds.server_side_parameters or {},
                )
            return opened
        connection.handle = FencedSessionConnectionWrapper(handle)  # type: ignore[arg-type]
        connection.state = ConnectionState.OPEN
        return connection

    @contextmanager
    def single_attempt(self) -> Iterator[None]:
        """A fenced write runs exactly once: dbt-spark's query_retries may not replay it."""
        handle = self.get_thread_connection().handle
        if isinstance(handle, BackoffPyhiveConnectionWrapper):
            # The RESETs waiting to go ahead of the write are not the write: they keep retries.
            handle.send_deferred()
        saved = getattr(handle, "query_retries", None)
        if saved is not None:
            handle.query_retries = 0
        try:
            yield
        finally:
            if saved is not None:
                handle.query_retries = saved

    @contextmanager
    def at_once(self, short: bool = True) -> Iterator[None]:
        """The fence's own statements that run no Spark job (its EXPLAINs, a table's
        properties) are answered inside the ExecuteStatement call over Thrift, as SET is, and
        in one plain ExecutePlan stream over Connect (connect.short_call)."""
        handle: Any = self.get_thread_connection().handle
        if not isinstance(handle, BackoffPyhiveConnectionWrapper):
            handle = getattr(handle, "handle", None)
        if not isinstance(handle, (BackoffPyhiveConnectionWrapper, ConnectHandle)):
            yield
            return
        # The run's hook statements a new session gets first are not the fence's.
        self.prime()
        before, handle.read_at_once = handle.read_at_once, short
        try:
            yield
        finally:
            handle.read_at_once = before

    @contextmanager
    def fence_own(self) -> Iterator[None]:
        """The fence's reads and its SETs of its own confs: over Thrift they go ahead of the
        RESETs its last write left waiting (thrift.Leftovers.deferred), as they commit nothing
        and read none of those confs."""
        handle = self.get_thread_connection().handle
        if not isinstance(handle, BackoffPyhiveConnectionWrapper):
            yield
            return
        before, handle.fence_own = handle.fence_own, True
        try:
            yield
        finally:
            handle.fence_own = before

    def on_frames(self, sql: str, read: Callable[[Any], T]) -> T:
        """`read` on the connection's Connect session, with dbt's query log, the run's replayed
        statements and errors as for `sql`, the statement it stands for."""
        connection = self.get_thread_connection()
        self.run_state.prime(connection, self._replay)
        self.sent_one()
        node = get_node_info()
        fire_event(SQLQuery(conn_name=cast_to_str(connection.name), sql=sql, node_info=node))
        started = time.perf_counter()
        handle = connection.handle.handle
        with self.exception_handler(sql), spark_errors():
            try:
                result = read(handle.spark)
            except BaseException as exc:
                handle.leftovers.failed(exc)  # as ConnectCursor's statements do
                raise
        elapsed = time.perf_counter() - started
        fire_event(SQLQueryStatus(status="OK", elapsed=elapsed, node_info=node))
        return result

    def fetch_rows(self, sql: str, at_once: bool = False) -> tuple[list[str], list[Any]]:
        """The fence's reads, raw rows with their column names (Delta's history has maps that
        agate would mangle); they go ahead of the RESETs its last write left waiting."""
        with self.at_once(at_once), self.fence_own():
            _, cursor = self.add_query(sql, auto_begin=False)
        names = [column[0] for column in cursor.description]
        return names, list(cursor.fetchall() or [])
