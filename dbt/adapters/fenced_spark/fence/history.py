"""Delta history rows, and the userMetadata tag that marks a fenced commit as ours."""

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

TAG_KEY = "dbt_fenced_spark"

# Strategies whose write is a MERGE that keeps Delta's own conflict detection (its commit
# must read vB); every other write is strict (its commit must be vB+1).
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

    @property
    def strict(self) -> bool:
        return self.step != "write" or self.strategy not in NATIVE_STRATEGIES

    def holds(self, commit: "Commit") -> bool | None:
        """Whether `commit`, which carries this tag, passes the fence's check; None when the
        tag does not say what it expected."""
        if self.expected_version is None:
            return None
        if self.strict:
            return commit.version == self.expected_version + 1
        return commit.read_version == self.expected_version

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

    @property
    def tag(self) -> FenceTag | None:
        return FenceTag.parse(self.user_metadata)

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
        )
        for row in rows
    ]
    return sorted(commits, key=lambda c: c.version)


class HistoryReader(Protocol):
    def latest_version(self, table: str, known: int | None = None) -> int: ...

    def commits_since(self, table: str, version: int) -> list[Commit]: ...

    def recent(self, table: str, limit: int) -> Iterator[Commit]: ...


class HistorySource(Protocol):
    def history(self, table: str, limit: int) -> list[Commit]: ...


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

    def commits_since(self, table: str, version: int) -> list[Commit]:
        """Commits after `version`, oldest first; reads only the log's tail."""
        limit = self.PAGE
        while True:
            commits = self.source.history(table, limit)
            if len(commits) < limit or commits[0].version <= version + 1:
                return [c for c in commits if c.version > version]
            limit *= 4
