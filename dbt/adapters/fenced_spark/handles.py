"""What a session or Connect connection holds: its own SparkSession's handle and cursor, and
Spark's failures as dbt's (spark_errors)."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dbt.adapters.spark.session import Cursor, SessionConnectionWrapper
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import connect
from dbt.adapters.fenced_spark.polling import answered_at_once


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
