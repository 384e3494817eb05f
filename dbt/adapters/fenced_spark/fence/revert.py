"""Step 8: on a refusal, undo our own commits at the head of the log (never anyone else's),
then fail saying exactly what of ours stands."""

from dataclasses import dataclass, field
from typing import Any, NoReturn

from dbt.adapters.fenced_spark.fence import batch
from dbt.adapters.fenced_spark.fence.context import FenceContext
from dbt.adapters.fenced_spark.fence.errors import FenceViolation
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.outcome import Outcome, reason, versions
from dbt.adapters.fenced_spark.fence.report import BringBack, FenceReport
from dbt.adapters.fenced_spark.fence.state import OWN_STEPS, FenceState


@dataclass(frozen=True)
class Revert:
    """What a revert did: our commits it undid, the RESTORE that stands, foreign commits it
    rolled back and could not bring back, and why anything of ours was left."""

    reverted: list[Commit] = field(default_factory=list)
    restore: Commit | None = None
    rolled_back: list[Commit] = field(default_factory=list)
    error: str | None = None
    wrote: bool = False
    bring_back: BringBack | None = None


def _landed(commits: list[Commit]) -> str:
    return ", ".join(f"v{c.version}" for c in commits)


def _span(commits: list[Commit]) -> str:
    """`v13` or `v13-v17 (5 commits)`: many commits named by their first and last."""
    if len(commits) <= 3:
        return _landed(commits)
    return f"v{commits[0].version}-v{commits[-1].version} ({len(commits)} commits)"


def refuse(
    context: FenceContext, state: FenceState, cause: str, our_write: Commit | None = None
) -> NoReturn:
    """Fail the node after undoing what it committed since vB, as far as that undoes
    nobody else's commit; the report says exactly what of ours stands."""
    commits = context.commits_since(state.table, state.read_version)
    mine = [
        c
        for c in context.ours(state, commits)
        if c.tag and c.tag.step in OWN_STEPS and not c.compaction
    ]
    if not mine:  # nothing of ours since vB: nothing to undo
        fail(context, state, Outcome.NEVER_WRITTEN, context.foreign(state, commits), cause=cause)
    if our_write is not None and our_write.changed_no_rows:
        # It committed only the fence's SetTransaction: no row of it to undo, and a RESTORE
        # would be a commit of its own, with windows of its own. Our earlier steps still are.
        mine = [c for c in mine if c.version != our_write.version]
        if not mine:
            landed = context.foreign(state, commits)
            fail(context, state, Outcome.NEVER_WRITTEN, landed, cause=cause, empty=our_write)
        our_write = None
    revert = undo_ours(context, state, commits)
    if our_write is None:
        outcome = Outcome.NEVER_WRITTEN
    elif our_write in revert.reverted:
        outcome = Outcome.REVERTED
    else:
        outcome = Outcome.NOT_REVERTED
    if revert.wrote:  # the RESTOREs are ours; what landed meanwhile is read anew
        commits = context.commits_since(state.table, state.read_version)
    fail(
        context,
        state,
        outcome,
        context.foreign(state, commits),
        cause=cause,
        our_version=our_write.version if our_write else None,
        revert_version=revert.restore.version if revert.restore else None,
        revert_error=revert.error,
        ours=mine,
        reverted=revert.reverted,
        rolled_back=revert.rolled_back,
        bring_back=revert.bring_back,
    )


def undo_ours(context: FenceContext, state: FenceState, commits: list[Commit]) -> "Revert":
    """RESTORE over the run of our own commits at the head of the log, and only that: a
    foreign commit below or above it stays. A RESTORE that turns out to have read a foreign
    commit (one that landed after we looked) is itself undone."""
    latest = context.latest_version(state.table, known=commits[-1].version)
    if latest != commits[-1].version:
        commits = context.commits_since(state.table, state.read_version)
    own = [c for c in context.ours(state, commits) if c.tag and c.tag.step in OWN_STEPS]
    head: list[Commit] = []
    for commit in reversed(commits):
        if commit not in own:
            break
        head.insert(0, commit)
    if not [c for c in head if not c.compaction]:
        # Only our auto compaction at the head: what blocks the revert is every foreign
        # commit above our newest one of data.
        newest = max((c.version for c in own if not c.compaction), default=-1)
        blocking = [c for c in commits if c not in own and c.version > newest]
        return Revert(error=f"{_span(blocking)} landed after it, so a RESTORE would undo that too")
    top = head[-1].version
    restore, failed = tagged_restore(context, state, head[0].version - 1, "revert", after=top)
    if restore is None or restore.read_version is None:
        if failed:
            return Revert(error=f"the RESTORE failed: {failed}", wrote=True)
        return Revert(error="the RESTORE's commit is not in the table's history", wrote=True)
    if restore.read_version == top:
        # Ours below a foreign commit stay: restoring them would undo that commit too.
        kept = [c for c in own if c.version < head[0].version]
        error = None
        if kept:
            blocking = [c for c in commits if kept[0].version < c.version < head[0].version]
            blocking = [c for c in blocking if c not in own]
            error = f"{_landed(blocking)} landed after them, so a RESTORE would undo that too"
        return Revert(reverted=head, restore=restore, wrote=True, error=error)
    # A commit landed between our look at the head and the RESTORE's snapshot, and the
    # RESTORE rolled it back with ours: restore the version it read (theirs and ours).
    read = restore.read_version
    undo, failed = tagged_restore(context, state, read, "revert_undo", after=restore.version)
    log = {c.version: c for c in context.commits_since(state.table, state.read_version)}
    slipped = [c for c in log.values() if top < c.version <= read]
    what = f"{versions(slipped) or 'a commit'} landed just before the RESTORE (v{restore.version})"
    if undo is None or undo.read_version is None:
        return Revert(
            reverted=head,
            restore=restore,
            rolled_back=slipped,
            wrote=True,
            error=f"{what}, which rolled it back too; undoing the RESTORE failed: "
            f"{failed or 'its commit is not in the history'}",
            bring_back=BringBack(read, all(present(log, c, read) is not False for c in head)),
        )
    restored = f"{what}, which rolled it back too, so v{undo.version} restored v{read}"
    # What slipped in may itself have undone ours (another writer's RESTORE): then the
    # version the undo restored holds none of it.
    gone = [c for c in head if present(log, c, read) is False]
    undone_by = taken_by(log, gone[-1], read)[1] if gone else None
    if gone and undone_by:
        restored += f", where v{undone_by.version} RESTORE had undone this run's {versions(gone)}"
    # Yet another commit landed in the same window before the undo, and the undo took it:
    # no RESTORE now gives back both it and what the first RESTORE took (docs/limits.md).
    # A compaction (no data change) taken with it is nothing lost.
    taken = [
        c
        for c in context.foreign(state, list(log.values()))
        if restore.version < c.version <= undo.read_version and not c.compaction
    ]
    if not taken:
        return Revert(
            reverted=gone,
            restore=undone_by,
            wrote=True,
            error=f"{restored}: the table is as it was before the RESTORE",
        )
    back = undo.read_version
    kept = [c for c in head if c not in gone]
    undoes_ours = [c for c in kept if present(log, c, back) is False]
    return Revert(
        reverted=gone,
        restore=undone_by,
        rolled_back=taken,
        wrote=True,
        error=f"{restored}; but {versions(taken)} landed just before that RESTORE "
        f"(v{undo.version}), which rolled it back",
        bring_back=BringBack(
            back,
            with_ours=bool(kept) and not undoes_ours,
            undoes=[c for c in slipped if present(log, c, back) is False],
            undoes_ours=undoes_ours,
        ),
    )


def present(log: dict[int, Commit], commit: Commit, at: int) -> bool | None:
    """Whether `commit`'s change is in the table at version `at` (`taken_by`)."""
    found, _ = taken_by(log, commit, at)
    return found


def taken_by(log: dict[int, Commit], commit: Commit, at: int) -> tuple[bool | None, Commit | None]:
    """Whether `commit`'s change is in the table at version `at`, and if not, the RESTORE
    that took it out: one above it to a version below it; one to a version at or above it
    leaves the question to that version. None where the log cannot say (a RESTORE by
    timestamp, a version not read)."""
    version = at
    while version > commit.version:
        step = log.get(version)
        if step is None:
            return None, None
        if step.operation == "RESTORE":
            target = step.restored_version
            if target is None:
                return None, None
            if target < commit.version:
                return False, step
            version = target
            continue
        version -= 1
    return True, None


def tagged_restore(
    context: FenceContext, state: FenceState, version: int, step: str, after: int
) -> tuple[Commit | None, str | None]:
    """A tagged RESTORE that commits only on the snapshot it read (never past a commit
    that landed meanwhile): its commit, found by its tag even when the statement raised (it
    may have committed first), and the statement's error."""
    failed = None
    try:
        # Once: a RESTORE replayed after a lost connection would commit a second time.
        with context.tagged(state, step, strict=True), context.single_attempt():
            context.format.undo(state.table, version)
    except Exception as exc:
        failed = reason(exc)
    restores = context.ours(state, context.commits_since(state.table, after), step)
    return (restores[-1] if restores else None), failed


def fail(
    context: FenceContext, state: FenceState, outcome: Outcome, landed: list[Commit], **kw: Any
) -> NoReturn:
    raise FenceViolation(
        FenceReport(
            strategy=state.strategy,
            table=state.display,
            read_version=state.read_version,
            outcome=outcome,
            landed=landed,
            judged={j.commit.version: j for j in state.judged},
            applied_by=batch.applied_by(state, state.judged),
            **kw,
        )
    )
