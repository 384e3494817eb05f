"""Python models, run in the node's own SparkSession (`method: session` and `connect`).

dbt compiles a Python model into the user's code followed by its helpers (`dbtObj`: `ref`,
`source`, `config`, `this`). dbt-spark submits that to Databricks over REST; here it runs in the
dbt process against the connection's session: the embedded one, or a Spark Connect session,
whose DataFrames are planned, built and written on the server. A fenced incremental model
gets a session whose reads of its own table are pinned to vB (`PinnedSession`), and its
DataFrame is staged as the fence stages model SQL: a temporary view the fenced write reads.
"""

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.rewriter import name_parts

PYTHON_METHODS = ("session", "connect")

_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
_connect_lock = threading.Lock()
_connect_models = 0
_connect_before: str | None = None  # the variable before the first of the running models


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextmanager
def _connect_mode() -> Iterator[None]:
    """pyspark.sql.functions build Connect columns while a Connect model runs (pyspark's own
    remote builder sets this for good; here only while models run, so that a classic session
    in the same process is left alone)."""
    global _connect_models, _connect_before
    with _connect_lock:
        if _connect_models == 0:
            _connect_before = os.environ.get(_CONNECT_MODE)
        _connect_models += 1
        os.environ[_CONNECT_MODE] = "1"
    try:
        yield
    finally:
        with _connect_lock:
            _connect_models -= 1
            if _connect_models == 0:
                if _connect_before is None:
                    os.environ.pop(_CONNECT_MODE, None)
                else:
                    os.environ[_CONNECT_MODE] = _connect_before


@contextmanager
def active(spark: Any) -> Iterator[None]:
    """The node's session is this thread's active one while its model runs: pandas-on-Spark
    and `SparkSession.getActiveSession()` then build on it, not on another session."""
    if _is_connect(spark):
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        local = ConnectSession._active_session
        previous = getattr(local, "session", None)
        local.session = spark
        try:
            with _connect_mode():
                yield
        finally:
            local.session = previous
        return
    jvm_session = spark._jvm.SparkSession
    previous = jvm_session.getActiveSession()
    jvm_session.setActiveSession(spark._jsparkSession)
    try:
        yield
    finally:
        if previous.isDefined():
            jvm_session.setActiveSession(previous.get())
        else:
            jvm_session.clearActiveSession()


def _same_session(df: Any, spark: Any) -> bool:
    mine = getattr(spark, "_jsparkSession", None)
    if mine is None:  # Connect: one client session per object
        return df.sparkSession is spark
    return bool(df.sparkSession._jsparkSession.equals(mine))


def as_dataframe(df: Any, spark: Any, model: str) -> Any:
    """The Spark DataFrame a model returned: a pandas DataFrame is converted on the model's
    own session (over Connect, on the server), a pandas-on-Spark one is unwrapped."""
    from pyspark.sql import DataFrame

    if hasattr(df, "to_spark") and type(df).__module__.startswith("pyspark.pandas"):
        df = df.to_spark()
    if isinstance(df, DataFrame):
        if not _same_session(df, spark):
            # Its temp view and its write would land in a session the fence does not watch.
            raise DbtRuntimeError(
                f"Python model {model} returned a DataFrame of another SparkSession than the "
                "one it was given: build it from `session` (or `spark`)"
            )
        return df
    try:
        import pandas

        if isinstance(df, pandas.DataFrame):
            return spark.createDataFrame(df)
    except ImportError:
        pass
    raise DbtRuntimeError(
        f"Python model {model} returned a {type(df).__module__}.{type(df).__name__}: return a "
        "Spark DataFrame, a pandas DataFrame or a pandas-on-Spark DataFrame"
    )


def run_script(
    spark: Any,
    code: str,
    model: str,
    tag: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> None:
    """A script as dbt-spark would submit it (the model, then its write: py_write_table), with
    `spark` the node's session, as on a Databricks cluster. `tag` wraps the table's write
    alone (a batch's first run: fence_tag_build)."""
    namespace = _namespace(spark, model)
    namespace["fenced_spark_write_tag"] = tag
    with active(spark):
        exec(compile(code, model, "exec"), namespace)


def _namespace(spark: Any, model: str) -> dict[str, Any]:
    return {
        "__name__": "__dbt_python_model__",
        "spark": spark,
        "fenced_spark_dataframe": lambda df: as_dataframe(df, spark, model),
    }


@dataclass
class Pin:
    """The model's own table, and what the fence pins reads of it to."""

    schema: str
    identifier: str
    table: str  # quoted
    version: int
    current_schema: Callable[[], str | None]
    # The pinning of one SQL statement (the adapter's, as for SQL models).
    pin_sql: Callable[[str], str]
    # Each read of the table, as SQL, for the conflict analysis.
    reads: list[str] = field(default_factory=list)

    def pinned(self, query: str) -> str:
        """`query` with its reads of the table pinned; each such read recorded."""
        pinned = self.pin_sql(query)
        if pinned != query:
            self.reads.append(query)
        return pinned

    def is_table(self, name: str) -> bool:
        parts = name_parts(name)
        if not parts or parts[-1].lower() != self.identifier.lower():
            return False
        if len(parts) == 1:
            return (self.current_schema() or "").lower() == self.schema.lower()
        if len(parts) == 3 and parts[0].lower() != "spark_catalog":
            return False
        return parts[-2].lower() == self.schema.lower()


class PinnedReader:
    """`spark.read`, whose `table()` of the model's own table is pinned."""

    def __init__(self, session: "PinnedSession") -> None:
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session._spark.read, name)

    def table(self, name: str) -> Any:
        return self._session.table(name)


class PinnedSession:
    """The session a fenced incremental Python model gets, as `session` and as `spark`: its
    reads of the model's own table through `table()`, `read.table()` and `sql()` (and so
    `dbt.ref`, `dbt.source` and `dbt.this`) see vB. Everything else is the node's session."""

    def __init__(self, spark: Any, pin: Pin) -> None:
        self._spark = spark
        self._pin = pin

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spark, name)

    @property
    def read(self) -> PinnedReader:
        return PinnedReader(self)

    def table(self, name: str) -> Any:
        if not self._pin.is_table(str(name)):
            return self._spark.table(name)
        return self.sql(f"SELECT * FROM {self._pin.table}")

    def sql(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return self._spark.sql(self._pin.pinned(query), *args, **kwargs)


def stage(spark: Any, compiled_code: str, model: str, view: str, pin: Pin) -> None:
    """Runs the model against the pinned session and stages what it returns as `view`, a
    temporary view of the node's session: the fenced write reads it, and only then does Spark
    compute it."""
    session = PinnedSession(spark, pin)
    namespace = _namespace(session, model)
    with active(spark):
        exec(compile(compiled_code, model, "exec"), namespace)
        dbt = namespace["dbtObj"](session.table)
        df = as_dataframe(namespace["model"](dbt, session), spark, model)
        df.createOrReplaceTempView(view)
