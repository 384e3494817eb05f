"""Another writer of the lakehouse, and the moment races fire at."""

import threading
import time
from collections.abc import Callable
from typing import Any

# Writers armed by `when` and not yet joined or cancelled: tests/conftest.py disarms them
# after every test, so one whose test failed before join() cannot commit into a later test.
_armed: set["ForeignWriter"] = set()


class ForeignWriter:
    """Another writer in the same JVM or server: its own SparkSession, Thrift client or Connect
    session (`newSession()` of the one given), optionally in its own thread. `tag` marks its
    commits' userMetadata, so a history shows whose commit is whose."""

    def __init__(self, spark: Any, tag: str | None = None) -> None:
        self.session = spark.newSession()
        if tag:
            # SQL, not session.conf: a Thrift client has only SQL.
            self.session.sql(f"set spark.databricks.delta.commitInfo.userMetadata={tag}")
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # When the armed statement started and ended (time.monotonic()), to prove an overlap.
        self.started: float | None = None
        self.ended: float | None = None

    def sql(self, statement: str) -> None:
        self.session.sql(statement).collect()

    def when(self, condition: Callable[[], bool], statement: str, timeout: float = 120) -> None:
        """Run `statement` in a thread as soon as `condition()` holds, unless cancelled first."""

        def run() -> None:
            deadline = time.monotonic() + timeout
            try:
                while not condition():
                    if self._stop.is_set():
                        return
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"condition never held for: {statement}")
                    time.sleep(0.05)
                if self._stop.is_set():
                    return
                self.started = time.monotonic()
                self.sql(statement)
                self.ended = time.monotonic()
            except BaseException as exc:  # reported by join()
                self.error = exc

        self._stop.clear()
        self._thread = threading.Thread(target=run, name="foreign-writer", daemon=True)
        _armed.add(self)
        self._thread.start()

    def join(self, timeout: float = 180) -> None:
        assert self._thread is not None
        self._thread.join(timeout=timeout)
        if self._thread.is_alive():
            self.cancel()
            raise TimeoutError(f"the foreign writer still runs after {timeout} s")
        _armed.discard(self)
        if self.error is not None:
            raise self.error

    def cancel(self, timeout: float = 180) -> bool:
        """Disarm: a statement that has not started never runs; one under way is waited for.
        True if it was still waiting for its condition."""
        self._stop.set()
        waiting = self.started is None
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        _armed.discard(self)
        return waiting and self._thread is not None


def disarm_all() -> int:
    """Cancel every writer still armed (a test's finally); how many had not fired."""
    return sum(writer.cancel() for writer in list(_armed))


def active_jobs(spark: Any) -> Callable[[], set[int]]:
    """The running Spark jobs' ids: a server's REST API, or the embedded JVM's tracker."""
    if hasattr(spark, "active_job_ids"):  # a Thrift or Connect client of a test server
        return spark.active_job_ids
    tracker = spark.sparkContext.statusTracker()
    return lambda: set(tracker.getActiveJobsIds())


def job_running_for(running: Callable[[], set[int]], seconds: float = 1.0) -> Callable[[], bool]:
    """True once one Spark job has run for `seconds`: the slowed write, not a metadata query."""
    first_seen: dict[int, float] = {}

    def check() -> bool:
        now = time.monotonic()
        for job in running():
            first_seen.setdefault(job, now)
            if now - first_seen[job] >= seconds:
                return True
        return False

    return check
