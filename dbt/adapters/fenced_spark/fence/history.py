"""Delta history rows, and the userMetadata tag that marks a fenced commit as ours."""

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

TAG_KEY = "dbt_fenced_spark"
# The app id of the SetTransaction every fenced write commits (fence/sequence.py): Delta
# itself refuses a fenced write that another fenced write overtook.
TXN_APP_ID = "dbt-fenced-spark"

# Strategies whose write is a MERGE that keeps Delta's own conflict detection (its commit
# must read vB, or commits above it that do not conflict); every other write is strict
# (its commit must directly follow the snapshot it read).
NATIVE_STRATEGIES = ("merge", "insert", "snapshot")


@dataclass(frozen=True)
class FenceTag:
    invocation_id: str
    node: str
    strategy: str
    read_version: int
    attempt: int = 1
    step: str = "write"
    # The version this commit had to build on (vB, or our previous step's commit); None in
    # tags written before it was recorded.
    expected_version: int | None = None
    # Foreign commits after expected_version that the pre-check judged no conflict.
    tolerated: tuple[int, ...] = ()
    # An append or replace that let Delta commit it above commits landing while it ran
    # (FenceState.strict); tags written before it was recorded never did.
    delta_retries: bool = False
    # A non-strict write's scope (conflicts.scope_json), for the next run's earlier-runs check.
    scope: str | None = None
    # The session's own commitInfo.userMetadata when the fence tagged over it (an audit label).
    user_metadata: str | None = None
    # The model's fence_batch_id: the batch its write applies, which no later run re-applies.
    batch: str | None = None

    @property
    def strict(self) -> bool:
        if self.step != "write":
            return True
        return self.strategy not in NATIVE_STRATEGIES and not self.delta_retries

    def holds(self, commit: "Commit") -> bool | None:
        """Whether `commit`, which carries this tag, passes the fence's check; None when the
        tag does not say what it expected."""
        if self.expected_version is None:
            return None
        # What it built on: the expected version, or the tolerated commits right above it.
        base = self.expected_version
        while base + 1 in self.tolerated:
            base += 1
        if self.strict:
            return commit.read_version == commit.version - 1 and (
                self.expected_version <= commit.read_version <= base
            )
        return (
            commit.read_version is not None and self.expected_version <= commit.read_version <= base
        )

    def to_json(self) -> str:
        # Spark substitutes `${...}` in SQL text, quoted or not, so the SET that carries the tag
        # would rewrite a `$` in a node name; JSON's \u0024 reads back as the same `$`.
        text = json.dumps(
            {
                TAG_KEY: 1,
                "invocation_id": self.invocation_id,
                "node": self.node,
                "strategy": self.strategy,
                "read_version": self.read_version,
                "attempt": self.attempt,
                "step": self.step,
                "expected_version": self.expected_version,
                **({"tolerated": list(self.tolerated)} if self.tolerated else {}),
                **({"delta_retries": True} if self.delta_retries else {}),
                **({"scope": json.loads(self.scope)} if self.scope else {}),
                **({"user_metadata": self.user_metadata} if self.user_metadata is not None else {}),
                **({"batch": self.batch} if self.batch is not None else {}),
            },
            ensure_ascii=True,
            separators=(",", ":"),
        )
        return text.replace("$", "\\u0024")

    def same_run(self, other: Optional["FenceTag"]) -> bool:
        return (
            other is not None
            and other.invocation_id == self.invocation_id
            and other.node == self.node
            and other.attempt == self.attempt
        )

    @classmethod
    def parse(cls, user_metadata: str | None) -> Optional["FenceTag"]:
        if not user_metadata:
            return None
        try:
            data = json.loads(user_metadata)
        except ValueError:
            return None
        if not isinstance(data, dict) or TAG_KEY not in data:
            return None
        try:
            return cls(
                invocation_id=str(data["invocation_id"]),
                node=str(data["node"]),
                strategy=str(data["strategy"]),
                read_version=int(data["read_version"]),
                attempt=int(data.get("attempt", 1)),
                step=str(data.get("step", "write")),
                expected_version=_as_int(data.get("expected_version")),
                tolerated=tuple(int(v) for v in data.get("tolerated") or ()),
                delta_retries=data.get("delta_retries") is True,
                scope=(
                    json.dumps(data["scope"], sort_keys=True, separators=(",", ":"))
                    if isinstance(data.get("scope"), dict)
                    else None
                ),
                user_metadata=_as_text(data.get("user_metadata")),
                batch=_as_text(data.get("batch")),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Commit:
    version: int
    operation: str
    read_version: int | None
    user_metadata: str | None
    user_name: str | None = None
    engine_info: str | None = None
    timestamp: str | None = None
    metrics: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)  # operationParameters
    # The version of the fence's SetTransaction (TXN_APP_ID) in this commit: None when it has
    # none, or the reader cannot see it (DESCRIBE HISTORY shows no txn action).
    fence_txn: int | None = None

    @property
    def tag(self) -> FenceTag | None:
        return FenceTag.parse(self.user_metadata)

    @property
    def compaction(self) -> bool:
        """Delta's auto compaction commits OPTIMIZE right after a write, in the writer's
        session, so it carries whatever tag that write had; the fence never runs OPTIMIZE."""
        return self.operation == "OPTIMIZE"

    @property
    def changed_no_rows(self) -> bool:
        """A MERGE or INSERT whose metrics count no file added or removed, no deletion vector
        and no change file: under the fence's SetTransaction an empty write commits only
        that, and nothing of it can have overwritten anyone. Without metrics (history
        metrics off): False, a data change for all the fence can tell."""
        counts = {k: v for k, v in self.metrics.items() if "Files" in k or "DeletionVectors" in k}
        added = {"MERGE": "numTargetFilesAdded", "WRITE": "numFiles"}.get(self.operation)
        return added is not None and added in counts and all(v == "0" for v in counts.values())

    @property
    def restored_version(self) -> int | None:
        """The version a RESTORE ... TO VERSION AS OF brought back (None: by timestamp)."""
        if self.operation != "RESTORE":
            return None
        return _as_int(self.parameters.get("version"))

    @property
    def writer(self) -> str:
        tag = self.tag
        if tag is not None:
            return f"dbt-fenced-spark {tag.node} (invocation {tag.invocation_id})"
        who = self.user_name or "an unnamed writer"
        # Jobs often label their commits (commitInfo.userMetadata): the best name we have.
        if self.user_metadata:
            who += f' ("{self.user_metadata}")'
        return f"{who} via {self.engine_info}" if self.engine_info else who

    def describe(self) -> str:
        when = f" at {self.timestamp}" if self.timestamp else ""
        return f"v{self.version} {self.operation} by {self.writer}{when}"


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


def _as_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return int(value)


def _as_text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def parse_history(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Commit]:
    """Commits from `DESCRIBE HISTORY` rows, oldest first."""
    index = {name: i for i, name in enumerate(columns)}

    def get(row: Sequence[Any], name: str) -> Any:
        return row[index[name]] if name in index else None

    commits = [
        Commit(
            version=int(get(row, "version")),
            operation=str(get(row, "operation")),
            read_version=_as_int(get(row, "readVersion")),
            user_metadata=_as_text(get(row, "userMetadata")),
            user_name=_as_text(get(row, "userName")),
            engine_info=_as_text(get(row, "engineInfo")),
            timestamp=_as_text(get(row, "timestamp")),
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
    return _as_int(txn.get("version"))


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


class HistoryReader(Protocol):
    def latest_version(self, table: str, known: int | None = None) -> int: ...

    def commits_since(self, table: str, version: int) -> list[Commit]: ...

    def recent(self, table: str, limit: int) -> Iterator[Commit]: ...

    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]: ...

    def settled(self, table: str) -> int | None: ...

    # The fence's SetTransaction version in the table's state at `version` (-1: none yet);
    # None when this reader cannot tell (fence/sequence.py).
    def sequence(self, table: str, version: int) -> int | None: ...


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
