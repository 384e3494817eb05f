"""The fence steps that run after the model's SQL is staged: pre-check, tagged write,
verify, revert. Every step is plain SQL, so it works over any connection method; on the
embedded session the history reads may come from the Delta log instead (`delta_log.LogTail`)."""

import itertools
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, Protocol

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.errors import (
    FenceReport,
    FenceUnresolved,
    FenceUnverified,
    FenceViolation,
    Gone,
    Outcome,
    reason,
    versions,
)
from dbt.adapters.fenced_spark.fence.history import (
    NATIVE_STRATEGIES,
    Commit,
    FenceTag,
    HistoryReader,
    SqlHistory,
)

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
MAX_COMMIT_ATTEMPTS = "spark.databricks.delta.maxCommitAttempts"
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 20.0
BACKOFF_MAX_TURNS = 16

# How far back (in commits) a run looks for an earlier run of its node that never reached
# its verdict, and the operations after which what came before is no longer in the table.
LOOKBACK = 32
_RESETS = {
    "RESTORE",
    "CREATE TABLE",
    "CREATE TABLE AS SELECT",
    "CREATE OR REPLACE TABLE",
    "CREATE OR REPLACE TABLE AS SELECT",
    "REPLACE TABLE",
    "REPLACE TABLE AS SELECT",
}

# The steps whose commits are this node's own changes to the table (revert and post_hook
# commits are not: the first undo ours, the second come after the verdict).
OWN_STEPS = ("pre_hook", "schema_change", "write")

logger = AdapterLogger("FencedSpark")

# Delta's commit conflicts. PySpark maps none of them to a class, so match the text.
_CONFLICT = re.compile(
    r"Concurrent(Append|DeleteRead|DeleteDelete|Transaction|Write)Exception"
    r"|MetadataChangedException|ProtocolChangedException"
    r"|DELTA_CONCURRENT_\w+|DELTA_MAX_COMMIT_RETRIES_EXCEEDED"
    r"|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED"
)


# What Spark and Delta say when a table is gone, or is no longer Delta.
_GONE = {
    Gone.DROPPED: re.compile(r"TABLE_OR_VIEW_NOT_FOUND|DELTA_TABLE_NOT_FOUND"),
    Gone.NOT_DELTA: re.compile(r"DELTA_ONLY_OPERATION|DELTA_MISSING_DELTA_TABLE|not a Delta table"),
}


def conflict_name(error: BaseException) -> str | None:
    match = _CONFLICT.search(str(error))
    return match.group(0) if match else None


def set_conf_sql(key: str, value: str) -> str:
    # Backquotes let the value hold `;` and `=`; a backquote inside is doubled.
    quoted = value.replace("`", "``")
    return f"SET {key}=`{quoted}`"


class SqlRunner(Protocol):
    def execute(self, sql: str) -> None: ...

    def history(self, table: str, limit: int) -> list[Commit]: ...


@dataclass(frozen=True)
class FenceState:
    """What the fence knows about one node's attempt: vB, the version its next commit must
    build on, and what tags its commits."""

    table: str
    display: str
    strategy: str
    read_version: int
    expected_version: int
    invocation_id: str
    node: str
    attempt: int = 1

    @property
    def strict(self) -> bool:
        return self.strategy not in NATIVE_STRATEGIES

    def tag(self, step: str) -> FenceTag:
        return FenceTag(
            self.invocation_id,
            self.node,
            self.strategy,
            self.read_version,
            self.attempt,
            step,
            self.expected_version,
        )


@dataclass(frozen=True)
class FenceResult:
    read_version: int
    commit_version: int | None
    outcome: Outcome
    attempt: int = 1


@dataclass(frozen=True)
class Revert:
    """What a revert did: our commits it undid, the RESTORE that stands, foreign commits it
    rolled back and could not bring back, and why anything of ours was left."""

    reverted: list[Commit] = field(default_factory=list)
    restore: Commit | None = None
    rolled_back: list[Commit] = field(default_factory=list)
    error: str | None = None
    wrote: bool = False


def _landed(commits: list[Commit]) -> str:
    return ", ".join(f"v{c.version}" for c in commits)


def backoff_turns(retry: int, rng: Callable[[], float] = random.random) -> float:
    """Exponential backoff with full jitter, counted in turns: losers only stop colliding once
    their window is wider than the writers that want the table."""
    return rng() * min(BACKOFF_MAX_TURNS, 2**retry)


class Fence:
    def __init__(
        self,
        runner: SqlRunner,
        single_attempt: Callable[[], Any],
        sleep: Callable[[float], None] = time.sleep,
        log: HistoryReader | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.runner = runner
        self.single_attempt = single_attempt
        self.sleep = sleep
        self.log = log or SqlHistory(runner)
        self.clock = clock
        self.rng = rng

    def run(
        self,
        state: FenceState,
        sql: str,
        retries: int = 0,
        restage: Callable[[FenceState], None] = lambda state: None,
        no_retry: str | None = None,
    ) -> FenceResult:
        """The write with `fence_retries`: recapture vB, recompute, try again, only while
        nothing of ours remains committed and a retry can recompute everything the run
        decided at vB (`no_retry` says why it cannot)."""
        refused: list[FenceReport] = []
        attempt_seconds = 0.0
        for retry in range(retries + 1):
            if retry:
                turns = backoff_turns(retry, self.rng)
                slot = max(BACKOFF_BASE_SECONDS, attempt_seconds)
                logger.info(
                    f"fenced {state.strategy} into {state.display}: attempt {retry} refused; "
                    f"retrying from the new version after {turns:.1f} turns (a turn: a commit "
                    f"landing, or {slot:.1f}s without one; {retry} of {retries})"
                )
                self.wait_turns(state, turns, slot)
                latest = self._latest_or_fail(state)
                state = replace(
                    state, read_version=latest, expected_version=latest, attempt=retry + 1
                )
                restage(state)
            started = self.clock()
            try:
                return self.write(state, sql)
            except FenceViolation as violation:
                attempt_seconds = self.clock() - started
                report = violation.report
                report.no_retry = no_retry or self._steps_ran(state)
                report.retries = retries
                done = retry == retries or report.gone is not None  # no version to retry from
                if done or report.no_retry or not report.nothing_of_ours_remains:
                    # The message is built with the report: rebuild it with what was added.
                    report.earlier_attempts = refused
                    raise FenceViolation(report) from violation
                refused = [*refused, report]
        raise AssertionError("the loop always returns or raises")

    def wait_turns(self, state: FenceState, turns: float, slot: float) -> None:
        """Turns are counted in commits after the version the refused attempt expected, or in
        `slot`s (an attempt's length) of waiting, whichever runs ahead. Under contention the
        wait follows the commit rate (an attempt slowed by the others would otherwise stretch
        every wait), and the commits that landed during the refused attempt are turns already
        taken; on a quiet table it is time."""
        started = self.clock()
        deadline = started + min(BACKOFF_CAP_SECONDS, turns * slot)
        known = state.expected_version

        def left() -> float:
            return turns - max(known - state.expected_version, (self.clock() - started) / slot)

        # Time is checked before each read: the retry's recapture reads the version right
        # after, so a read once the wait is over would be a Spark job for nothing over SQL.
        while left() > 0 and self.clock() < deadline:
            polled = self.clock()
            with suppress(Exception):  # the retry's own recapture reports what is wrong
                known = max(known, self.log.latest_version(state.table, known))
            # Over SQL a history read is a Spark job: poll for at most a tenth of the time.
            poll = max(slot / 4, 10 * (self.clock() - polled))
            if left() > 0:
                self.sleep(max(0.0, min(poll, left() * slot, deadline - self.clock())))

    @staticmethod
    def _steps_ran(state: FenceState) -> str | None:
        if state.expected_version == state.read_version:
            return None
        return (
            "this run's own steps (a pre-hook or a schema change) committed before the write, "
            "and a retry would redo only the write"
        )

    def capture(self, table: str) -> tuple[int, Iterator[Commit]]:
        """vB, and the newest commits newest first for `check_earlier_runs`: over SQL one
        DESCRIBE HISTORY serves both."""
        recent = iter(self.log.recent(table, LOOKBACK))
        newest = next(recent)
        return newest.version, itertools.chain([newest], recent)

    def check_earlier_runs(
        self,
        state: FenceState,
        accepted: frozenset[int],
        recent: Iterator[Commit] | None = None,
    ) -> None:
        """An earlier run of this node that died between its commit and its verdict left a
        commit whose check fails: refuse to build on it. Newest first, stopping at the node's
        newest commit, a RESTORE or a replace, or LOOKBACK commits back."""
        after: list[Commit] = []
        for commit in recent if recent is not None else self.log.recent(state.table, LOOKBACK):
            tag = commit.tag
            if commit.operation in _RESETS:
                return
            if tag is None or tag.node != state.node or tag.invocation_id == state.invocation_id:
                after.append(commit)
                continue
            if tag.step not in OWN_STEPS or tag.holds(commit) is not False:
                return  # that run reached its verdict (revert, post-hook) or its commit holds
            if commit.version in accepted:
                return
            assert tag.expected_version is not None
            before = [
                c
                for c in self.commits_since(state.table, tag.expected_version)
                if c.version < commit.version
            ]
            raise FenceUnresolved(state.strategy, state.display, commit, before, after[::-1])

    def latest_version(self, table: str, known: int | None = None) -> int:
        return self.log.latest_version(table, known)

    def commits_since(self, table: str, version: int) -> list[Commit]:
        """Commits after `version`, oldest first; reads only the log's tail."""
        return self.log.commits_since(table, version)

    @contextmanager
    def tagged(self, state: FenceState, step: str, strict: bool | None = None) -> Iterator[None]:
        """The conf that tags our commit is set only around our own statements."""
        strict = state.strict if strict is None else strict
        self.runner.execute(set_conf_sql(USER_METADATA, state.tag(step).to_json()))
        if strict:
            self.runner.execute(f"SET {MAX_COMMIT_ATTEMPTS}=0")
        try:
            yield
        finally:
            self.runner.execute(f"RESET {USER_METADATA}")
            if strict:
                self.runner.execute(f"RESET {MAX_COMMIT_ATTEMPTS}")

    @staticmethod
    def ours(state: FenceState, commits: list[Commit], step: str | None = None) -> list[Commit]:
        """This invocation's, node's and attempt's commits; of one step when `step` is given."""
        own = state.tag(step or "write")
        return [
            c
            for c in commits
            if c.tag is not None and own.same_run(c.tag) and step in (None, c.tag.step)
        ]

    def foreign(self, state: FenceState, commits: list[Commit]) -> list[Commit]:
        mine = self.ours(state, commits)
        return [c for c in commits if c not in mine]

    def _latest_or_fail(self, state: FenceState) -> int:
        try:
            return self.latest_version(state.table, known=state.expected_version)
        except DbtRuntimeError as exc:
            gone = next((g for g, words in _GONE.items() if words.search(str(exc))), None)
            if gone is None:
                raise
            # Dropped, or re-created as another format, since vB: a refusal, not a crash.
            found = "no table" if gone == Gone.DROPPED else "a table that is not Delta"
            expected = f"v{state.expected_version}"
            self._fail(
                state,
                Outcome.NEVER_WRITTEN,
                [],
                cause=f"pre-check: expected {expected}, found {found}: {reason(exc)}",
                gone=gone,
            )

    def precheck(self, state: FenceState) -> None:
        latest = self._latest_or_fail(state)
        if latest != state.expected_version:
            self.refuse(state, f"pre-check: expected v{state.expected_version}, found v{latest}")

    def after_step(self, state: FenceState, step: str) -> FenceState:
        """Our step ran strict: its commits must follow the expected version, in a row; the
        next step expects the last of them."""
        commits = self.commits_since(state.table, state.expected_version)
        expected = state.expected_version
        for commit in commits:
            if not self.ours(state, [commit], step) or commit.read_version != expected:
                break
            expected = commit.version
        else:
            return replace(state, expected_version=expected)
        foreign = [c for c in commits if c.version > expected][:1]
        self.refuse(
            state,
            f"{step} step: expected only our own commits after v{state.expected_version}, "
            f"found {versions(foreign) or 'a commit'}",
        )

    def write(self, state: FenceState, sql: str) -> FenceResult:
        conflict: BaseException | None = None
        with self.tagged(state, "write"), self.single_attempt():
            # Checked last, right before the statement: the gap to the write's own snapshot
            # is all that verification and revert still have to cover.
            self.precheck(state)
            try:
                self.runner.execute(sql)
            except Exception as exc:
                if conflict_name(exc) is None:
                    raise
                conflict = exc
        try:
            return self.verify(state, conflict)
        except FenceViolation:
            raise
        except Exception as exc:
            # Anything else here would read as the write's own error ("nothing was written"),
            # which may be false: the statement finished.
            raise self.unverified(state, exc) from exc

    def verify(self, state: FenceState, conflict: BaseException | None) -> FenceResult:
        commits = self.commits_since(state.table, state.read_version)
        ours = self.ours(state, commits, "write")
        if not ours:
            if conflict is not None:
                self.refuse(
                    state,
                    f"Delta's conflict detection during the write ({conflict_name(conflict)})",
                )
            # An unchanged table makes no commit: nothing to verify, nothing lost. Unless the
            # table went away after the write, taking our commit with it: that is not "no change".
            latest = self.latest_version(state.table, known=state.expected_version)
            if latest < 0:
                raise DbtRuntimeError("the table's Delta log is gone: dropped after the write")
            if latest < state.expected_version:
                raise DbtRuntimeError(
                    f"the table's history now ends at v{latest}, before "
                    f"v{state.expected_version}: replaced after the write"
                )
            return FenceResult(state.read_version, None, Outcome.NO_CHANGE, state.attempt)
        our = ours[-1]
        if state.strict:
            ok = our.version == state.expected_version + 1
        else:
            ok = our.read_version == state.expected_version
        if ok:
            return FenceResult(state.read_version, our.version, Outcome.COMMITTED, state.attempt)
        self.refuse(state, self._expected(state, our, "post-write verification"), our)

    @staticmethod
    def unverified(state: FenceState, error: BaseException) -> FenceUnverified:
        if state.strict:
            expected = f"it is version {state.expected_version + 1}"
        else:
            expected = f"it read version {state.expected_version}"
        tag = state.tag("write")
        return FenceUnverified(
            state.strategy,
            state.display,
            state.read_version,
            expected,
            f'invocation_id "{tag.invocation_id}", node "{tag.node}", attempt {tag.attempt} '
            f'and step "write"',
            error,
        )

    @staticmethod
    def _expected(state: FenceState, our: Commit | None, check: str) -> str:
        if state.strict:
            expectation = f"our commit to be v{state.expected_version + 1}"
        else:
            expectation = f"our commit to read v{state.expected_version}"
        found = f"v{our.version} read v{our.read_version}" if our else "no commit of ours"
        return f"{check}: expected {expectation}, found {found}"

    def refuse(self, state: FenceState, cause: str, our_write: Commit | None = None) -> NoReturn:
        """Fail the node after undoing what it committed since vB, as far as that undoes
        nobody else's commit; the report says exactly what of ours stands."""
        commits = self.commits_since(state.table, state.read_version)
        mine = [c for c in self.ours(state, commits) if c.tag and c.tag.step in OWN_STEPS]
        if not mine:  # nothing of ours since vB: nothing to undo
            self._fail(state, Outcome.NEVER_WRITTEN, self.foreign(state, commits), cause=cause)
        revert = self._revert(state, commits)
        if our_write is None:
            outcome = Outcome.NEVER_WRITTEN
        elif our_write in revert.reverted:
            outcome = Outcome.REVERTED
        else:
            outcome = Outcome.NOT_REVERTED
        if revert.wrote:  # the RESTOREs are ours; what landed meanwhile is read anew
            commits = self.commits_since(state.table, state.read_version)
        self._fail(
            state,
            outcome,
            self.foreign(state, commits),
            cause=cause,
            our_version=our_write.version if our_write else None,
            revert_version=revert.restore.version if revert.restore else None,
            revert_error=revert.error,
            ours=mine,
            reverted=revert.reverted,
            rolled_back=revert.rolled_back,
        )

    def _revert(self, state: FenceState, commits: list[Commit]) -> "Revert":
        """RESTORE over the run of our own commits at the head of the log, and only that: a
        foreign commit below or above it stays. A RESTORE that turns out to have read a foreign
        commit (one that landed after we looked) is itself undone."""
        latest = self.latest_version(state.table, known=commits[-1].version)
        if latest != commits[-1].version:
            commits = self.commits_since(state.table, state.read_version)
        own = [c for c in self.ours(state, commits) if c.tag and c.tag.step in OWN_STEPS]
        head: list[Commit] = []
        for commit in reversed(commits):
            if commit not in own:
                break
            head.insert(0, commit)
        if not head:
            return Revert(
                error=f"{_landed(commits[-1:])} landed after it, so a RESTORE would undo that too"
            )
        top = head[-1].version
        try:
            restore = self._restore(state, head[0].version - 1, "revert", after=top)
        except Exception as exc:
            return Revert(error=f"the RESTORE failed: {reason(exc)}", wrote=True)
        if restore is None or restore.read_version is None:
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
        slipped = [c for c in self.commits_since(state.table, top) if c.version <= read]
        what = (
            f"{versions(slipped) or 'a commit'} landed just before the RESTORE (v{restore.version})"
        )
        try:
            undo = self._restore(state, read, "revert_undo", after=restore.version)
        except Exception as exc:
            failed = reason(exc)
        else:
            if undo is not None and undo.read_version == restore.version:
                return Revert(
                    wrote=True,
                    error=f"{what}, which rolled it back too, so v{undo.version} restored "
                    f"v{read}: the table is as it was before the RESTORE",
                )
            failed = "its commit is not where it should be"
        return Revert(
            reverted=head,
            restore=restore,
            rolled_back=slipped,
            wrote=True,
            error=f"{what}, which rolled it back too; undoing the RESTORE failed: {failed}",
        )

    def _restore(self, state: FenceState, version: int, step: str, after: int) -> Commit | None:
        """A tagged RESTORE that commits only on the snapshot it read (never past a commit
        that landed meanwhile), and its commit, found by its tag."""
        with self.tagged(state, step, strict=True):
            self.runner.execute(f"RESTORE TABLE {state.table} TO VERSION AS OF {version}")
        restores = self.ours(state, self.commits_since(state.table, after), step)
        return restores[-1] if restores else None

    def _fail(
        self, state: FenceState, outcome: Outcome, landed: list[Commit], **kw: Any
    ) -> NoReturn:
        raise FenceViolation(
            FenceReport(
                strategy=state.strategy,
                table=state.display,
                read_version=state.read_version,
                outcome=outcome,
                landed=landed,
                **kw,
            )
        )
