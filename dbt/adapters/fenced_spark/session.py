"""The embedded Spark + Delta session behind `method: session`.

One JVM and one root SparkSession per process; every dbt connection gets its own
`newSession()`, so SQL confs (the fence's userMetadata) and temp views never cross threads.
"""

import os
import threading
from typing import TYPE_CHECKING, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials

logger = AdapterLogger("FencedSpark")

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"

_lock = threading.Lock()
_root: Optional["SparkSession"] = None
_root_folder: str | None = None


def launch_conf(creds: "FencedSparkCredentials") -> dict[str, str]:
    folder = creds.folder or ""
    conf = {
        "spark.master": "local[*]",
        "spark.app.name": "dbt-fenced-spark",
        "spark.jars.packages": creds.delta_package,
        "spark.jars.ivy": creds.jars_cache or "",
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": os.path.join(folder, "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={os.path.join(folder, 'metastore_db')};create=true"
        ),
        # derby.log lands in derby.system.home; keep it inside the folder, not the cwd.
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={folder}",
        "spark.driver.memory": "2g",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    conf.update(creds.server_side_parameters)
    return conf


def _start(creds: "FencedSparkCredentials") -> "SparkSession":
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if existing is not None:
        # A host process (a notebook, a test harness) already owns the JVM: use it as is.
        extensions = existing.conf.get("spark.sql.extensions", "") or ""
        if DELTA_EXTENSION not in extensions:
            raise DbtRuntimeError(
                "fenced_spark found a running SparkSession without Delta Lake configured "
                f"(spark.sql.extensions={extensions!r}). Stop it, or build it with "
                f"{DELTA_EXTENSION} and {DELTA_CATALOG}."
            )
        return existing

    folder = creds.folder or ""
    os.makedirs(os.path.join(folder, "logs"), exist_ok=True)
    conf = SparkConf().setAll(list(launch_conf(creds).items()))
    log_path = os.path.join(folder, "logs", "spark.log")
    logger.debug(f"Starting embedded Spark + Delta; JVM output goes to {log_path}")
    # Spark and Ivy talk a lot on the console; their output goes to the folder's log
    # instead, so the dbt log shows dbt and this adapter.
    # The launcher copies os.environ; bind the driver to loopback, not the host's address.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with open(log_path, "ab") as log:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)
    session = SparkSession.builder.config(conf=conf).enableHiveSupport().getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def root_session(creds: "FencedSparkCredentials") -> "SparkSession":
    global _root, _root_folder
    with _lock:
        if _root is None:
            try:
                _root = _start(creds)
            except Exception as exc:
                log_path = os.path.join(creds.folder or "", "logs", "spark.log")
                raise DbtRuntimeError(
                    f"Could not start the embedded Spark + Delta session: {exc}\n"
                    f"Spark's own output is in {log_path}."
                ) from exc
            _root_folder = creds.folder
        elif creds.folder != _root_folder:
            logger.warning(
                f"The embedded Spark session of this process already uses folder "
                f"{_root_folder}; folder {creds.folder} is ignored until the process restarts."
            )
        return _root


def connection_session(creds: "FencedSparkCredentials") -> "SparkSession":
    """A fresh session on the shared JVM for one dbt connection."""
    session = root_session(creds).newSession()
    for key, value in creds.server_side_parameters.items():
        if session.conf.isModifiable(key):
            session.conf.set(key, value)
    return session
