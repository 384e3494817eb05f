"""dbt's connection manager for the three methods: the embedded session, Thrift and Connect
(their handles in handles.py and polling.py); what the run's statements left in a session,
and the fence's short statements answered at once."""

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.events.types import SQLQuery, SQLQueryStatus
from dbt.adapters.spark.connections import (
    PyhiveConnectionWrapper,
    SparkConnectionManager,
    SparkConnectionMethod,
)
from dbt_common.events.contextvars import get_node_info
from dbt_common.events.functions import fire_event
from dbt_common.exceptions import DbtRuntimeError
from dbt_common.utils import cast_to_str

from dbt.adapters.fenced_spark import connect, polling, session, thrift
from dbt.adapters.fenced_spark.credentials import FencedConnectionMethod
from dbt.adapters.fenced_spark.handles import (
    ConnectHandle,
    FencedSessionConnectionWrapper,
    SessionHandle,
    spark_errors,
)
from dbt.adapters.fenced_spark.polling import BackoffPyhiveConnectionWrapper
from dbt.adapters.fenced_spark.run_state import (
    RunState,
    first_word,
    is_run_connection,
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
        polling.closing.kept = False
        super()._close_handle(connection)
        if polling.closing.kept:
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
