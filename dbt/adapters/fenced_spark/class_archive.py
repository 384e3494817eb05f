"""Class-data sharing for the embedded session's JVM: the first start writes an archive of the
classes it loaded (Spark, Hive's metastore client, Delta) when the JVM exits; later starts map
it instead of loading and verifying those classes again (about 4 s of a cold start and the
metastore's first use on 2 cores; docs/benchmarks.md part 6).

The JVM checks an archive against its own build and every archived class against its jar, and
runs without one it cannot use, so a stale archive costs speed, never correctness. The JVM
writes the archive in place when it exits (about 15 s, after dbt has returned), so each JVM
writes its own `.part` file; the header goes in last, which tells a whole archive from one cut
short, and only a whole one is renamed to the name later starts use. A JVM that has mapped the
archive keeps its file when a new one is renamed over it."""

import hashlib
import os
import shutil
import time
import uuid

from dbt.adapters.events.logging import AdapterLogger

logger = AdapterLogger("FencedSpark")

# The first bytes of a dynamic archive's header, written after everything else.
MAGIC = bytes.fromhex("a8ab0bf0")
# A part without a header after this long was cut short (a killed JVM): removed.
ABANDONED_SECONDS = 600.0


def java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.isfile(java) else None


def archive_key(delta_package: str) -> str | None:
    """What the archive holds depends on the JVM, Spark's build and Delta's."""
    java = java_binary()
    if java is None:
        return None
    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        return None
    stamp = f"{java}:{os.path.getmtime(java)}:{spark_version}:{delta_package}"
    return hashlib.sha1(stamp.encode()).hexdigest()[:16]


def java_options(jars_cache: str, delta_package: str) -> str:
    """The JVM options for this start: map the archive, or write one at exit; nothing while
    another JVM is writing one, or when there is nowhere to keep it."""
    key = archive_key(delta_package) if jars_cache else None
    if key is None:
        return ""
    folder = os.path.join(jars_cache, "cds")
    final = os.path.join(folder, f"{key}.jsa")
    try:
        if _publish(folder, key, final):
            return ""  # another JVM is writing one now
        if os.path.isfile(final):
            return f"-XX:SharedArchiveFile={final}"
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        logger.debug(f"No class archive in {folder}: {exc}")
        return ""
    part = os.path.join(folder, f"{key}.{uuid.uuid4().hex[:8]}.part")
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
