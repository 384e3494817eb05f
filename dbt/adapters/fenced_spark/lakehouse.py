"""Where the embedded session keeps its tables and catalog: the profile's folder (a local
warehouse and an embedded Derby metastore, one process at a time), or a warehouse on a shared
file system and a metastore that several drivers share (`warehouse:`, `metastore:`)."""

import fcntl
import getpass
import glob
import os
import re
import socket
import sys
import time
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlparse

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import ivy

logger = AdapterLogger("FencedSpark")

METASTORE_KEYS = ("url", "uris", "driver", "user", "password", "jars")
# A JDBC URL's subprotocol names its driver class; Derby's client driver comes with its jar.
DRIVERS = {
    "derby": "org.apache.derby.jdbc.ClientDriver",
    "postgresql": "org.postgresql.Driver",
    "mysql": "com.mysql.cj.jdbc.Driver",
    "mariadb": "org.mariadb.jdbc.Driver",
}
# Storage whose Delta log store admits one commit N across JVMs (docs/cluster.md).
SAFE_SCHEMES = frozenset({"hdfs", "abfs", "abfss", "wasb", "wasbs", "adl", "gs"})
S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
S3_LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"
# Where messages send the reader: an installed package has no docs/ folder of its own.
CLUSTER_DOC = "docs/cluster.md in the dbt-fenced-spark repository"
# The metastore's connection settings: passed to the JVM in memory, never on its command line.
SECRET_PREFIX = "spark.hadoop.javax.jdo.option."

# Bound while the process lives: the OS releases it when the process ends, killed or not.
_folder_lock: IO[str] | None = None


@dataclass(frozen=True)
class Metastore:
    url: str | None
    uris: str | None
    driver: str | None
    user: str | None
    password: str | None
    jars: tuple[str, ...]

    def conf(self, jars_cache: str) -> dict[str, str]:
        if self.uris:
            return {"spark.hadoop.hive.metastore.uris": self.uris}
        conf = {
            "spark.hadoop.javax.jdo.option.ConnectionURL": self.url or "",
            "spark.hadoop.javax.jdo.option.ConnectionDriverName": self.driver or "",
        }
        if self.user is not None:
            conf["spark.hadoop.javax.jdo.option.ConnectionUserName"] = self.user
        if self.password is not None:
            conf["spark.hadoop.javax.jdo.option.ConnectionPassword"] = self.password
        if not (self.url or "").startswith("jdbc:derby:"):
            # Spark does both itself for Derby only: the first driver creates the schema.
            conf["spark.hadoop.datanucleus.schema.autoCreateAll"] = "true"
            conf["spark.hadoop.hive.metastore.schema.verification"] = "false"
        jars = [jar for entry in self.jars for jar in _jars(entry, jars_cache)]
        if jars:
            # The system class loader must see the JDBC driver (Derby's ClientDriver is a shim in
            # pyspark's derbytools.jar); jars added by spark.jars load too late and too high up.
            conf["spark.driver.extraClassPath"] = os.pathsep.join(jars)
        return conf


def _jars(entry: str, jars_cache: str) -> list[str]:
    return ivy.classpath(entry, jars_cache) if ivy.is_coordinate(entry) else [entry]


def mask(text: str) -> str:
    """A metastore URL fit to print: its password (`password=`, `user:password@`) masked."""
    text = re.sub(r"(?i)(password=)[^;&]*", r"\1***", text)
    return re.sub(r"(//[^/:@;]+:)[^@/]*@", r"\1***@", text)


def pyspark_derby_version() -> str:
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    for jar in glob.glob(os.path.join(jars, "derby-*.jar")):
        return os.path.basename(jar)[len("derby-") : -len(".jar")]
    raise DbtRuntimeError(f"pyspark's Derby jar is not in {jars}")


def local_path(path: str) -> str:
    """A path without a scheme is the user's: `~` and relative paths resolve as `folder` does."""
    return path if urlparse(path).scheme else os.path.abspath(os.path.expanduser(path))


def _text(spec: dict, key: str) -> str | None:
    value = spec.get(key)
    if value is None or isinstance(value, str):
        return value
    # YAML turns unquoted 0123, yes or 12:30 into numbers and booleans: never guess back.
    raise DbtRuntimeError(
        f"profile key `metastore.{key}` takes text, not {type(value).__name__}: quote it"
    )


def metastore(spec: Any) -> Metastore | None:
    """The profile's `metastore:`, checked before any JVM starts; errors name the key."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise DbtRuntimeError(
            "profile key `metastore` takes a mapping (url: jdbc:..., or uris: thrift://...)"
        )
    unknown = sorted(set(spec) - set(METASTORE_KEYS))
    if unknown:
        raise DbtRuntimeError(
            f"profile key `metastore.{unknown[0]}` is not known; `metastore` takes "
            + ", ".join(METASTORE_KEYS)
        )
    uris = spec.get("uris")
    if isinstance(uris, list):
        uris = ",".join(str(uri) for uri in uris)
    url = _text(spec, "url")
    if bool(url) == bool(uris):
        raise DbtRuntimeError(
            "profile key `metastore` takes one of `url` (a JDBC URL: the metastore's database) "
            "or `uris` (thrift://host:9083: a Hive metastore service)"
        )
    if uris:
        return _service(spec, str(uris))
    url = str(url)
    match = re.match(r"jdbc:([a-z0-9]+):", url)
    if match is None:
        raise DbtRuntimeError(
            f"profile key `metastore.url` is a JDBC URL (jdbc:...), not {mask(url)!r}"
        )
    protocol = match.group(1)
    if protocol == "derby" and not url.startswith("jdbc:derby://"):
        raise DbtRuntimeError(
            f"profile key `metastore.url` {mask(url)!r} is an embedded Derby database, which one "
            "process opens at a time, as the folder's own does. Share Derby's network server "
            "(jdbc:derby://host:1527/metastore_db;create=true) or another database."
        )
    driver = _text(spec, "driver") or DRIVERS.get(protocol)
    if driver is None:
        raise DbtRuntimeError(
            f"profile key `metastore.driver`: name the JDBC driver class for jdbc:{protocol}"
        )
    return Metastore(
        url, None, driver, _text(spec, "user"), _text(spec, "password"), _jar_list(spec, protocol)
    )


def _service(spec: dict, uris: str) -> Metastore:
    for key in ("driver", "user", "password", "jars"):
        if key in spec:
            raise DbtRuntimeError(
                f"profile key `metastore.{key}` belongs to `metastore.url`; a metastore "
                "service (`uris`) has its own database settings"
            )
    for uri in uris.split(","):
        if not uri.strip().startswith("thrift://"):
            raise DbtRuntimeError(
                f"profile key `metastore.uris` lists thrift://host:port URIs, not {uri.strip()!r}"
            )
    return Metastore(None, uris, None, None, None, ())


def _jar_list(spec: dict, protocol: str) -> tuple[str, ...]:
    jars = spec.get("jars")
    if jars is None:
        if protocol != "derby":
            raise DbtRuntimeError(
                f"profile key `metastore.jars`: give the jdbc:{protocol} driver's jar as a Maven "
                "coordinate (group:artifact:version, resolved into the jars cache) or a path"
            )
        return (f"org.apache.derby:derbyclient:{pyspark_derby_version()}",)
    found = []
    for jar in [jars] if isinstance(jars, str) else jars:
        entry = str(jar) if ivy.is_coordinate(str(jar)) else local_path(str(jar))
        if not ivy.is_coordinate(entry) and not os.path.isfile(entry):
            raise DbtRuntimeError(
                f"profile key `metastore.jars`: {jar!r} is neither a Maven coordinate "
                "(group:artifact:version) nor a jar file"
            )
        found.append(entry)
    return tuple(found)


def is_embedded(conf: dict[str, str], folder: str) -> bool:
    """Whether the launch conf keeps the catalog in the folder's Derby, however it was set (the
    profile's `metastore:`, or `server_side_parameters` of users who shared one before it)."""
    return (
        conf.get("spark.sql.catalogImplementation") == "hive"
        and not conf.get("spark.hadoop.hive.metastore.uris")
        and conf.get(SECRET_PREFIX + "ConnectionURL") == embedded_url(folder)
    )


def embedded_url(folder: str) -> str:
    return f"jdbc:derby:;databaseName={os.path.join(folder, 'metastore_db')};create=true"


def check_warehouse(warehouse: str, spark_conf: dict[str, str]) -> None:
    """Warns when drivers that share a metastore would commit through a log store that makes a
    commit atomic only inside one JVM: two of them could both be told their commit succeeded."""
    scheme = urlparse(warehouse).scheme or "file"
    if scheme in SAFE_SCHEMES:
        return
    store = spark_conf.get(f"spark.delta.logStore.{scheme}.impl") or spark_conf.get(
        "spark.delta.logStore.class", ""
    )
    if scheme in S3_SCHEMES and store and not store.endswith("S3SingleDriverLogStore"):
        return
    if scheme == "file":
        why = (
            "is on the local file system, where Delta's log store keeps commits atomic only "
            "inside one JVM"
        )
        fix = "put the warehouse on HDFS, ABFS or GCS"
    elif scheme in S3_SCHEMES:
        why = "is on S3, where Delta's default log store keeps commits atomic only inside one JVM"
        fix = f"set spark.delta.logStore.{scheme}.impl={S3_LOG_STORE} (with its DynamoDB table)"
    else:
        why = f"is on {scheme}://, whose Delta log store is not known to admit one commit N"
        fix = "check Delta's storage configuration for it"
    logger.warning(
        f"The warehouse {warehouse} {why}, and the metastore is shared: two processes committing "
        f"to one table could both be told they succeeded while one commit is lost, fence or no "
        f"fence. Run one process at a time, or {fix} ({CLUSTER_DOC}, section Separate drivers)."
    )


def hold_folder(folder: str, wait_seconds: int) -> None:
    """The folder's embedded metastore admits one JVM: a second process is told at once who holds
    it (or waits up to `folder_wait` seconds) instead of failing 40 s later inside Hive."""
    global _folder_lock
    if _folder_lock is not None:
        return
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "session.lock")
    # Held open, and locked, while the process lives.
    lock = open(path, "a+", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
    deadline = time.monotonic() + max(0, wait_seconds)
    told = False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = _holder(lock)
            if time.monotonic() >= deadline:
                lock.close()
                raise DbtRuntimeError(_in_use(folder, holder, wait_seconds)) from None
            if not told:
                logger.warning(
                    f"The embedded lakehouse in {folder} is in use by {holder}; waiting up to "
                    f"{wait_seconds} s for it (profile key `folder_wait`)."
                )
                told = True
            time.sleep(1)
        except OSError as exc:
            # A file system without locks (NFS without lockd, some FUSE mounts): Derby's own
            # refusal, later and less clear, is what remains.
            logger.debug(f"No lock on {path} ({exc}); a second process is not told who holds it")
            lock.close()
            return
    lock.seek(0)
    lock.truncate()
    lock.write(f"{_this_process()} (since {time.strftime('%H:%M:%S')})\n")
    lock.flush()
    _folder_lock = lock


def _this_process() -> str:
    # Who, where and which command; not the whole command line (its --vars may hold secrets).
    args = [os.path.basename(sys.argv[0])] if sys.argv and sys.argv[0] else []
    args += [arg for arg in sys.argv[1:2] if not arg.startswith("-")]
    command = re.sub(r"\s+", " ", " ".join(args) or "python")[:80]
    return f"pid {os.getpid()} on {socket.gethostname()} (user {getpass.getuser()}): {command}"


def _holder(lock: IO[str]) -> str:
    lock.seek(0)
    return re.sub(r"\s+", " ", lock.read(400)).strip() or "another process"


def _in_use(folder: str, holder: str, waited: int) -> str:
    after = f" after waiting {waited} s" if waited > 0 else ""
    return (
        f"The embedded lakehouse in {folder} is in use by {holder}{after}.\n"
        "Its metastore (Derby, embedded in the folder) admits one process at a time. Either:\n"
        "  - wait for that process to end (profile key `folder_wait: <seconds>` waits for it);\n"
        "  - give this run its own `folder:` (a separate lakehouse); or\n"
        "  - share one metastore and warehouse between processes (profile keys `metastore:` and "
        f"`warehouse:`; {CLUSTER_DOC})."
    )
