"""The embedded Spark + Delta session behind `method: session`.

One JVM and one root SparkSession per process; every dbt connection gets its own
`newSession()`, so SQL confs (the fence's userMetadata) and temp views never cross threads.
"""

import logging
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import class_archive, ivy, lakehouse, start_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials

logger = AdapterLogger("FencedSpark")

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"

_lock = threading.Lock()
_root: Optional["SparkSession"] = None
_root_folder: str | None = None


def local_cores(master: str) -> int | None:
    """Task slots of a local master (`local`, `local[4]`, `local[*]`); None for a cluster."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if match is None:
        return None
    if match.group(1) in (None, "*"):
        return (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1
        )
    return int(match.group(1))


def sized_conf(cores: int) -> dict[str, str]:
    """Spark's and Delta's defaults are sized for a cluster: 200 shuffle partitions, 50 tasks per
    Delta snapshot. On one machine every task is scheduling overhead, and each new table version
    rebuilds its snapshot (a 100-row table: 5.4 s at 50 partitions, 1.0 s at 1, on 2 cores).
    None changes a deterministic result (docs/connections.md, Session defaults; docs/benchmarks.md
    part 6)."""
    return {
        "spark.sql.shuffle.partitions": str(max(2, cores)),
        "spark.databricks.delta.snapshotPartitions": str(max(1, cores // 2)),
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(max(1, cores)),
    }


def launch_conf(creds: "FencedSparkCredentials", share_classes: bool = True) -> dict[str, str]:
    """The embedded session's conf; `share_classes=False` for a JVM of another shape (a
    server's class path), which must not write or map the session's class archive."""
    folder = creds.folder or ""
    conf = {
        "spark.master": "local[*]",
        "spark.app.name": "dbt-fenced-spark",
        "spark.jars.packages": creds.delta_package,
        "spark.jars.ivy": creds.jars_cache or "",
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": creds.warehouse or os.path.join(folder, "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": lakehouse.embedded_url(folder),
        # derby.log lands in derby.system.home; keep it inside the folder, not the cwd.
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={folder}",
        "spark.driver.memory": "2g",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    cores = local_cores(creds.server_side_parameters.get("spark.master", conf["spark.master"]))
    if cores is not None:
        conf.update(sized_conf(cores))
    shared = lakehouse.metastore(creds.metastore)
    if shared is not None:
        del conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
        conf.update(shared.conf(creds.jars_cache or ""))
    class_path = [conf.get("spark.driver.extraClassPath")]
    conf.update(creds.server_side_parameters)
    if class_path[0] and "spark.driver.extraClassPath" in creds.server_side_parameters:
        # The metastore's driver and the user's own jars both belong on the class path.
        class_path.append(creds.server_side_parameters["spark.driver.extraClassPath"])
        conf["spark.driver.extraClassPath"] = os.pathsep.join(filter(None, class_path))
    if not RESOLUTION_KEYS & set(creds.server_side_parameters):
        jars = resolved_jars(creds)
        if jars:
            # Ivy resolves the package again at every start (2-3 s) though nothing changed.
            del conf["spark.jars.packages"]
            conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars"), *jars]))
    # The user's own JVM options replace ours whole: then there is nothing to add. The archive
    # is keyed on the finished conf (its class path, its heap).
    if share_classes and "spark.driver.extraJavaOptions" not in creds.server_side_parameters:
        archive = class_archive.java_options(creds.jars_cache or "", creds.delta_package, conf)
        options = [conf["spark.driver.extraJavaOptions"], archive]
        conf["spark.driver.extraJavaOptions"] = " ".join(filter(None, options))
    return conf


# Keys that change what Ivy resolves: set by the user, the record is neither used nor written.
RESOLUTION_KEYS = frozenset(
    {
        "spark.jars.packages",
        "spark.jars.excludes",
        "spark.jars.repositories",
        "spark.jars.ivy",
        "spark.jars.ivySettings",
    }
)


def _resolved_record(creds: "FencedSparkCredentials") -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", creds.delta_package)
    return os.path.join(creds.jars_cache or "", "resolved", f"{name}.txt")


def _package_jar(package: str) -> str:
    # Ivy names a retrieved artifact `org_module-revision.jar`.
    org, module, revision = (package.split(":") + ["", ""])[:3]
    return f"{org}_{module}-{revision}.jar"


def resolved_jars(creds: "FencedSparkCredentials") -> list[str]:
    """The jars Ivy resolved for the Delta package at an earlier start, if the record is whole
    (its header counts its jars and it holds the package's own) and every jar still exists."""
    try:
        with open(_resolved_record(creds)) as record:
            header, *lines = [line.strip() for line in record if line.strip()]
    except (OSError, ValueError):
        return []
    jars = lines
    whole = header == f"# {creds.delta_package} {len(jars)}" and any(
        os.path.basename(jar) == _package_jar(creds.delta_package) for jar in jars
    )
    return jars if whole and all(os.path.isfile(jar) for jar in jars) else []


def jars_summary(spark: "SparkSession") -> str:
    """Where the running session's jars came from, for `dbt debug`: its own conf, whatever
    resolved them (the adapter's record, Ivy, a host process)."""
    conf = spark.sparkContext.getConf()
    jars = [re.sub(r"^file:(//)?", "", j) for j in conf.get("spark.jars", "").split(",") if j]
    packages = conf.get("spark.jars.packages", "")
    if not jars:
        return f"{packages}, resolved by Ivy" if packages else "none added to Spark's own"
    folders = sorted({os.path.dirname(jar) for jar in jars})
    size = sum(os.path.getsize(jar) for jar in jars if os.path.isfile(jar)) / 1e6
    return f"{len(jars)} jars, {size:.0f} MB, in {', '.join(folders)}"


def _record_resolved(creds: "FencedSparkCredentials", spark_jars: str) -> None:
    ivy_jars = os.path.join(creds.jars_cache or "", "jars") + os.sep
    jars = [re.sub(r"^file:(//)?", "", jar) for jar in spark_jars.split(",") if jar]
    jars = [jar for jar in jars if jar.startswith(ivy_jars)]
    if not jars:
        return
    path = _resolved_record(creds)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # Written whole, then renamed: two processes starting at once never read half a list.
        with open(f"{path}.{os.getpid()}", "w") as record:
            record.write(f"# {creds.delta_package} {len(jars)}\n" + "\n".join(jars) + "\n")
        os.replace(f"{path}.{os.getpid()}", path)
    except OSError as exc:
        # Only the next start's speed depends on it: Spark itself is up.
        logger.debug(f"Could not record Delta's resolved jars in {path}: {exc}")


def _start(creds: "FencedSparkCredentials", wait_seconds: int) -> "SparkSession":
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
    launch = launch_conf(creds)
    if lakehouse.is_embedded(launch, folder):
        lakehouse.hold_folder(folder, wait_seconds)
    else:
        lakehouse.check_warehouse(launch.get("spark.sql.warehouse.dir", ""), launch)
    with resolving(launch):
        # The process that held the cache may have recorded the jars meanwhile.
        return _launch(creds, launch_conf(creds) if "spark.jars.packages" in launch else launch)


def _launch(creds: "FencedSparkCredentials", launch: dict[str, str]) -> "SparkSession":
    log_path = os.path.join(creds.folder or "", "logs", "spark.log")
    packages = launch.get("spark.jars.packages", "")
    ivy_cache = os.path.join(launch.get("spark.jars.ivy", ""), "cache")
    report = start_progress.IvyReport(packages, ivy_cache)
    # Ivy's downloads and the JVM's start, said as they happen when they take a while.
    doing = f"Starting Spark + Delta (its output: {log_path})"
    with start_progress.watch(log_path, report, doing, "Spark + Delta started"):
        session = _open(creds, launch, log_path)
    resolved = launch.get("spark.jars.packages") == creds.delta_package
    if resolved and not RESOLUTION_KEYS & set(creds.server_side_parameters):
        _record_resolved(creds, session.sparkContext.getConf().get("spark.jars", ""))
    return session


def _open(creds: "FencedSparkCredentials", launch: dict[str, str], log_path: str) -> "SparkSession":
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    conf = SparkConf().setAll(list(launch.items()))
    logger.debug(f"Starting embedded Spark + Delta; JVM output goes to {log_path}")
    # Spark and Ivy talk a lot on the console; their output goes to the folder's log
    # instead, so the dbt log shows dbt and this adapter.
    # The launcher copies os.environ; bind the driver to loopback, not the host's address.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    with open(log_path, "ab") as log:
        gateway = launch_gateway(
            SparkConf().setAll(list(on_command_line(launch).items())),
            popen_kwargs={"stdout": log, "stderr": log},
        )
    class_archive.check_mapped(launch.get("spark.driver.extraJavaOptions", ""), log_path, offset)
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)
    session = SparkSession.builder.config(conf=conf).enableHiveSupport().getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    log_query_errors_to(log_path)
    if not lakehouse.is_embedded(launch, creds.folder or ""):
        _reach_metastore(session, launch)
    else:
        # Its first use boots Derby and, in a new folder, creates the metastore's schema
        # (seconds): here it is part of the start the user is told about, and overlaps dbt's
        # parse, instead of a silence before the first node.
        session.sql("SHOW DATABASES").collect()
    return session


def on_command_line(launch: dict[str, str]) -> dict[str, str]:
    """What the JVM's command line may show (`ps` does, to every local user): the metastore's
    URL, user and password reach the JVM in memory, through the SparkContext's conf."""
    return {k: v for k, v in launch.items() if not k.startswith(lakehouse.SECRET_PREFIX)}


def _reach_metastore(session: "SparkSession", launch: dict[str, str]) -> None:
    # Hive retries a metastore it cannot reach, then names none of it; `dbt debug` and the first
    # start (which creates the schema) would otherwise pass without touching it.
    where = lakehouse.mask(
        launch.get("spark.hadoop.hive.metastore.uris")
        or launch.get(lakehouse.SECRET_PREFIX + "ConnectionURL", "")
    )
    try:
        session.sql("SHOW DATABASES").collect()
    except Exception as exc:
        raise DbtRuntimeError(
            f"The shared metastore at {where} did not answer: {root_cause(exc)}"
        ) from exc


def root_cause(exc: BaseException) -> str:
    """The innermost Java cause's own words (an unknown host, a refused connection), which
    Hive's `Unable to instantiate SessionHiveMetaStoreClient` wraps several levels deep."""
    throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    with suppress(Exception):
        while throwable is not None:
            text = str(throwable.toString())
            throwable = throwable.getCause()
    return lakehouse.mask(text)


@contextmanager
def resolving(conf: dict[str, str]) -> Iterator[None]:
    """Holds the Ivy cache while a JVM started with `conf` resolves packages into it; a start
    that resolves nothing passes."""
    cache = conf.get("spark.jars.ivy", "")
    if "spark.jars.packages" not in conf or not cache:
        yield
        return
    with ivy.holding(cache):
        yield


def log_query_errors_to(log_path: str) -> None:
    """pyspark logs every error it converts (the adapter's own expected ones too) as a JSON line
    with the JVM stack, on stderr; the error reaches the user once, through dbt. The lines go
    to the session's log instead."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        errors = PySparkLogger.getLogger(name)
        for handler in list(errors.handlers):
            errors.removeHandler(handler)
        errors.addHandler(logging.FileHandler(log_path))
        errors.propagate = False


def root_session(creds: "FencedSparkCredentials", early: bool = False) -> "SparkSession":
    global _root, _root_folder
    with _lock:
        if _root is None:
            try:
                # The early start does not wait for a held folder: the connection's start does.
                _root = _start(creds, 0 if early else creds.folder_wait)
            except DbtRuntimeError:
                raise  # already says what to do
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


# dbt commands that run SQL after parsing the project; `dbt parse` and `dbt ls` start no JVM.
QUERYING_COMMANDS = frozenset(
    {
        "run",
        "build",
        "seed",
        "snapshot",
        "test",
        "show",
        "compile",
        "run-operation",
        "retry",
        "clone",
        "generate",
    }
)


def start_early(creds: "FencedSparkCredentials", command: str | None) -> None:
    """Start the JVM while dbt parses the project (the adapter exists before the parse); the
    first connection then waits on the lock for what is left. A failure here is raised again
    by that connection's own start."""
    if command not in QUERYING_COMMANDS or _root is not None:
        return

    def start() -> None:
        with suppress(Exception):
            root_session(creds, early=True)

    threading.Thread(target=start, name="fenced-spark-start", daemon=True).start()


def connection_session(creds: "FencedSparkCredentials") -> "SparkSession":
    """A fresh session on the shared JVM for one dbt connection."""
    session = root_session(creds).newSession()
    for key, value in creds.server_side_parameters.items():
        if session.conf.isModifiable(key):
            session.conf.set(key, value)
    return session
