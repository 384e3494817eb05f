"""Step 1: capture vB, and find an earlier run of the node that never reached its verdict."""

import itertools
from collections.abc import Iterator
from dataclasses import replace

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence import revert
from dbt.adapters.fenced_spark.fence.context import LOOKBACK, FenceContext
from dbt.adapters.fenced_spark.fence.delta.words import GONE, RESETS
from dbt.adapters.fenced_spark.fence.errors import FenceUnresolved
from dbt.adapters.fenced_spark.fence.history import Commit, FenceTag
from dbt.adapters.fenced_spark.fence.outcome import Gone, Outcome, reason
from dbt.adapters.fenced_spark.fence.scope import STEPS, first_conflict, scope_from_json
from dbt.adapters.fenced_spark.fence.state import OWN_STEPS, FenceState


def capture(context: FenceContext, table: str) -> tuple[int, Iterator[Commit] | None]:
    """vB, and the newest commits newest first for `check_earlier_runs`: over SQL one read
    serves both. None for the commits when the node's last run left the table at vB with its
    verdict (`settled`): that run checked them, and nothing landed since."""
    settled = context.settled(table)
    if settled is not None:
        return settled, None
    recent = iter(context.log.recent(table, LOOKBACK))
    newest = next(recent)
    return newest.version, itertools.chain([newest], recent)


def check_earlier_runs(
    context: FenceContext,
    state: FenceState,
    accepted: frozenset[int],
    recent: Iterator[Commit] | None = None,
) -> None:
    """An earlier run of this node that died between its commit and its verdict left a
    commit whose check fails: refuse to build on it. Newest first, stopping at the node's
    newest commit, a replace, or LOOKBACK commits back. A RESTORE to version T makes the
    table version T's: the commits between T and it are not in the table, the search goes on
    from T (a RESTORE that undid only later commits leaves the unverified one in force). A
    RESTORE by timestamp undoes nothing here: the fence cannot tell what it undid."""
    # Other writers' commits above, still in the table: what undoing a commit would undo too.
    after: list[Commit] = []
    lineage: int | None = None  # the newest version still in the table, below a RESTORE
    for commit in recent if recent is not None else context.log.recent(state.table, LOOKBACK):
        tag = commit.tag
        if lineage is not None and commit.version > lineage:
            continue  # undone by a RESTORE above it
        restored = commit.restored_version
        # The node's own undo of its revert gave back what that RESTORE took, its write
        # among them (E214, E217): that write is judged like any other, below it.
        undo = tag is not None and tag.node == state.node and tag.step == "revert_undo"
        if restored is not None and (tag is None or tag.node != state.node or undo):
            lineage = restored
            if not undo:
                after.append(commit)
            continue
        if commit.operation == "RESTORE" and (tag is None or tag.node != state.node):
            # By timestamp: it names no version, so nothing below it is taken as undone.
            after.append(commit)
            continue
        if commit.operation in RESETS:
            return
        if (
            tag is None
            or commit.compaction
            or tag.node != state.node
            or tag.invocation_id == state.invocation_id
        ):
            if tag is None or tag.node != state.node:
                after.append(commit)
            continue
        if tag.step not in OWN_STEPS or tag.expected_version is None:
            return  # that run reached its verdict (revert, post-hook), or an old tag
        if tag.step == "write" and commit.changed_no_rows:
            return  # only the fence's SetTransaction: no row of it can have lost a change
        if context.verified == (commit.version, tag.invocation_id):
            # That run verified this very commit: judged again here with less than it had (a
            # commit that landed during its write is not in its tag), it could be refused.
            return
        if tag.scope is not None and not tag.strict:
            conflict = _scoped_conflict(context, state, tag, commit)
            if conflict is None:
                return  # its commit holds
            if commit.version in accepted:
                return
            raise FenceUnresolved(
                state.strategy,
                state.display,
                commit,
                _below(context, state, tag, commit),
                after[::-1],
                conflict,
            )
        if tag.holds(commit) or commit.version in accepted:
            return
        before = _below(context, state, tag, commit)
        if _held_over_unrecorded(context, state, tag, commit, before):
            return
        raise FenceUnresolved(state.strategy, state.display, commit, before, after[::-1])


def _below(context: FenceContext, state: FenceState, tag: FenceTag, commit: Commit) -> list[Commit]:
    """The commits between the version `commit` had to build on and itself."""
    assert tag.expected_version is not None
    return [
        c
        for c in context.commits_since(state.table, tag.expected_version)
        if c.version < commit.version
    ]


def _scoped_conflict(
    context: FenceContext, state: FenceState, tag: FenceTag, commit: Commit
) -> str | None:
    """A write Delta may commit above others (a MERGE, an append or replace under snapshot
    isolation) records what it read and writes. Its run's verification judged every commit
    between its expected version and its own, but a verdict is not in the log: judged again
    here by the recorded scope, whether the commit landed before the write's snapshot or
    while it ran. The first conflict, or None."""
    assert tag.expected_version is not None and tag.scope is not None
    if commit.read_version is None or commit.read_version < tag.expected_version:
        return f"it read v{commit.read_version}, before the version it was checked against"
    if commit.version == tag.expected_version + 1:
        return None  # nothing in between: no read of the log
    scope = scope_from_json(tag.scope)
    # A merge's pre-check judged its keys on a prediction (the model SQL evaluated then), which
    # its verification confirms on the rows written (verify._as_written): a run that died or
    # could not revert left what it tolerated unconfirmed, so that is judged again too.
    provisional = bool(scope.keys)
    gap = [
        c
        for c in _below(context, state, tag, commit)
        if (provisional or c.version not in tag.tolerated)
        and not (c.tag is not None and tag.same_run(c.tag))
    ]
    if not gap:
        return None
    check = context.conflict_check(replace(state, strategy=tag.strategy))
    try:
        if scope.keys:  # the keys it wrote: the rows its commit changed, as verification does
            written = check.changed_rows(commit.version)
            scope = replace(scope, source=written, source_verb="wrote")
    except Exception as exc:
        scope = replace(scope, any_change=True, why_any=f"its rows could not be read ({exc})")
    conflict = first_conflict(check.judge(gap, scope))
    return conflict.describe() if conflict else None


def _held_over_unrecorded(
    context: FenceContext, state: FenceState, tag: FenceTag, commit: Commit, before: list[Commit]
) -> bool:
    """A write built on commits that landed after its pre-check (so its tag does not list
    them) holds if they changed no data, or, for a write whose tag records what it read and
    writes, if none changed that: the table is then a serial result (its rows were computed
    from a version those commits did not change), whatever its strategy refuses at write
    time (append_if_unchanged: any data change)."""
    assert tag.expected_version is not None
    recorded = set(tag.tolerated)
    gap = [
        c for c in before if c.version not in recorded and c.version <= (commit.read_version or -1)
    ]
    gap = [c for c in gap if c.tag is None or not tag.same_run(c.tag)]
    built_on = commit.read_version if commit.read_version is not None else -1
    if built_on < tag.expected_version or (tag.strict and built_on != commit.version - 1):
        return False
    if not gap:
        return True  # only that run's own commits (its auto compaction) in between
    check = context.conflict_check(state)
    if first_conflict(check.judge(gap, STEPS)) is None:
        return True
    if tag.scope is None or tag.step != "write":
        return False
    serial = replace(scope_from_json(tag.scope), any_change=False)
    return first_conflict(check.judge(gap, serial)) is None


def latest_or_fail(context: FenceContext, state: FenceState) -> int:
    try:
        return context.latest_version(state.table, known=state.expected_version)
    except DbtRuntimeError as exc:
        gone = next((g for g, words in GONE.items() if words.search(str(exc))), None)
        if gone is None:
            raise
        # Dropped, or re-created as another format, since vB: a refusal, not a crash.
        found = "no table" if gone == Gone.DROPPED else "a table that is not Delta"
        expected = f"v{state.expected_version}"
        revert.fail(
            context,
            state,
            Outcome.NEVER_WRITTEN,
            [],
            cause=f"pre-check: expected {expected}, found {found}: {reason(exc)}",
            gone=gone,
        )
