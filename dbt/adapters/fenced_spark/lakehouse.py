"""Where the embedded session keeps its tables and catalog: the profile's folder (a local
warehouse and an embedded Derby metastore, one process at a time), or a warehouse on a shared
file system and a metastore that several drivers share (`warehouse:`, `metastore:`)."""

import fcntl
import glob
import os
import re
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
# Storage whose Delta log store lets only one JVM commit to a table at a time (docs/cluster.md).
SINGLE_DRIVER_SCHEMES = {
    "file": "the local file system",
    "s3": "S3",
    "s3a": "S3",
    "s3n": "S3",
}
S3_LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"

# Bound while the process lives: the OS releases it when the process ends, killed or not.
_folder_lock: IO[str] | None = None
# A wait that ran out: the next start of this process (the early start failed) says so at once.
_waited_out: DbtRuntimeError | None = None


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


def pyspark_derby_version() -> str:
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    for jar in glob.glob(os.path.join(jars, "derby-*.jar")):
        return os.path.basename(jar)[len("derby-") : -len(".jar")]
    raise DbtRuntimeError(f"pyspark's Derby jar is not in {jars}")


def metastore(spec: Any) -> Metastore | None:
    """The profile's `metastore:`, checked before any JVM starts; errors name the key."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise DbtRuntimeError(
            f"profile key `metastore` takes a mapping (url: jdbc:..., or uris: thrift://...), "
            f"not {spec!r}"
        )
    unknown = sorted(set(spec) - set(METASTORE_KEYS))
    if unknown:
        raise DbtRuntimeError(
            f"profile key `metastore.{unknown[0]}` is not known; `metastore` takes "
            + ", ".join(METASTORE_KEYS)
        )
    url, uris = spec.get("url"), spec.get("uris")
    if bool(url) == bool(uris):
        raise DbtRuntimeError(
            "profile key `metastore` takes one of `url` (a JDBC URL: the metastore's database) "
            "or `uris` (thrift://host:9083: a Hive metastore service)"
        )
    if uris:
        for key in ("driver", "user", "password", "jars"):
            if key in spec:
                raise DbtRuntimeError(
                    f"profile key `metastore.{key}` belongs to `metastore.url`; a metastore "
                    f"service (`uris`) has its own database settings"
                )
        return Metastore(None, str(uris), None, None, None, ())
    url = str(url)
    match = re.match(r"jdbc:([a-z0-9]+):", url)
    if match is None:
        raise DbtRuntimeError(f"profile key `metastore.url` is a JDBC URL (jdbc:...), not {url!r}")
    protocol = match.group(1)
    if protocol == "derby" and not url.startswith("jdbc:derby://"):
        raise DbtRuntimeError(
            f"profile key `metastore.url` {url!r} is an embedded Derby database, which one "
            "process opens at a time, as the folder's own does. Share Derby's network server "
            "(jdbc:derby://host:1527/metastore_db;create=true) or another database."
        )
    jars = spec.get("jars")
    if jars is None:
        jars = (
            [f"org.apache.derby:derbyclient:{pyspark_derby_version()}"]
            if protocol == "derby"
            else []
        )
    if isinstance(jars, str):
        jars = [jars]
    driver = spec.get("driver") or DRIVERS.get(protocol)
    if driver is None:
        raise DbtRuntimeError(
            f"profile key `metastore.driver`: name the JDBC driver class for {url.split('//')[0]}"
        )
    if not jars and protocol != "derby":
        raise DbtRuntimeError(
            f"profile key `metastore.jars`: give {driver}'s jar as a Maven coordinate "
            "(group:artifact:version, resolved into the jars cache) or a path"
        )
    for jar in jars:
        if not ivy.is_coordinate(str(jar)) and not os.path.isfile(str(jar)):
            raise DbtRuntimeError(
                f"profile key `metastore.jars`: {jar!r} is neither a Maven coordinate "
                "(group:artifact:version) nor a jar file"
            )
    user, password = spec.get("user"), spec.get("password")
    return Metastore(
        url,
        None,
        str(driver),
        None if user is None else str(user),
        None if password is None else str(password),
        tuple(str(jar) for jar in jars),
    )


def check_warehouse(warehouse: str, shared: bool, spark_conf: dict[str, str]) -> None:
    """Warns when drivers that share a metastore would commit through a log store that makes a
    commit atomic only inside one JVM: two of them could both be told their commit succeeded."""
    if not shared:
        return
    scheme = urlparse(warehouse).scheme or "file"
    where = SINGLE_DRIVER_SCHEMES.get(scheme)
    if where is None:
        return
    if where == "S3" and any(k.startswith("spark.delta.logStore.") for k in spark_conf):
        return
    fix = (
        f"set spark.delta.logStore.{scheme}.impl={S3_LOG_STORE} (with its DynamoDB table)"
        if where == "S3"
        else "put the warehouse on HDFS, ABFS or GCS"
    )
    logger.warning(
        f"The warehouse {warehouse} is on {where} and the metastore is shared: Delta's log store "
        f"for {scheme}:// keeps commits atomic only inside one JVM, so two processes committing "
        f"to one table can both be told they succeeded while one commit is lost, fence or no "
        f"fence. Run one process at a time, or {fix} (docs/cluster.md)."
    )


def hold_folder(folder: str, wait_seconds: int) -> None:
    """The folder's embedded metastore admits one JVM: a second process is told at once who holds
    it (or waits up to `folder_wait` seconds) instead of failing 40 s later inside Hive."""
    global _folder_lock, _waited_out
    if _folder_lock is not None:
        return
    if _waited_out is not None:
        raise _waited_out
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "session.lock")
    lock = open(path, "a+")  # noqa: SIM115 - held open, and locked, while the process lives
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
                refused = DbtRuntimeError(_in_use(folder, holder, wait_seconds))
                if wait_seconds > 0:
                    _waited_out = refused
                raise refused from None
            if not told:
                logger.warning(
                    f"The embedded lakehouse in {folder} is in use by {holder}; waiting up to "
                    f"{wait_seconds} s for it (profile key `folder_wait`)."
                )
                told = True
            time.sleep(1)
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}: {' '.join(sys.argv)} (since {time.strftime('%H:%M:%S')})\n")
    lock.flush()
    _folder_lock = lock


def _holder(lock: IO[str]) -> str:
    lock.seek(0)
    return lock.read().strip() or "another process"


def _in_use(folder: str, holder: str, waited: int) -> str:
    after = f" after waiting {waited} s" if waited > 0 else ""
    return (
        f"The embedded lakehouse in {folder} is in use by {holder}{after}.\n"
        "Its metastore (Derby, embedded in the folder) admits one process at a time. Either:\n"
        "  - wait for that process to end (profile key `folder_wait: <seconds>` waits for it);\n"
        "  - give this run its own `folder:` (a separate lakehouse); or\n"
        "  - share one metastore and warehouse between processes (profile keys `metastore:` and "
        "`warehouse:`, docs/cluster.md)."
    )
