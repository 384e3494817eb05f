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

from dbt.adapters.fenced_spark.fence.delta.history import (
    checksum_file,
    checksum_sequence,
    commit_file,
    fence_txn,
)
from dbt.adapters.fenced_spark.fence.history import Commit, HistoryReader

# How far back `sequence` looks for the newest commit with the fence's SetTransaction.
SEQUENCE_LOOKBACK = 32


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

    def head(self, version: int) -> tuple[dict[str, Any], int | None] | None:
        """The commitInfo action and the fence's SetTransaction version (None: none), or None
        when commit `version` does not exist (yet). Delta writes commitInfo first and a
        command's txn before its files, so the lines before the first file action suffice."""
        try:
            reader = self._lines(commit_file(version))
        except Exception:
            if not self.has(version):
                return None
            # A writer's rename landed between the two calls (seen in the soak); commit
            # files never change once they exist, so a second open reads it or says why not.
            reader = self._lines(commit_file(version))
        info: dict[str, Any] | None = None
        txn: int | None = None
        try:
            # Other writers may put commitInfo anywhere: read on until it is found.
            while (line := reader.readLine()) is not None:
                line = str(line)
                if info is not None and line.startswith(('{"add"', '{"remove"', '{"cdc"')):
                    break
                if '"commitInfo"' in line or '"txn"' in line:
                    action = json.loads(line)
                    if "commitInfo" in action:
                        info = dict(action["commitInfo"])
                    txn = fence_txn(action) if txn is None else txn
                    if info is not None and txn is not None:
                        break
            return info or {}, txn
        finally:
            reader.close()

    def checksum_sequence(self, version: int) -> int | None:
        """The fence's SetTransaction version in Delta's checksum of `version` (None: no
        checksum, or one that does not list them)."""
        try:
            reader = self._lines(checksum_file(version))
        except Exception:
            return None  # not written (yet), or not at all
        try:
            lines = []
            while (line := reader.readLine()) is not None:
                lines.append(str(line))
            return checksum_sequence("\n".join(lines))
        finally:
            reader.close()


def commit_from_info(version: int, info: dict[str, Any], txn: int | None = None) -> Commit:
    """A Commit as parse_history builds it from the matching DESCRIBE HISTORY row, with the
    version of the fence's SetTransaction in it (`txn`), which DESCRIBE HISTORY does not show."""
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
        fence_txn=txn,
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
            head = log.head(version)
            if head is None:
                return  # cleaned up after a checkpoint: the log's reach ends here
            yield commit_from_info(version, *head)

    def sequence(self, table: str, version: int) -> int | None:
        """Delta's checksum of `version`, else the newest commit at or below it that holds the
        fence's SetTransaction, at most SEQUENCE_LOOKBACK back; None past that."""
        log = self._log(table)
        if log is None:
            return self.fallback.sequence(table, version)
        for below in range(version, max(version - SEQUENCE_LOOKBACK, -1), -1):
            # A checksum is Delta's own state at its version: exact, whatever came before.
            found = log.checksum_sequence(below)
            if found is not None:
                return found
            head = log.head(below)
            if head is None:
                return None  # cleaned up: what came before is in a checkpoint
            if head[1] is not None:
                return head[1]
        return -1 if version - SEQUENCE_LOOKBACK < 0 else None

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
        while (head := log.head(version + 1)) is not None:
            version += 1
            commits.append(commit_from_info(version, *head))
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
