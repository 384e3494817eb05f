"""Delta's history: DESCRIBE HISTORY rows as commits (any connection method's reader of last
resort), the log's file names, and the fence's SetTransaction in a commit or a checksum."""

import json
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from dbt.adapters.fenced_spark.fence.history import Commit, as_int, as_text

# The app id of the SetTransaction every fenced write commits (fence/delta/sequence.py): Delta
# itself refuses a fenced write that another fenced write overtook.
TXN_APP_ID = "dbt-fenced-spark"


def _as_map(value: Any) -> dict[str, str]:
    # The session returns a dict; the Thrift server a JSON text.
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    try:
        data = json.loads(value)
    except (TypeError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def parse_history(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Commit]:
    """Commits from `DESCRIBE HISTORY` rows, oldest first."""
    index = {name: i for i, name in enumerate(columns)}

    def get(row: Sequence[Any], name: str) -> Any:
        return row[index[name]] if name in index else None

    commits = [
        Commit(
            version=int(get(row, "version")),
            operation=str(get(row, "operation")),
            read_version=as_int(get(row, "readVersion")),
            user_metadata=as_text(get(row, "userMetadata")),
            user_name=as_text(get(row, "userName")),
            engine_info=as_text(get(row, "engineInfo")),
            timestamp=as_text(get(row, "timestamp")),
            metrics=_as_map(get(row, "operationMetrics")),
            parameters=_as_map(get(row, "operationParameters")),
        )
        for row in rows
    ]
    return sorted(commits, key=lambda c: c.version)


def commit_file(version: int) -> str:
    return f"{version:020d}.json"


def checksum_file(version: int) -> str:
    return f"{version:020d}.crc"


def fence_txn(action: dict[str, Any]) -> int | None:
    """The version of a `txn` action of the fence's app id; None for any other action."""
    txn = action.get("txn")
    if not isinstance(txn, dict) or txn.get("appId") != TXN_APP_ID:
        return None
    return as_int(txn.get("version"))


def checksum_sequence(text: str) -> int | None:
    """The fence's SetTransaction version in a version checksum (`N.crc`): Delta's state at N,
    -1 when it holds none. None when the checksum does not list the table's SetTransactions
    (Delta leaves them out above a count) or does not parse."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    txns = data.get("setTransactions") if isinstance(data, dict) else None
    if not isinstance(txns, list):
        return None
    found = [fence_txn({"txn": t}) for t in txns if isinstance(t, dict)]
    return max((v for v in found if v is not None), default=-1)


class HistorySource(Protocol):
    def history(self, table: str, limit: int) -> list[Commit]: ...

    def fetch(self, sql: str) -> list[Sequence[Any]]: ...

    def describe(self, table: str) -> list[Sequence[Any]]: ...

    def location(self, table: str) -> str: ...


class SqlHistory:
    """The fence's history reads as `DESCRIBE HISTORY t LIMIT n`: any connection method."""

    PAGE = 16

    def __init__(self, source: HistorySource) -> None:
        self.source = source

    def latest_version(self, table: str, known: int | None = None) -> int:
        # `known` only spares the log reader its search; one row of history is the answer here.
        return self.source.history(table, 1)[-1].version

    def recent(self, table: str, limit: int) -> Iterator[Commit]:
        """The newest `limit` commits, newest first: one history read."""
        return reversed(self.source.history(table, limit))

    def settled(self, table: str) -> int | None:
        return None  # the newest version costs a history read here: capture reads commits

    def sequence(self, table: str, version: int) -> int | None:
        """DESCRIBE HISTORY shows no txn action: Delta's checksum of `version`, else the commit
        files at or below it (at most 32), read by the server; None when neither says."""
        try:
            location = self.source.location(table).rstrip("/")
            path = f"{location}/_delta_log/{checksum_file(version)}"
            rows = self.source.fetch(
                f"SELECT decode(content, 'UTF-8') FROM binaryFile.`{path.replace('`', '``')}`"
            )
        except Exception:
            rows = []  # no checksum (yet): the commits say it
        if rows and (found := checksum_sequence(str(rows[0][0] or ""))) is not None:
            return found
        versions = list(range(max(version - 31, 0), version + 1))
        try:
            lines = self.actions(table, versions)
        except Exception:
            return None
        for below in reversed(versions):
            if below not in lines:
                return None  # cleaned up, or unreadable: unknown
            txns = [fence_txn(json.loads(line)) for line in lines[below] if line.strip()]
            found = next((t for t in txns if t is not None), None)
            if found is not None:
                return found
        return -1 if versions[0] == 0 else None

    def commits_since(self, table: str, version: int) -> list[Commit]:
        """Commits after `version`, oldest first; reads only the log's tail."""
        limit = self.PAGE
        while True:
            commits = self.source.history(table, limit)
            if len(commits) < limit or commits[0].version <= version + 1:
                return [c for c in commits if c.version > version]
            limit *= 4

    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]:
        """Each commit file's lines (its actions), read by the server: the client may not see
        the table's storage at all. A version whose file is gone is missing from the answer."""
        names = [commit_file(v) for v in versions]
        pattern = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
        path = f"{self.source.location(table).rstrip('/')}/_delta_log/{pattern}"
        rows = self.source.fetch(
            f"SELECT _metadata.file_name, value FROM text.`{path.replace('`', '``')}`"
        )
        lines: dict[int, list[str]] = {}
        for name, value in rows:
            lines.setdefault(int(str(name).split(".")[0]), []).append(str(value))
        return lines
