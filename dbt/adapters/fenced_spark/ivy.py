"""Maven artifacts the JVM needs before it starts (a metastore's JDBC driver goes on the
driver's class path, where `spark.jars.packages` cannot put it), resolved by the Ivy that
pyspark ships, into the same cache as Delta's jars."""

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import start_progress

logger = AdapterLogger("FencedSpark")

COORDINATE = re.compile(r"^([\w.-]+):([\w.-]+):([\w.+-]+)$")


@contextmanager
def holding(cache: str) -> Iterator[None]:
    """The cache to this process while its Ivy fills it: two Ivys filling one cache at once break
    each other's files (two `dbt` processes, or a test server, starting on a fresh cache)."""
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, "resolving.lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info(f"Waiting for another process to resolve Spark's packages into {cache}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def is_coordinate(entry: str) -> bool:
    return bool(COORDINATE.match(entry)) and not entry.endswith(".jar")


def _ivy_jar() -> str:
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    found = sorted(name for name in os.listdir(jars) if re.fullmatch(r"ivy-[\d.]+\.jar", name))
    if not found:
        raise DbtRuntimeError(f"pyspark's Ivy jar is not in {jars}")
    return os.path.join(jars, found[-1])


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise DbtRuntimeError("No java found (JAVA_HOME or PATH): Spark needs Java 17 or newer")
    return java


def _record(cache: str, coordinate: str) -> str:
    return os.path.join(cache, "resolved", re.sub(r"[^\w.-]", "_", coordinate) + ".cp")


def _recorded(path: str) -> list[str]:
    try:
        with open(path) as record:
            jars = [jar for jar in record.read().strip().split(os.pathsep) if jar]
    except OSError:
        return []
    return jars if jars and all(os.path.isfile(jar) for jar in jars) else []


def classpath(coordinate: str, cache: str) -> list[str]:
    """The jars of one Maven module and its runtime dependencies, in Ivy's cache under `cache`.
    Resolved once, from Maven Central (Ivy's default; the profile's spark.jars.repositories is
    not used here); later calls read the record and start no JVM."""
    match = COORDINATE.match(coordinate)
    if match is None:
        raise DbtRuntimeError(f"{coordinate!r} is not a Maven coordinate (group:artifact:version)")
    record = _record(cache, coordinate)
    jars = _recorded(record)
    if jars:
        return jars
    with holding(cache):
        jars = _recorded(record)
        if jars:
            return jars
        os.makedirs(os.path.dirname(record), exist_ok=True)
        partial = f"{record}.{os.getpid()}"
        _resolve(coordinate, cache, [*match.groups()], partial)
        os.replace(partial, record)
    return _recorded(record)


def _resolve(coordinate: str, cache: str, module: list[str], cachepath: str) -> None:
    """Runs Ivy's main, which writes the jars' paths to `cachepath`; its downloads are said as
    they happen (start_progress follows its output in a file beside it)."""
    log_path = f"{cachepath}.log"
    report = start_progress.IvyReport(coordinate, os.path.join(cache, "cache"))
    try:
        with (
            open(log_path, "w") as log,
            start_progress.watch(
                log_path, report, f"Resolving {coordinate}", f"Resolved {coordinate}"
            ),
        ):
            done = subprocess.run(
                [_java(), "-jar", _ivy_jar(), "-cache", os.path.join(cache, "cache")]
                + ["-dependency", *module, "-confs", "default", "-cachepath", cachepath],
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=600,  # it holds the cache's lock: a hung download must not hold it on
            )
            if done.returncode != 0 or not os.path.exists(cachepath):
                with open(log_path, errors="replace") as output:
                    tail = "\n".join(output.read().strip().splitlines()[-8:])
                raise DbtRuntimeError(f"Ivy could not resolve {coordinate} into {cache}:\n{tail}")
    except subprocess.TimeoutExpired:
        raise DbtRuntimeError(f"Ivy did not resolve {coordinate} within 600 s") from None
    finally:
        with suppress(OSError):
            os.remove(log_path)
