"""A commit as the fence sees it, the userMetadata tag that marks a fenced commit as ours, and
the reader every table format's log offers the steps."""

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

TAG_KEY = "dbt_fenced_spark"
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
                expected_version=as_int(data.get("expected_version")),
                tolerated=tuple(int(v) for v in data.get("tolerated") or ()),
                delta_retries=data.get("delta_retries") is True,
                scope=(
                    json.dumps(data["scope"], sort_keys=True, separators=(",", ":"))
                    if isinstance(data.get("scope"), dict)
                    else None
                ),
                user_metadata=as_text(data.get("user_metadata")),
                batch=as_text(data.get("batch")),
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
        return as_int(self.parameters.get("version"))

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


def as_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return int(value)


def as_text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


class HistoryReader(Protocol):
    def latest_version(self, table: str, known: int | None = None) -> int: ...

    def commits_since(self, table: str, version: int) -> list[Commit]: ...

    def recent(self, table: str, limit: int) -> Iterator[Commit]: ...

    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]: ...

    def settled(self, table: str) -> int | None: ...

    # The fence's SetTransaction version in the table's state at `version` (-1: none yet);
    # None when this reader cannot tell (fence/delta/sequence.py).
    def sequence(self, table: str, version: int) -> int | None: ...
