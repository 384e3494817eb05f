import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dbt.adapters.spark.connections import SparkConnectionMethod, SparkCredentials
from dbt_common.dataclass_schema import StrEnum
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import connect, lakehouse

# Maven Central serves delta-spark_4.1_2.13 up to 4.4.0 (4.4.1 exists on PyPI only);
# the Python and JVM halves speak SQL to each other, so a patch skew is harmless.
DEFAULT_DELTA_PACKAGE = "io.delta:delta-spark_4.1_2.13:4.4.0"


def _default_jars_cache() -> str:
    return os.environ.get(
        "DBT_FENCED_SPARK_JARS_CACHE",
        os.path.join(os.path.expanduser("~"), ".cache", "dbt-fenced-spark", "ivy"),
    )


class FencedConnectionMethod(StrEnum):
    # dbt-spark's methods (equal to its enum's members as strings) plus Spark Connect.
    THRIFT = "thrift"
    HTTP = "http"
    ODBC = "odbc"
    SESSION = "session"
    CONNECT = "connect"


@dataclass
class FencedSparkCredentials(SparkCredentials):
    method: FencedConnectionMethod = None  # type: ignore[assignment]
    # Embedded session only: root of the local lakehouse (warehouse, metastore, logs).
    folder: str | None = None
    # Embedded session only: where Spark's Ivy keeps the resolved Delta jars.
    jars_cache: str | None = None
    delta_package: str = DEFAULT_DELTA_PACKAGE
    # Embedded session only: a lakehouse several processes share (docs/cluster.md): the
    # warehouse on any Hadoop file system URL, the metastore a database or a metastore service.
    warehouse: str | None = None
    metastore: dict[str, Any] | None = None
    # Embedded session only: seconds to wait while another process holds the folder's metastore.
    folder_wait: int = 0

    SESSION_KEYS = ("warehouse", "metastore", "folder_wait")

    def __post_init__(self) -> None:
        # The embedded session is the default: a profile may omit `method`.
        if self.method is None:
            self.method = SparkConnectionMethod.SESSION
        # dbt-spark demands a host even for the session method; the embedded one has none.
        if self.method == SparkConnectionMethod.SESSION and self.host is None:
            self.host = "localhost"
        if self.method == SparkConnectionMethod.SESSION:
            self.folder = os.path.abspath(
                os.path.expanduser(
                    self.folder or os.environ.get("DBT_FENCED_SPARK_HOME") or ".fenced_spark"
                )
            )
            self.jars_cache = os.path.abspath(
                os.path.expanduser(self.jars_cache or _default_jars_cache())
            )
            if self.warehouse:
                self.warehouse = lakehouse.local_path(self.warehouse)
            lakehouse.metastore(self.metastore)
            self._check_one_way()
        else:
            self._check_session_only()
        if self.method == FencedConnectionMethod.CONNECT:
            self._check_connect()
        super().__post_init__()

    def _check_one_way(self) -> None:
        # One setting, one place: `dbt debug` shows the profile key, Spark would use the conf.
        given = {
            "warehouse": ("spark.sql.warehouse.dir",),
            "metastore": (
                "spark.hadoop.hive.metastore.uris",
                "spark.hadoop.javax.jdo.option.ConnectionURL",
            ),
        }
        for key, confs in given.items():
            for conf in confs:
                if getattr(self, key) and conf in self.server_side_parameters:
                    raise DbtRuntimeError(
                        f"profile key `{key}` and server_side_parameters' {conf} both set where "
                        f"the session's {'tables' if key == 'warehouse' else 'catalog'} live: "
                        "keep one"
                    )

    def _check_session_only(self) -> None:
        # A server's warehouse and metastore are its own: set where the server starts.
        for key in self.SESSION_KEYS:
            if getattr(self, key) not in (None, 0):
                raise DbtRuntimeError(
                    f"profile key `{key}` applies to method: session only; a {self.method} "
                    "server keeps its own warehouse and metastore"
                )

    def _check_connect(self) -> None:
        if not self.host or not str(self.host).startswith("sc://"):
            raise DbtRuntimeError(
                f"method: connect takes Spark Connect's URL as `host` "
                f"(sc://host:port/;token=...;use_ssl=true), not {self.host!r}"
            )
        if re.search(r";\s*session_id\s*=", str(self.host), re.I):
            # Every dbt connection would join one session: the commit tag, the record of the
            # session's commit and the staging views would cross threads.
            raise DbtRuntimeError(
                f"method: connect: `host` {connect.redact(str(self.host))!r} names a session "
                "(session_id=...); dbt-fenced-spark opens one Spark Connect session per dbt "
                "connection. Remove session_id from the URL."
            )
        connect.check_installed()

    @property
    def url(self) -> str:
        return connect.redact(str(self.host))

    @property
    def metastore_at(self) -> str:
        if not self.metastore:
            return f"Derby, embedded in {self.folder}"
        spec = self.metastore
        uris = spec.get("uris")
        return lakehouse.mask(
            ",".join(uris) if isinstance(uris, list) else str(spec.get("url") or uris)
        )

    def connection_info(self, *, with_aliases: bool = False) -> Iterator[tuple[str, Any]]:
        # dbt prints only dataclass fields; `url` and `metastore_at` are properties that show a
        # field without its secret.
        shown = dict(super().connection_info(with_aliases=with_aliases))
        for key in self._connection_keys():
            if key in shown:
                yield key, shown.pop(key)
            elif isinstance(getattr(type(self), key, None), property):
                yield key, getattr(self, key)
        yield from shown.items()

    @property
    def type(self) -> str:
        return "fenced_spark"

    def _connection_keys(self) -> tuple[str, ...]:
        if self.method == SparkConnectionMethod.SESSION:
            keys = ("method", "schema", "folder", "jars_cache", "delta_package")
            return keys + (("warehouse", "metastore_at") if self.metastore else ())
        if self.method == FencedConnectionMethod.CONNECT:
            # `url`: the host without its token, which `dbt debug` would print.
            return "method", "url", "schema", "connect_retries", "connect_timeout"
        return "method", *super()._connection_keys()
