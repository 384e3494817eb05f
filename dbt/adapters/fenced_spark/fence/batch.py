"""Step 1c: a batch is applied once. A model with `fence_batch_id` records the batch in its
write's tag; a later run of the same batch finds that commit in the log and writes nothing
(a re-run after an unknown outcome: a crash, a lost server), and a run racing it is refused
by it as by any conflict (a double-fired job). Delta's own idempotent writes
(txnAppId/txnVersion) skip silently, only for increasing versions, and outlive a RESTORE
that undid the batch: a backfill or a re-run after the fix would never write."""

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.changes import TableChanges
from dbt.adapters.fenced_spark.fence.context import LOOKBACK
from dbt.adapters.fenced_spark.fence.delta.words import RESETS
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.scope import Judgement
from dbt.adapters.fenced_spark.fence.state import FenceState

if TYPE_CHECKING:
    from dbt.adapters.fenced_spark.fence.report import FenceReport

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


def applied(state: FenceState, recent: Iterable[Commit], changes: TableChanges) -> Commit | None:
    """This node's write of its batch that is still whole in the table, among the newest
    commits (newest first): not undone by a RESTORE to a version before it, nor by a replace.
    When the fence cannot tell (a RESTORE by timestamp names no version; a later commit
    removed a file the batch wrote, or one compacted from it: a DELETE, an UPDATE), it says
    so and writes nothing."""
    if state.batch is None:
        return None
    lineage: int | None = None  # the newest version still in the table, below a RESTORE
    by_timestamp: Commit | None = None
    above: list[Commit] = []  # the commits above it still in the table, newest first
    for commit in recent:
        if lineage is not None and commit.version > lineage:
            continue
        if twin(state, commit):
            if by_timestamp is not None:
                raise DbtRuntimeError(uncertain(state, commit, by_timestamp, RESTORED))
            touched = _touched(changes, commit, above[::-1])
            if touched is not None:
                raise DbtRuntimeError(uncertain(state, commit, touched, REMOVED))
            return commit  # a first run or full refresh of this batch is one of its writes
        above.append(commit)
        if commit.operation == "RESTORE":
            if commit.restored_version is None:
                by_timestamp = by_timestamp or commit
            else:
                lineage = commit.restored_version
            continue
        if commit.operation in RESETS:
            return None
    return None


def _touched(changes: TableChanges, commit: Commit, above: list[Commit]) -> Commit | None:
    """The first commit above the batch's that removed one of its files with a data change,
    following the files through compactions (dataChange false) to the files they wrote."""
    if not above:
        return None
    read = changes.read([commit.version, *(c.version for c in above)])
    files = set(_files(changes, read, commit.version, "added"))
    for later in above:
        removed = _files(changes, read, later.version, "removed")
        if any(removed.get(path) for path in files):
            return later
        if files & removed.keys():  # compacted: its rows moved on
            files |= set(_files(changes, read, later.version, "added"))
    return None


def _files(
    changes: TableChanges, read: Collection[int], version: int, kind: str
) -> dict[str, bool]:
    """The files commit `version` added or removed, each with whether it changed data."""
    if version not in read:
        return {}
    actions = changes.actions(version)
    found = dict.fromkeys(getattr(actions.rearranged, kind, None) or (), False)
    found.update(dict.fromkeys(getattr(actions, kind), True))
    return found


RESTORED = "restored the table by timestamp, which names no version"
REMOVED = "removed rows of a file the batch wrote"


def uncertain(state: FenceState, commit: Commit, later: Commit, what: str) -> str:
    return (
        f"Fenced {state.strategy} into {state.display} ({state.node}) not run: its batch "
        f"{state.batch!r} (fence_batch_id) was committed as {commit.describe()}, and "
        f"{later.describe()} {what}: the fence cannot tell whether the batch is still whole "
        "in the table, so it neither applies the batch again nor skips it. Inspect "
        f"`DESCRIBE HISTORY {state.display}` and the table. If the batch is in the table, "
        "there is nothing to do. To apply it again, give the run another fence_batch_id."
    )


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
    """The configured batch as the tag records it, as text (20260102 and "20260102" are one
    batch); validate.sql refuses anything else before this is asked."""
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value)
    return text if text.strip() else None
