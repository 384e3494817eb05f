"""Steps 5 and 7: judge the commits that landed since the expected version, before the write
(pre-check) and after it (verification), by the rules of fence/conflicts.py."""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence import batch, capture, revert
from dbt.adapters.fenced_spark.fence.context import FenceContext
from dbt.adapters.fenced_spark.fence.errors import FenceUnverified, FenceViolation
from dbt.adapters.fenced_spark.fence.format import Token
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.outcome import Outcome, reason
from dbt.adapters.fenced_spark.fence.scope import STEPS, Judgement, first_conflict
from dbt.adapters.fenced_spark.fence.state import VERSION, FenceResult, FenceState

logger = AdapterLogger("FencedSpark")

T = TypeVar("T")


@dataclass(frozen=True)
class Overtaken:
    """Delta refused the write inside its commit, and nothing of it was written, for commits
    that conflict with nothing the node read or writes: Fence.write sends it again."""

    state: FenceState  # with those commits judged
    why: str  # the commits, as the log line names them
    # Whether a commit explains the refusal: Delta's conflict error, or a fenced write whose
    # SetTransaction Delta's check of our token saw. Not: the sequence as read was wrong.
    explained: bool
    seconds: float  # how long the send took

    @property
    def horizon(self) -> int:
        return self.state.horizon


def precheck(context: FenceContext, state: FenceState) -> FenceState:
    """The commits since the expected version, judged before we write: a conflict refuses
    the node, the others are tolerated (and recorded in the state, and so in the tag)."""
    if _just_read(context, state):
        logger.debug(
            f"fenced_spark: {state.display}: no pre-check: the capture read v"
            f"{state.expected_version} as the head just before, and nothing ran since"
        )
        return state
    latest = capture.latest_or_fail(context, state)
    if latest == state.expected_version:
        return state
    commits = context.commits_since(state.table, state.expected_version)
    return judge(context, state, commits, "pre-check", found=latest)


def _just_read(context: FenceContext, state: FenceState) -> bool:
    """The capture read the head at the expected version, nothing ran since (fence_write
    drops `head` otherwise), and less time passed than that read took: a pre-check would move
    the start of the window verification covers by about as much as it delays the write."""
    if state.head is None:
        return False
    version, ended, took = state.head
    return version == state.expected_version and context.clock() - ended <= took


def judge(
    context: FenceContext,
    state: FenceState,
    commits: list[Commit],
    check: str,
    our_write: Commit | None = None,
    found: int | None = None,
) -> FenceState:
    """Every foreign commit in `commits` not judged yet: refuse at the first conflict."""
    todo = _unjudged(context, state, commits)
    if not todo:
        return state
    if state.isolation == VERSION:
        found = todo[-1].version if found is None else found
        revert.refuse(
            context,
            state,
            f"{check}: expected v{state.expected_version}, found v{found} "
            "(fence_isolation: 'version' refuses any commit after it)",
            our_write,
        )
    # Another run's write of this batch conflicts whatever it changed (fence/batch.py).
    first_twin = next((i for i, c in enumerate(todo) if batch.twin(state, c)), len(todo))
    checked = context.conflict_check(state).judge(todo[:first_twin], state.scope)
    if first_twin < len(todo) and first_conflict(checked) is None:
        why = f"it applied this model's batch {state.batch!r} (fence_batch_id) too"
        checked.append(Judgement(todo[first_twin], True, why))
    judged = replace(state, judged=state.judged + tuple(checked))
    conflict = first_conflict(judged.judged)
    if conflict is not None:
        revert.refuse(context, judged, f"{check}: {conflict.describe()}", our_write)
    return judged


def after_step(context: FenceContext, state: FenceState, step: str) -> FenceState:
    """Our step ran strict, on top of whatever it read: the foreign commits below it must
    not conflict (any data change does: a step's writes are arbitrary SQL), and the next
    step expects its last commit."""
    commits = context.commits_since(state.table, state.expected_version)
    mine = context.ours(state, commits, step)
    below = [c for c in commits if not mine or c.version < mine[-1].version]
    step_state = replace(state, scope=STEPS)
    judged = judge(context, step_state, below, f"{step} step")
    state = replace(state, judged=judged.judged)
    if not mine:
        return state
    # Delta's auto compaction right after our step carries its tag: the next step
    # builds on it as on our own commit.
    expected = mine[-1].version
    for commit in commits:
        if commit.version == expected + 1 and commit.compaction and context.ours(state, [commit]):
            expected = commit.version
    return replace(state, expected_version=expected)


def verify(
    context: FenceContext,
    state: FenceState,
    conflict: BaseException | None,
    token: Token | None = None,
    seconds: float = 0.0,
) -> FenceResult | Overtaken:
    if conflict is None and (result := session_commit(context, state)) is not None:
        return result
    commits = context.commits_since(state.table, state.read_version)
    ours = context.ours(state, commits, "write")
    if not ours:
        # With a token, a write that changed nothing commits too: none means refused, by
        # Delta's check of the token or its conflict detection, for what landed meanwhile.
        if conflict is not None or (token and any(c.version > state.horizon for c in commits)):
            return refused_inside(context, state, commits, conflict, token, seconds)
        # An unchanged table makes no commit: nothing to verify, nothing lost. Unless the
        # table went away after the write, taking our commit with it: that is not "no change",
        # nor a refusal.
        latest = context.latest_version(state.table, known=state.expected_version)
        if latest < 0:
            raise DbtRuntimeError("the table's Delta log is gone: dropped after the write")
        if latest < state.expected_version:
            raise DbtRuntimeError(
                f"the table's history now ends at v{latest}, before "
                f"v{state.expected_version}: replaced after the write"
            )
        if token is not None:
            # Skipped, and no commit says why: the sequence as read was too low.
            return Overtaken(state, "no commit after the pre-check", False, seconds)
        return FenceResult(
            state.read_version,
            None,
            Outcome.NO_CHANGE,
            state.attempt,
            tuple(state.tolerated),
            own_steps(context, state, commits),
        )
    our = ours[-1]
    built_on = our.read_version if our.read_version is not None else -1
    if built_on < state.expected_version or (state.strict and built_on != our.version - 1):
        revert.refuse(context, state, _expected(state, our, "post-write verification"), our)
    # Strict: every commit below ours. Merge: Delta's own check covered the commits during
    # the MERGE against what the MERGE read at its snapshot, but not the node's reads at
    # vB: every commit below ours too, or under 'version' those up to its snapshot.
    top = built_on if state.isolation == VERSION and not state.strict else our.version - 1
    below = [c for c in commits if state.expected_version < c.version <= top]
    state = judge(
        context,
        _as_written(context, state, our, below),
        below,
        "post-write verification",
        our_write=our,
    )
    return FenceResult(
        state.read_version,
        our.version,
        Outcome.COMMITTED,
        state.attempt,
        tuple(state.tolerated),
        own_steps(context, state, commits),
        our,
    )


def refused_inside(
    context: FenceContext,
    state: FenceState,
    commits: list[Commit],
    conflict: BaseException | None,
    token: Token | None,
    seconds: float,
) -> Overtaken:
    """Delta refused the write inside its commit: its conflict error, or its check of our
    token skipped it. Nothing of it was written. The commits after the pre-check's horizon
    are judged: a conflict refuses the node (fence_retries may retry), none sends it again."""
    horizon = state.horizon
    landed = [c for c in context.foreign(state, commits) if c.version > horizon]
    table_format = context.format
    if conflict is not None:
        name = table_format.conflict_name(conflict)
        check = f"{table_format.name}'s conflict detection during the write ({name})"
    else:
        check = (
            f"{table_format.name}, inside its commit: another fenced write committed after "
            f"this one's pre-check, so {table_format.name} skipped it"
        )
    if not landed:
        # Only Delta's error brings us here: from a snapshot older than the pre-check's (a
        # staleness limit), over commits the pre-check judged no conflict.
        return Overtaken(state, "commits the pre-check judged no conflict", True, seconds)
    judged = judge(context, state, landed, check)
    explained = conflict is not None or (token is not None and any(map(token.explains, landed)))
    named = ", ".join(c.describe() for c in landed[:2])
    more = f" and {len(landed) - 2} more" if len(landed) > 2 else ""
    return Overtaken(judged, named + more, explained, seconds)


def session_commit(context: FenceContext, state: FenceState) -> FenceResult | None:
    """Our write verified without reading the log, when Delta says this session's write
    committed the version right above the expected one: the pre-check (or the capture just
    before) found the table at the expected version, so the write read it and nothing landed
    in between. Anything else (no commit, a commit higher up, Delta's auto compaction after
    ours, our own steps to list, a new session that never saw the write) is read from the log."""
    if not context.watching_commits or state.expected_version != state.read_version:
        return None
    version = context.format.own_commit()
    if version is None or version != state.expected_version + 1:
        return None
    return FenceResult(state.read_version, version, Outcome.COMMITTED, state.attempt)


def own_steps(
    context: FenceContext, state: FenceState, commits: list[Commit]
) -> tuple[Commit, ...]:
    """The node's step commits in `commits` (pre-hook, schema change, compile time), with
    Delta's auto compaction after one (it carries the step's tag); not the write, nor a
    compaction after it."""
    mine = context.ours(state, commits)
    write = next(
        (c.version for c in mine if c.tag and c.tag.step == "write" and not c.compaction), None
    )
    return tuple(
        c for c in mine if c.tag and c.tag.step != "write" and (write is None or c.version < write)
    )


def _as_written(
    context: FenceContext, state: FenceState, our: Commit, below: list[Commit]
) -> FenceState:
    """After a MERGE, the keys it wrote are the keys of the rows its commit changed: exact,
    where the model SQL (or its staging view) would be evaluated once more. Every commit below
    ours that a check before the write tolerated on the prediction of those keys (the model's
    inputs may have moved since: a source table, the clock) is judged again against them, so
    no tolerance stands that the rows written do not confirm."""
    if not state.scope.keys or state.scope.source_verb == "wrote":
        return state
    foreign = {c.version for c in context.foreign(state, below)}
    predicted = {j.commit.version for j in state.tolerated if j.commit.version in foreign}
    if not predicted and not _unjudged(context, state, below):
        return state
    # The rest of what was judged stands: conflicts, and commits judged outside `below`.
    kept = tuple(j for j in state.judged if j.commit.version not in predicted)
    try:
        written = context.conflict_check(state).changed_rows(our.version)
    except Exception as exc:
        why = f"the rows our write changed could not be read ({reason(exc)})"
        scope = replace(state.scope, any_change=True, why_any=why)
    else:
        scope = replace(state.scope, source=written, source_verb="wrote")
    return replace(state, scope=scope, judged=kept)


def _unjudged(context: FenceContext, state: FenceState, commits: list[Commit]) -> list[Commit]:
    """The foreign commits in `commits` that no check of this attempt has judged yet."""
    known = {j.commit.version for j in state.judged}
    return [c for c in context.foreign(state, commits) if c.version not in known]


def from_the_log(
    context: FenceContext,
    state: FenceState,
    verdict: Callable[[], T],
    failed: BaseException | None = None,
) -> T:
    """The write's verdict, read from the log. A session or server lost after the write
    (a Connect server restarted) is opened again once and the verdict read anew, unless
    it had sent a statement (a RESTORE); if the log still cannot be read, the outcome is
    unknown (E211), never "nothing was written"."""
    sent = context.sent
    try:
        return verdict()
    except FenceViolation:
        raise
    except Exception as exc:
        if context.sent != sent:
            raise unverified(state, exc, failed) from (failed or exc)
        first = exc
    logger.info(
        f"fenced {state.strategy} into {state.display}: the log could not be read after "
        f"the write ({reason(first)}); reading it again on a new connection"
    )
    try:
        context.runner.reconnect()
        return verdict()
    except FenceViolation:
        raise
    except Exception as exc:
        raise unverified(state, exc, failed) from (failed or first)


def unverified(
    state: FenceState, error: BaseException, statement: BaseException | None = None
) -> FenceUnverified:
    if state.strict:
        expected = (
            f"it directly follows version {state.expected_version} or commits above it "
            "that do not conflict"
        )
    else:
        expected = (
            f"it read version {state.expected_version}, or commits above it that do not conflict"
        )
    tag = state.tag("write")
    return FenceUnverified(
        state.strategy,
        state.display,
        state.read_version,
        expected,
        f'invocation_id "{tag.invocation_id}", node "{tag.node}", attempt {tag.attempt} '
        f'and step "write"',
        error,
        statement,
    )


def _expected(state: FenceState, our: Commit | None, check: str) -> str:
    found = f"v{our.version} read v{our.read_version}" if our else "no commit of ours"
    follows = " and to follow the version it read" if state.strict else ""
    expected = f"our commit to read v{state.expected_version} or later{follows}"
    return f"{check}: expected {expected}, found {found}"
