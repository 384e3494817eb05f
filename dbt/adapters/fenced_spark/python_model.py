"""Python models, run in the node's own SparkSession (`method: session` and `connect`).

dbt compiles a Python model into the user's code followed by its helpers (`dbtObj`: `ref`,
`source`, `config`, `this`). dbt-spark submits that to Databricks over REST; here it runs in the
dbt process against the connection's session: the embedded one, or a Spark Connect session,
whose DataFrames are planned, built and written on the server. A fenced incremental model
gets a session whose reads of its own table are pinned to vB (`PinnedSession`), and its
DataFrame is staged as the fence stages model SQL: a temporary view the fenced write reads.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.rewriter import name_parts

PYTHON_METHODS = ("session", "connect")
# Where dbt's helpers start in a compiled Python model (dbt's py_script_postfix).
_HELPERS = "# This part is user provided model code"


def user_code(compiled_code: str) -> str:
    """The model's own code, without dbt's helpers (which name the model's table)."""
    return compiled_code.split(_HELPERS, 1)[0]


def reads_self(compiled_code: str, identifier: str) -> bool:
    """Whether the model's code may read its own table: it names `dbt.this` or the table.
    Python cannot be parsed for its reads as SQL is; a mention is taken for a read."""
    code = user_code(compiled_code)
    return "dbt.this" in code or re.search(rf"\b{re.escape(identifier)}\b", code, re.I) is not None


def as_dataframe(df: Any, spark: Any, model: str) -> Any:
    """The Spark DataFrame a model returned: a pandas DataFrame is converted on the model's
    own session (over Connect, on the server), a pandas-on-Spark one is unwrapped."""
    from pyspark.sql import DataFrame

    if isinstance(df, DataFrame):
        return df
    if hasattr(df, "to_spark") and type(df).__module__.startswith("pyspark.pandas"):
        return df.to_spark()
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


def run_script(spark: Any, code: str, model: str) -> None:
    """A script as dbt-spark would submit it (the model, then its write: py_write_table), with
    `spark` the node's session, as on a Databricks cluster."""
    namespace = _namespace(spark, model)
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
    exec(compile(compiled_code, model, "exec"), namespace)
    dbt = namespace["dbtObj"](session.table)
    df = as_dataframe(namespace["model"](dbt, session), spark, model)
    df.createOrReplaceTempView(view)
