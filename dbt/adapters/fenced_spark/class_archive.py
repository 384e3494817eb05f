"""Class-data sharing for the embedded session's JVM: the first start writes an archive of the
classes it loaded (Spark, Hive's metastore client, Delta) when the JVM exits; later starts map
it instead of loading and verifying those classes again (about 4 s of a cold start and the
metastore's first use on 2 cores; docs/benchmarks.md part 6).

The JVM checks an archive against its own build and every archived class against its jar, and
runs without one it cannot use, so a stale archive costs speed, never correctness; the
archive's name is a key over what the JVM checks (archive_key), so two venvs sharing the cache
each get their own, and one it refuses anyway is removed for a new one (check_mapped). The JVM
writes the archive in place when it exits (about 15 s, after dbt has returned), so each JVM
writes its own `.part` file; the header goes in last, which tells a whole archive from one cut
short, and only a whole one is renamed to the name later starts use. A JVM that has mapped the
archive keeps its file when a new one is renamed over it."""

import hashlib
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from contextlib import suppress

from dbt.adapters.events.logging import AdapterLogger

logger = AdapterLogger("FencedSpark")

# The first bytes of a dynamic archive's header, written after everything else.
MAGIC = bytes.fromhex("a8ab0bf0")
# A part without a header after this long was cut short (a killed JVM): removed.
ABANDONED_SECONDS = 600.0
# What the JVM prints (a warning, on its stdout: spark.log) when it cannot map an archive.
REFUSED = "Unable to use shared archive"


def java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.isfile(java) else None


# What the archive's layout depends on besides the class path: the heap size (over 32 GB the
# JVM drops compressed oops, and an archive of the other kind fails to map) and any option a
# user adds around the adapter's own (the environment's, Spark's default driver options).
OPTION_KEYS = ("spark.driver.memory", "spark.driver.defaultJavaOptions")
OPTION_VARIABLES = ("JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "SPARK_SUBMIT_OPTS")


def spark_home() -> str | None:
    """Where pyspark's launcher runs Spark from (SPARK_HOME, else the pyspark package)."""
    try:
        from pyspark.find_spark_home import _find_spark_home

        return os.path.abspath(_find_spark_home())  # as the launcher gets it, links kept
    except (ImportError, SystemExit):
        return None  # it exits when there is no Spark to find


def class_path(conf: Mapping[str, str], home: str) -> list[str]:
    """The entries Spark's launcher can put on the driver's class path, in its order: the JVM
    refuses an archive whose class path entries (each jar's path, size and mtime) differ from
    its own, so a second venv's pyspark, in another folder, cannot map the first's. After
    spark-class's AbstractCommandBuilder.buildClassPath."""
    env = os.environ.get
    entries = [env("SPARK_CLASSPATH", ""), conf.get("spark.driver.extraClassPath", "")]
    entries += [env("SPARK_CONF_DIR") or os.path.join(home, "conf")]
    entries += [os.path.join(home, "jars", "*"), env("HADOOP_CONF_DIR", "")]
    entries += [env("YARN_CONF_DIR", ""), env("SPARK_DIST_CLASSPATH", "")]
    return [entry for value in entries for entry in value.split(os.pathsep) if entry]


def stamp(entry: str) -> str:
    """An entry as the JVM checks it: a jar by size and mtime, a `dir/*` by its jars, a
    folder by what is in it (spark-defaults.conf in Spark's conf folder changes the start)."""
    folder, pattern = (os.path.dirname(entry), "*") if entry.endswith("*") else (entry, "")
    if pattern or os.path.isdir(entry):
        names = sorted(_listing(folder))
        if pattern:
            names = [name for name in names if name.lower().endswith(".jar")]
        return f"{entry}[{','.join(_file(os.path.join(folder, name)) for name in names)}]"
    return _file(entry)


def _file(path: str) -> str:
    try:
        status = os.stat(path)
    except OSError:
        return f"{path}:missing"
    return f"{path}:{status.st_size}:{status.st_mtime_ns}"


def _listing(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def archive_key(delta_package: str, conf: Mapping[str, str] | None = None) -> str | None:
    """Everything the JVM checks before it maps an archive (its own build, the class path, the
    options that change the archive's layout), and what decides the classes in it (Spark's
    and Delta's versions). The Delta jars in `spark.jars` are not on the class path: Spark's
    own loader defines their classes, which the JVM matches one by one (size and CRC of each
    class), never refusing the archive for them; the package names them."""
    conf = conf or {}
    java, home = java_binary(), spark_home()
    if java is None or home is None:
        return None
    import pyspark

    parts = [stamp(java), pyspark.__version__, delta_package]
    parts += [stamp(entry) for entry in class_path(conf, home)]
    parts += [f"{key}={conf.get(key, '')}" for key in OPTION_KEYS]
    parts += [f"{name}={os.environ.get(name, '')}" for name in OPTION_VARIABLES]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def java_options(jars_cache: str, delta_package: str, conf: Mapping[str, str] | None = None) -> str:
    """The JVM options for a start with `conf`: map the archive, or write one at exit; nothing
    while another JVM is writing one, or when there is nowhere to keep it."""
    key = archive_key(delta_package, conf) if jars_cache else None
    if key is None:
        return ""
    folder = os.path.join(jars_cache, "cds")
    final = os.path.join(folder, f"{key}.jsa")
    try:
        if _publish(folder, key, final):
            logger.debug(f"No class archive for this start: another JVM is writing {key} now")
            return ""
        if os.path.isfile(final):
            return f"-XX:SharedArchiveFile={final}"
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        logger.debug(f"No class archive in {folder}: {exc}")
        return ""
    part = os.path.join(folder, f"{key}.{uuid.uuid4().hex[:8]}.part")
    logger.debug(f"No class archive {final} yet: this JVM writes one when it exits")
    # Its warnings (classes it cannot archive) would fill spark.log.
    return f"-XX:ArchiveClassesAtExit={part} -Xlog:cds=off"


def _publish(folder: str, key: str, final: str) -> bool:
    """Rename a whole part to `final`, remove abandoned ones; True while one is being written."""
    if not os.path.isdir(folder):
        return False
    writing = False
    for name in sorted(os.listdir(folder)):
        if not (name.startswith(f"{key}.") and name.endswith(".part")):
            continue
        part = os.path.join(folder, name)
        try:
            with open(part, "rb") as archive:
                whole = archive.read(len(MAGIC)) == MAGIC
            if whole and not os.path.isfile(final):
                os.replace(part, final)
            elif whole or time.time() - os.path.getmtime(part) > ABANDONED_SECONDS:
                os.remove(part)
            else:
                writing = True
        except OSError:
            continue  # another start got to it first
    return writing


def check_mapped(options: str, log_path: str, offset: int) -> None:
    """The JVM says in its output when it could not map the archive (a difference the key does
    not cover): that archive is removed, so the next start writes one it can map instead of
    every start failing on it. `offset` is where this start's output begins."""
    mapping = re.search(r"-XX:SharedArchiveFile=(\S+)", options)
    if mapping is None:
        return
    archive = mapping.group(1)
    try:
        with open(log_path, errors="replace") as log:
            log.seek(offset)
            refused = [line.strip() for line in log.read(1 << 16).splitlines() if REFUSED in line]
    except OSError:
        return
    if not refused:
        logger.debug(f"The JVM mapped the class archive {archive} (it printed no refusal)")
        return
    with suppress(OSError):
        os.remove(archive)
    said = re.sub(r"^(\[[^]]*\])+\s*", "", refused[0])  # without [uptime][level][tags]
    logger.debug(f"The JVM did not map {archive} ({said}); removed: the next start writes one")
