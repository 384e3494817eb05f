"""The words a fence failure uses: the engine's own message, what became of the table, the
outcome a run ends with, and the names of commits in a message."""

import re
import textwrap
from enum import StrEnum
from typing import Protocol

from dbt.adapters.fenced_spark.fence.history import Commit


class Attempt(Protocol):
    """What a message says of the attempt it ends (state.FenceState)."""

    @property
    def strategy(self) -> str: ...

    @property
    def read_version(self) -> int: ...

    @property
    def expected_version(self) -> int: ...

    @property
    def display(self) -> str: ...

    @property
    def node(self) -> str: ...


def first_line(error: BaseException) -> str:
    """An error's first line, at most 200 characters: what a judgement quotes of it."""
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__


def first_lines(text: str, limit: int = 12) -> str:
    """An engine error without its stack trace, or the query plan Spark appends after the
    SQLSTATE that ends its own message."""
    kept = []
    for line in text.splitlines():
        if line.lstrip().startswith("at "):
            continue
        kept.append(line)
        if "SQLSTATE:" in line:
            break
    return "\n".join(kept[:limit])


def engine_message(error: BaseException) -> str:
    """The engine's own words: dbt-spark re-raises every error once more, and each level adds
    an indented "Runtime Error" header."""
    text = str(getattr(error, "msg", None) or error)
    while text.startswith("Runtime Error\n"):
        text = textwrap.dedent(text.split("\n", 1)[1])
    return text.strip()


# Delta's own error class, wherever the method puts it (Thrift prefixes the server's words).
DELTA_ERROR = re.compile(r"\[DELTA_[A-Z0-9_]+\]")
# Delta ends its conflict errors with one of these; quoted in a fence message it would contradict
# the message's own advice (re-run, fence_retries, or the RESTORE it names).
_TRY_AGAIN = re.compile(
    r"\s*Please (?:try the operation again|retry the operation)\.?", re.IGNORECASE
)


def reason(error: BaseException, limit: int = 300) -> str:
    """The engine's own first line, without Delta's "please try again"."""
    lines = [line.strip() for line in engine_message(error).splitlines() if line.strip()]
    first = _TRY_AGAIN.sub("", lines[0]).strip() if lines else ""
    return (first or type(error).__name__)[:limit]


class Gone(StrEnum):
    """What became of a table whose history can no longer be read."""

    DROPPED = "dropped"
    NOT_DELTA = "re-created as a table that is not Delta"


class Outcome(StrEnum):
    COMMITTED = "committed"
    NO_CHANGE = "no_change"
    NEVER_WRITTEN = "never_written"
    REVERTED = "written_and_reverted"
    NOT_REVERTED = "written_not_reverted"
    ALREADY_APPLIED = "batch_already_applied"  # fence_batch_id: written by an earlier run
    # A failed node's, in run_results.json only (docs/inspect.md).
    UNVERIFIED = "unverified"
    COMMITTED_THEN_FAILED = "committed_then_failed"
    EARLIER_RUN_UNRESOLVED = "earlier_run_unresolved"


def node_kind(strategy: str) -> str:
    """What the messages call the node: a snapshot's MERGE is tagged `snapshot`."""
    return "snapshot" if strategy == "snapshot" else "model"


def versions(commits: list[Commit]) -> str:
    """`v3 WRITE, v5 UPDATE`: commits named briefly, where the message lists them in full."""
    return ", ".join(f"v{c.version} {c.operation}" for c in commits)


def step_name(commit: Commit) -> str:
    """`v13 DELETE (pre_hook)`: one of the node's own commits, by its step."""
    step = "auto compaction" if commit.compaction else commit.tag.step if commit.tag else "?"
    return f"v{commit.version} {commit.operation} ({step})"


def named(commits: list[Commit]) -> str:
    return ", ".join(step_name(c) for c in commits)
