"""The fence's SQL runner over a dbt connection: its statements, history reads and session
confs on the model's own connection, whichever method it is (session, Thrift, Connect)."""

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from dbt.adapters.contracts.connection import ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import connect, thrift
from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager
from dbt.adapters.fenced_spark.fence.delta import sequence
from dbt.adapters.fenced_spark.fence.delta.history import SqlHistory, parse_history
from dbt.adapters.fenced_spark.fence.delta.log_tail import LogTail
from dbt.adapters.fenced_spark.fence.delta.sql_log import SqlLog
from dbt.adapters.fenced_spark.fence.delta.words import (
    LAST_COMMIT,
    MAX_COMMIT_ATTEMPTS,
    USER_METADATA,
)
from dbt.adapters.fenced_spark.fence.history import Commit, HistoryReader
from dbt.adapters.fenced_spark.fence.state import set_conf_sql
from dbt.adapters.fenced_spark.handles import ConnectHandle, SessionHandle, spark_errors
from dbt.adapters.fenced_spark.polling import BackoffPyhiveConnectionWrapper
from dbt.adapters.fenced_spark.run_state import first_word

logger = AdapterLogger("FencedSpark")

# The fence's own statements that run no Spark job (FenceSql.fetch): its EXPLAINs of commit
# files and of its target, SHOW TBLPROPERTIES.
_NO_JOB = {"EXPLAIN", "SHOW"}
# Confs only the fence's own statements set over Thrift: their RESETs may wait (thrift.py).
_DEFERRABLE = (USER_METADATA, MAX_COMMIT_ATTEMPTS, sequence.APP_ID_CONF, sequence.VERSION_CONF)


class FenceSql:
    """The fence's SQL runner: its statements and history reads on the model's connection."""

    def __init__(
        self,
        connections: FencedSparkConnectionManager,
        described: dict[str, tuple[int, Any]] | None = None,
    ) -> None:
        self.connections = connections
        self._before: dict[tuple[int, str], str | None] = {}
        self.described = described

    def execute(self, sql: str) -> None:
        self.connections.add_query(sql, auto_begin=False)

    def history(self, table: str, limit: int) -> list[Commit]:
        names, rows = self.connections.fetch_rows(f"DESCRIBE HISTORY {table} LIMIT {limit}")
        return parse_history(names, rows)

    def fetch(self, sql: str) -> list[Sequence[Any]]:
        # Answered at once over Thrift where no Spark job runs (_NO_JOB); its reads of commit
        # files and of rows are jobs, which may wait behind others' on a shared cluster: polled.
        return list(self.connections.fetch_rows(sql, first_word(sql) in _NO_JOB)[1])

    def any_row(self, sql: str) -> bool:
        return bool(self.fetch(sql))

    def describe(self, table: str) -> list[Sequence[Any]]:
        # dbt-spark's own statement for a table's columns: kept for the node (`described`),
        # it answers dbt-spark's DESCRIBE of the target later in the node (impl.py).
        changes = self.connections.table_changes()
        with self.connections.fence_own():
            _, rows = self.connections.execute(f"describe extended {table}", fetch=True)
        if self.described is not None:
            self.described[table] = (changes, rows)
        return [tuple(row) for row in rows]

    def _handle(self) -> Any:
        # What dbt-spark's connection wrapper holds: ours (session, Connect) or pyhive's.
        return getattr(self.connections.get_thread_connection().handle, "handle", None)

    def _session(self) -> Any:
        handle = self._handle()
        if not isinstance(handle, SessionHandle):
            return None
        self.connections.prime()
        return handle.spark

    def session_conf(self, key: str) -> str | None:
        # SQL's `SET key` redacts values that look secret (a label with "url" in it): the
        # session's own conf is read where there is one.
        spark = self._session()
        if spark is not None:
            value = spark.conf.get(key, None)
            return None if value is None else str(value)
        handle = self.connections.get_thread_connection().handle
        if isinstance(handle, BackoffPyhiveConnectionWrapper) and key in handle.leftovers.deferred:
            # Deferred only where the fence's SET found nothing to put back (send_conf).
            return None
        if key == USER_METADATA and isinstance(handle, BackoffPyhiveConnectionWrapper):
            # Only a statement sets it: in a session where none did, the server's own value.
            return thrift.server_default(handle, key, lambda: self._read_conf(key))
        return self._read_conf(key)

    def _read_conf(self, key: str) -> str | None:
        rows = self.fetch(f"SET {key}")
        value = rows[0][1] if rows else None
        return None if value in (None, "<undefined>") else str(value)

    def set_session_conf(self, key: str, value: str | None) -> None:
        if (
            key == LAST_COMMIT
            and value is None
            and not self.connections.session_may_have_committed()
        ):
            # Delta sets it when this session commits, and nothing in it could have yet: a
            # statement over Thrift saved.
            logger.debug(f"fenced_spark: {key} is unset: nothing in this session committed")
            return
        self.send_conf(key, value)

    def send_conf(self, key: str, value: str | None) -> None:
        # The session's conf API where there is a session: over Connect one config call takes
        # under a millisecond where SQL's SET takes 20-30 ms (docs/benchmarks.md). A Thrift
        # connection has only SQL, and its RESET. dbt.log shows both.
        spark = self._session()
        if spark is None:
            self._send_sql_conf(key, value)
            return
        shown = set_conf_sql(key, value)
        logger.debug(f"fenced_spark: {shown} (through the session's conf)")
        self.connections.sent_one()
        # A reset puts back what the key held before the fence set it (a cluster default, a
        # hook's SET), as SQL's RESET would put back the cluster default.
        held = (id(spark), key)
        try:
            with spark_errors():
                if value is not None:
                    self._before.setdefault(held, spark.conf.get(key, None))
                    spark.conf.set(key, value)
                    return
                before = self._before.pop(held, None)
                if before is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, before)
        except DbtRuntimeError as exc:
            self.connections.keep_no_session(failed=exc)
            raise
        except Exception as exc:
            # A closed Connect channel, a dead JVM: a failed statement, as over SQL.
            self.connections.keep_no_session(failed=exc)
            raise DbtRuntimeError(f"{shown} failed: {exc}") from exc

    def _send_sql_conf(self, key: str, value: str | None) -> None:
        handle = self.connections.get_thread_connection().handle
        confs = None
        if isinstance(handle, BackoffPyhiveConnectionWrapper) and key in _DEFERRABLE:
            confs = handle.leftovers
        if confs is not None and value is None and key in confs.fence_set:
            # Between the fence's SET and this RESET only the statement it tags ran.
            confs.deferred[key] = confs.fence_set.pop(key)
            logger.debug(f"fenced_spark: RESET {key} waits for a statement not the fence's")
            return
        if confs is not None and value is not None and confs.deferred.get(key) == value:
            confs.fence_set[key] = confs.deferred.pop(key)
            logger.debug(f"fenced_spark: {key} still holds `{value}` (its RESET waited)")
            return
        with self.connections.fence_own():
            self.execute(set_conf_sql(key, value))
        if confs is not None:
            confs.deferred.pop(key, None)  # replaced by this SET or RESET once sent
            if value is None:
                confs.fence_set.pop(key, None)
            else:
                confs.fence_set[key] = value

    def reconnect(self) -> None:
        # The embedded session lives as long as the process; a Connect session or a Thrift
        # connection is opened anew (the run's hook statements are replayed into it).
        connection = self.connections.get_thread_connection()
        handle = getattr(connection.handle, "handle", None)
        if isinstance(handle, SessionHandle) and not isinstance(handle, ConnectHandle):
            return
        self._before.clear()  # what it held belonged to the old session
        self.connections.keep_no_session()
        with suppress(Exception):  # the old one is gone; closing it is best effort
            connection.handle.close()
        connection.state = ConnectionState.INIT
        # A new session: a kept one may hold lastCommitVersionInSession from another node's
        # commit, which the verdict being read must not take for ours.
        self.connections.open(connection, new=True)

    def current_schema(self) -> str:
        return str(self.fetch("SELECT current_database()")[0][0])

    def location(self, table: str) -> str:
        names, rows = self.connections.fetch_rows(f"DESCRIBE DETAIL {table}")
        return str(dict(zip(names, rows[0], strict=True))["location"])

    def log(
        self,
        locations: dict[str, str | None] | None = None,
        hints: dict[str, int] | None = None,
        settled: dict[str, str] | None = None,
        continued: bool = False,
    ) -> HistoryReader:
        # The embedded session reads the Delta log itself: no Spark job, no log listing.
        # Thrift and Connect clients have no JVM of their own: the server reads the files,
        # where the node's earlier steps found them (`locations`), from where the node's last
        # run left the table (`hints`).
        if self.over_sql():
            files = connect.FrameReads(self.connections) if self.over_connect() else None
            return SqlLog(self, locations, hints, settled, files, continued)
        handle = self.connections.get_thread_connection().handle.handle
        return LogTail(handle.spark, fallback=SqlHistory(self))

    def over_sql(self) -> bool:
        """Thrift and Connect: the client has no JVM of its own to read the Delta log."""
        handle = self._handle()
        return not isinstance(handle, SessionHandle) or isinstance(handle, ConnectHandle)

    def over_connect(self) -> bool:
        return isinstance(self._handle(), ConnectHandle)
