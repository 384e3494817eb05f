"""The fence's history reads straight from a Delta table's `_delta_log` (session method only).

`DESCRIBE HISTORY` runs a Spark job, and Delta first lists the whole log directory, so its cost
grows with the history. The fence needs only the newest version and the few commits after vB.
Commit N is the file N.json and versions are contiguous from the last checkpoint on, so a few
file probes from `_last_checkpoint` find the newest version, and each commit's commitInfo line
holds everything DESCRIBE HISTORY would show for it: no Spark job, no listing.
"""

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from dbt.adapters.fenced_spark.fence.history import Commit, HistoryReader, commit_file


class _Log:
    """One table's `_delta_log` through Hadoop's FileSystem, so any storage Spark reads works."""

    def __init__(self, spark: Any, location: Any) -> None:
        jvm = spark._jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self._io = jvm.java.io
        self.dir = self._path(self._path(location), "_delta_log")
        self.fs = self.dir.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())

    def has(self, version: int) -> bool:
        return bool(self.fs.exists(self._path(self.dir, commit_file(version))))

    def has_staged_commits(self) -> bool:
        staged = self._path(self.dir, "_staged_commits")
        return bool(self.fs.exists(staged)) and len(self.fs.listStatus(staged)) > 0

    def _lines(self, name: str) -> Any:
        stream = self.fs.open(self._path(self.dir, name))
        return self._io.BufferedReader(self._io.InputStreamReader(stream, "UTF-8"))

    def checkpoint_version(self) -> int | None:
        # A hint Delta writes after each checkpoint; the versions from there on are all present.
        try:
            reader = self._lines("_last_checkpoint")
        except Exception:
            return None
        try:
            return int(json.loads(reader.readLine())["version"])
        except (TypeError, ValueError, KeyError):
            return None
        finally:
            reader.close()

    def lines(self, version: int) -> list[str] | None:
        """Every action of commit `version`, one JSON text each; None when it does not exist."""
        if not self.has(version):
            return None
        reader = self._lines(commit_file(version))
        try:
            found = []
            while (line := reader.readLine()) is not None:
                found.append(str(line))
            return found
        finally:
            reader.close()

    def commit_info(self, version: int) -> dict[str, Any] | None:
        """The commitInfo action, or None when commit `version` does not exist (yet)."""
        try:
            reader = self._lines(commit_file(version))
        except Exception:
            if not self.has(version):
                return None
            # A writer's rename landed between the two calls (seen in the soak); commit
            # files never change once they exist, so a second open reads it or says why not.
            reader = self._lines(commit_file(version))
        try:
            # Delta writes commitInfo first; other writers may put it anywhere.
            while (line := reader.readLine()) is not None:
                if '"commitInfo"' in line:
                    action = json.loads(line)
                    if "commitInfo" in action:
                        return dict(action["commitInfo"])
            return {}
        finally:
            reader.close()


def commit_from_info(version: int, info: dict[str, Any]) -> Commit:
    """A Commit as parse_history builds it from the matching DESCRIBE HISTORY row."""
    stamp = info.get("inCommitTimestamp", info.get("timestamp"))
    read_version = info.get("readVersion")
    metadata = info.get("userMetadata")
    return Commit(
        version=version,
        operation=str(info.get("operation")),
        read_version=None if read_version is None else int(read_version),
        user_metadata=str(metadata) if metadata else None,
        user_name=info.get("userName") or None,
        engine_info=info.get("engineInfo") or None,
        timestamp=str(datetime.fromtimestamp(stamp / 1000)) if stamp is not None else None,
        metrics={str(k): str(v) for k, v in (info.get("operationMetrics") or {}).items()},
        parameters={
            str(k): str(v)
            for k, v in (info.get("operationParameters") or {}).items()
            if v is not None
        },
    )


class LogTail:
    """The fence's HistoryReader on an embedded session. A table it cannot resolve to a path-based
    Delta log (a catalog-owned table, a view, a table that is gone) goes to `fallback`, which
    is DESCRIBE HISTORY and raises Spark's own error where there is one."""

    def __init__(self, spark: Any, fallback: HistoryReader) -> None:
        self.spark = spark
        self.fallback = fallback
        self._logs: dict[str, _Log | None] = {}

    def _log(self, table: str) -> _Log | None:
        # Resolved once per reader: a fence step is a few calls a few milliseconds apart.
        if table not in self._logs:
            self._logs[table] = self._resolve(table)
        return self._logs[table]

    def _resolve(self, table: str) -> _Log | None:
        state = self.spark._jsparkSession.sessionState()
        try:
            meta = state.catalog().getTableMetadata(state.sqlParser().parseTableIdentifier(table))
        except Exception:
            return None
        provider = meta.provider()
        if not provider.isDefined() or str(provider.get()).lower() != "delta":
            return None
        log = _Log(self.spark, meta.location())
        # Catalog-managed commits wait in _staged_commits until backfilled to N.json; Delta
        # creates the folder for every table, so only files in it say the log is incomplete.
        if log.has_staged_commits():
            return None
        if not log.has(0) and log.checkpoint_version() is None:
            return None  # no log we can read: DESCRIBE HISTORY says what the table is
        return log

    def latest_version(self, table: str, known: int | None = None) -> int:
        log = self._log(table)
        if log is None:
            return self.fallback.latest_version(table, known)
        if known is not None and log.has(known):
            start = known
        else:
            checkpoint = log.checkpoint_version()
            start = checkpoint if checkpoint is not None else -1
        return _gallop(log, start)

    def settled(self, table: str) -> int | None:
        return None  # reading commits costs no statement here: capture always reads them

    def recent(self, table: str, limit: int) -> Iterator[Commit]:
        """Newest first, one commit file at a time: a caller that stops early reads little."""
        log = self._log(table)
        if log is None:
            yield from self.fallback.recent(table, limit)
            return
        latest = self.latest_version(table)
        for version in range(latest, max(latest - limit, -1), -1):
            info = log.commit_info(version)
            if info is None:
                return  # cleaned up after a checkpoint: the log's reach ends here
            yield commit_from_info(version, info)

    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]:
        log = self._log(table)
        if log is None:
            return self.fallback.actions(table, versions)
        found = {v: log.lines(v) for v in versions}
        return {v: lines for v, lines in found.items() if lines is not None}

    def commits_since(self, table: str, version: int) -> list[Commit]:
        log = self._log(table)
        if log is None:
            return self.fallback.commits_since(table, version)
        commits = []
        while (info := log.commit_info(version + 1)) is not None:
            version += 1
            commits.append(commit_from_info(version, info))
        return commits


def _gallop(log: _Log, start: int) -> int:
    """The newest version, given `start` exists (or is -1): double the step until a probe
    misses, then bisect. Versions are contiguous, so probes stay few at any history length."""
    low, step = start, 1
    while log.has(low + step):
        low += step
        step *= 2
    high = low + step
    while high - low > 1:
        middle = (low + high) // 2
        if log.has(middle):
            low = middle
        else:
            high = middle
    return low
