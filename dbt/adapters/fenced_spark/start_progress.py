"""What a long start says while the user waits: the jars Ivy downloads (which, how big, into
which folder) as Ivy reports them, and that the JVM is starting once that has taken more than a
few seconds. A fast start says nothing: the lines are for the first start on a cold cache (Ivy:
33 jars, 89 MB) and a start on a loaded machine, which are silent for up to a minute otherwise."""

import glob
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

from dbt.adapters.events.logging import AdapterLogger

logger = AdapterLogger("FencedSpark")

SLOW_SECONDS = 5.0
POLL_SECONDS = 0.5

# Ivy's own lines (its default message logger: the same in Spark's resolver and in Ivy's main).
RESOLVING = re.compile(r"^:: resolving dependencies ::")
FOUND = re.compile(r"^\s*found \S+#\S+;\S+ in \S+")
REPORT = re.compile(r"^:: resolution report ::")
DOWNLOADING = re.compile(r"^downloading (\S+) \.\.\.")
# `org#module;revision!artifact.ext(type) (ms)`
SUCCESSFUL = re.compile(r"^\s*\[SUCCESSFUL \] ([^#\s]+)#([^;\s]+);([^!\s]+)!([^\s(]+)\S* \((\d+)ms")
RETRIEVED = re.compile(r"^\s*(\d+) artifacts copied, (\d+) already retrieved")
CACHE = re.compile(r"^Ivy Default Cache set to: (.+)$")
RETRIEVE_FOLDER = re.compile(r"^The jars for the packages stored in: (.+)$")


def jars(count: int) -> str:
    return f"{count} jar" if count == 1 else f"{count} jars"


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"


class IvyReport:
    """Ivy's output, a line at a time, as the lines the user reads: nothing while it finds
    modules in its cache; once it downloads, what from where into which folder, each jar with
    its size and the running total, then the whole. `what` names the Maven coordinates,
    `cache` is Ivy's cache folder (where the jars land, by organisation and module)."""

    def __init__(self, what: str, cache: str) -> None:
        self.what, self.cache, self.folder = what, cache, ""
        self.resolving = False
        self.downloading: float | None = None  # since when
        self.reported = 0.0
        self.found = self.jars = self.size = 0

    def line(self, text: str, now: float) -> str | None:
        text = text.rstrip()
        if RESOLVING.match(text):
            self.resolving, self.reported = True, now
        elif REPORT.match(text):
            self.resolving = False
        elif FOUND.match(text):
            self.found += 1
        elif match := CACHE.match(text):
            self.cache = match.group(1)
        elif match := RETRIEVE_FOLDER.match(text):
            self.folder = match.group(1)
        elif (match := DOWNLOADING.match(text)) and self.downloading is None:
            self.downloading = now
            return (
                f"Downloading {self.what} and its dependencies ({self.found} modules) from "
                f"{urlparse(match.group(1)).netloc} into {self.cache}; once: later starts use them"
            )
        elif match := SUCCESSFUL.match(text):
            return self._downloaded(*match.groups())
        elif (match := RETRIEVED.match(text)) and self.jars:
            retrieved = sum(int(count) for count in match.groups())
            return f"{self._whole(now)}; {self.what} uses {jars(retrieved)} in {self.folder}"
        return None

    def _downloaded(self, org: str, module: str, revision: str, artifact: str, ms: str) -> str:
        name, _, ext = artifact.rpartition(".")
        found = glob.glob(os.path.join(self.cache, org, module, "*", f"{name}-{revision}*.{ext}"))
        size = os.path.getsize(found[0]) if found else 0
        self.jars, self.size = self.jars + 1, self.size + size
        return (
            f"  {name}-{revision}.{ext}: {megabytes(size)} in {int(ms) / 1e3:.1f} s "
            f"({self.jars} downloaded, {megabytes(self.size)} so far)"
        )

    def _whole(self, now: float) -> str:
        took = now - (self.downloading or now)
        return f"Downloaded {jars(self.jars)}, {megabytes(self.size)}, in {took:.0f} s"

    def tick(self, now: float) -> str | None:
        """While Ivy resolves before any download (its repositories slow to answer), what it
        has found so far, every few seconds."""
        if not self.resolving or self.downloading is not None:
            return None
        if now - self.reported < SLOW_SECONDS:
            return None
        self.reported = now
        return f"Resolving {self.what}: {self.found} modules found so far"

    def finished(self, now: float) -> str | None:
        """The whole, where no retrieve step reported it (Ivy's main with `-cachepath`)."""
        if not self.jars or self.folder:
            return None
        return f"{self._whole(now)}, into {self.cache}"


@contextmanager
def watch(log_path: str, report: IvyReport, doing: str, done: str) -> Iterator[None]:
    """Reads what is appended to `log_path` while the block runs and says it through dbt's
    logger; after SLOW_SECONDS, or before Ivy's first line, says `doing`, and at the end how
    long it took."""
    stop = threading.Event()
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    started = time.monotonic()
    announced = threading.Event()

    def follow() -> None:
        nonlocal offset
        pending = b""
        while True:
            stopping = stop.wait(POLL_SECONDS)
            now = time.monotonic()
            try:
                with open(log_path, "rb") as log:
                    log.seek(offset)
                    pending += log.read()
                    offset = log.tell()
            except OSError:
                pass
            *lines, pending = pending.split(b"\n")
            said = [report.line(line.decode(errors="replace"), now) for line in lines]
            said = [text for text in [*said, report.tick(now)] if text]
            slow = now - started >= SLOW_SECONDS and not stopping
            if (said or slow) and not announced.is_set():
                announced.set()  # `doing` first, then what it is doing
                logger.info(doing)
            for text in said:
                logger.info(text)
            if stopping:
                return

    follower = threading.Thread(target=follow, name="fenced-spark-progress", daemon=True)
    follower.start()
    try:
        yield
    finally:
        stop.set()
        follower.join()
    # Only when the block succeeded: a failure is told by its error.
    now = time.monotonic()
    if summary := report.finished(now):
        logger.info(summary)
    if announced.is_set():
        logger.info(f"{done} in {now - started:.0f} s")
