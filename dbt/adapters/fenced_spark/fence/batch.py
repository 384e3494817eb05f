"""Step 1c: a batch is applied once. A model with `fence_batch_id` records the batch in its
write's tag; a later run of the same batch finds that commit in the log and writes nothing
(a re-run after an unknown outcome: a crash, a lost server), and a run racing it is refused
by it as by any conflict (a double-fired job). Delta's own idempotent writes
(txnAppId/txnVersion) skip silently, only for increasing versions, and outlive a RESTORE
that undid the batch: a backfill or a re-run after the fix would never write."""

from collections.abc import Iterable
from typing import TYPE_CHECKING

from dbt.adapters.fenced_spark.fence.capture import LOOKBACK, RESETS
from dbt.adapters.fenced_spark.fence.conflicts import Judgement
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.state import FenceState

if TYPE_CHECKING:
    from dbt.adapters.fenced_spark.fence.errors import FenceReport

__all__ = ["LOOKBACK", "applied", "applied_by", "batch_id", "no_retry", "twin"]


def twin(state: FenceState, commit: Commit) -> bool:
    """`commit` is another run's write of this node's batch."""
    tag = commit.tag
    return (
        state.batch is not None
        and tag is not None
        and tag.batch == state.batch
        and tag.node == state.node
        and tag.step == "write"
        and tag.invocation_id != state.invocation_id
        and not commit.compaction
    )


def applied(state: FenceState, recent: Iterable[Commit]) -> Commit | None:
    """This node's write of its batch that is still in the table, among the newest commits
    (newest first): not undone by a RESTORE to a version before it, nor by a replace. A
    RESTORE by timestamp names no version, so the search ends there, as at a replace."""
    if state.batch is None:
        return None
    lineage: int | None = None  # the newest version still in the table, below a RESTORE
    for commit in recent:
        if lineage is not None and commit.version > lineage:
            continue
        if commit.operation == "RESTORE":
            lineage = commit.restored_version
            if lineage is None:
                return None
            continue
        if twin(state, commit):
            return commit  # a first run or full refresh of this batch is one of its writes
        if commit.operation in RESETS:
            return None
    return None


def applied_by(state: FenceState, judged: Iterable[Judgement]) -> Commit | None:
    """The other run's write of this batch that refused this one."""
    return next((j.commit for j in judged if j.conflict and twin(state, j.commit)), None)


def no_retry(state: FenceState, report: "FenceReport") -> str | None:
    """A refusal by another run's write of this batch: a retry would apply it twice."""
    if report.applied_by is None:
        return None
    return (
        f"v{report.applied_by.version} applied this model's batch {state.batch!r}, and a retry "
        "would apply it again"
    )


def batch_id(value: object) -> str | None:
    """The configured batch as the tag records it: `2026-01-02` and 20260102 alike as text;
    validate.sql refuses anything else before this is asked."""
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value).strip()
    return text or None
