"""The fence: one object per node's write, its steps in their own modules (capture.py,
verify.py with conflicts.py, revert.py, batch.py), which are handed the write's FenceContext
(context.py) and never import this module; here the write itself, tagged, the back-off
(backoff.py) and `fence_retries`. Every step is plain SQL, so it works over any connection
method; on the embedded session the history reads may come from the Delta log instead
(`delta_log.LogTail`)."""

import itertools
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, suppress
from dataclasses import replace
from typing import Any, NoReturn, TypeVar

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence import backoff, batch, capture, revert, verify
from dbt.adapters.fenced_spark.fence.backoff import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_CAP_SECONDS,
    BACKOFF_MAX_TURNS,
    backoff_turns,
)
from dbt.adapters.fenced_spark.fence.context import LOOKBACK, FenceContext
from dbt.adapters.fenced_spark.fence.delta.format import Delta
from dbt.adapters.fenced_spark.fence.delta.history import SqlHistory
from dbt.adapters.fenced_spark.fence.errors import (
    FenceCommittedThenFailed,
    FenceError,
    FenceSessionTxn,
    FenceViolation,
    FenceWriteRefused,
)
from dbt.adapters.fenced_spark.fence.format import SqlRunner, TableFormat, Token
from dbt.adapters.fenced_spark.fence.history import Commit, HistoryReader
from dbt.adapters.fenced_spark.fence.outcome import engine_message, first_lines, reason
from dbt.adapters.fenced_spark.fence.report import FenceReport
from dbt.adapters.fenced_spark.fence.state import (
    OWN_STEPS,
    SNAPSHOT,
    VERSION,
    FenceResult,
    FenceState,
    set_conf_sql,
)

# Names the adapter, the tests and the bench import from here.
__all__ = [
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
    "BACKOFF_MAX_TURNS",
    "LOOKBACK",
    "MAX_SENDS",
    "OWN_STEPS",
    "SNAPSHOT",
    "VERSION",
    "Fence",
    "FenceResult",
    "FenceState",
    "backoff_turns",
    "set_conf_sql",
]

# How often one attempt's write is sent again after Delta refused it for a commit that
# conflicts with nothing (verify.Overtaken): each time, another writer's commit landed.
MAX_SENDS = 32

logger = AdapterLogger("FencedSpark")

# A read of a table's head: its version, or capture's version and newest commits.
_Read = TypeVar("_Read", int, tuple[int, Iterator[Commit] | None])


def _steps_ran(state: FenceState) -> str | None:
    """Why no retry follows: our own steps committed before the write."""
    if state.expected_version == state.read_version:
        return None
    return (
        "this run's own steps (a pre-hook or a schema change) committed before the write, "
        "and a retry would redo only the write"
    )


class Fence:
    def __init__(
        self,
        runner: SqlRunner,
        single_attempt: Callable[[], Any],
        sleep: Callable[[float], None] = time.sleep,
        log: HistoryReader | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
        verified: tuple[int, str] | None = None,
        table_format: TableFormat | None = None,
    ) -> None:
        self.runner = runner
        self.single_attempt = single_attempt
        self.sleep = sleep
        self.log = log or SqlHistory(runner)
        self.clock = clock
        self.rng = rng
        # What the steps share (fence/context.py): they are handed it, never this Fence.
        # Delta, read through `log`, unless told (fence/format.py is what the steps see of it).
        table_format = table_format or Delta(runner, self.log)
        self.context = FenceContext(runner, single_attempt, self.log, clock, table_format, verified)
        self._heads: dict[str, tuple[int, float, float]] = {}

    def run(
        self,
        state: FenceState,
        sql: str,
        retries: int = 0,
        restage: Callable[[FenceState], tuple[FenceState, str] | None] = lambda state: None,
        no_retry: str | None = None,
        vet: Callable[[FenceState, FenceError], None] = lambda state, refused: None,
    ) -> FenceResult:
        """The write with `fence_retries`: recapture vB, recompute, try again, only while
        nothing of ours remains committed and a retry can recompute everything the run
        decided at vB (`no_retry` says why it cannot). `restage` recomputes at the new vB;
        where the write's source is the model SQL itself it gives the state and write anew.
        `vet` sees each refusal before it is retried or raised, and may raise the model's own
        error in its place (a unique_key the model lacks fails every attempt alike)."""
        refused: list[FenceReport] = []
        attempt_seconds = 0.0

        def vetted(state: FenceState, failed: FenceError) -> None:
            # Only while no attempt committed: the model's own error then says all that happened.
            if all(r.our_version is None for r in refused):
                vet(state, failed)

        for retry in range(retries + 1):
            if retry:
                try:
                    state = self._next_attempt(state, retry, retries, attempt_seconds)
                    restaged = restage(state)
                except FenceViolation as violation:
                    # The table gone, or the model's view failing at the new vB and the log
                    # explaining why (impl._stage): this attempt's refusal, after the earlier
                    # ones. Not retried further: the staging failure may be anyone's.
                    report = violation.report
                    report.retries, report.earlier_attempts = retries, refused
                    if report.gone is None and not report.no_retry and retry < retries:
                        report.no_retry = "its model could not be staged anew"
                    raise FenceViolation(report) from violation
                except FenceError:
                    raise
                except DbtRuntimeError as exc:
                    # The last refusal stands as the run's outcome (nothing of it remains),
                    # with why no retry followed it.
                    last = refused[-1]
                    last.no_retry = f"the retry could not start ({reason(exc)})"
                    last.earlier_attempts = refused[:-1]
                    raise FenceViolation(last) from exc
                if restaged is not None:
                    state, sql = restaged
            started = self.clock()
            try:
                return self.write(state, sql)
            except FenceViolation as violation:
                attempt_seconds = self.clock() - started
                vetted(state, violation)
                report = violation.report
                report.no_retry = no_retry or _steps_ran(state) or batch.no_retry(state, report)
                report.retries = retries
                done = retry == retries or report.gone is not None  # no version to retry from
                if done or report.no_retry or not report.nothing_of_ours_remains:
                    # The message is built with the report: rebuild it with what was added.
                    report.earlier_attempts = refused
                    raise FenceViolation(report) from violation
                refused = [*refused, report]
            except FenceError:
                raise
            except DbtRuntimeError as exc:
                # Delta's own refusal (duplicate source keys, rows outside replace_where), and
                # no commit of it in the log: said of this attempt, after the earlier ones.
                words = first_lines(engine_message(exc))
                steps = self.steps_standing(state)
                write_refused = FenceWriteRefused(state, words, steps, refused, retries)
                vetted(state, write_refused)
                raise write_refused from exc
        raise AssertionError("the loop always returns or raises")

    def _next_attempt(
        self, state: FenceState, retry: int, retries: int, attempt_seconds: float
    ) -> FenceState:
        """After a backoff, the next attempt from the table's version then."""
        turns = backoff_turns(retry, self.rng)
        slot = max(BACKOFF_BASE_SECONDS, attempt_seconds)
        logger.info(
            f"fenced {state.strategy} into {state.display}: attempt {retry} refused; "
            f"retrying from the new version after {turns:.1f} turns (a turn: a commit "
            f"landing, or {slot:.1f}s without one; {retry} of {retries})"
        )
        self.wait_turns(state, turns, slot)
        latest = capture.latest_or_fail(self.context, state)
        return replace(
            state, read_version=latest, expected_version=latest, attempt=retry + 1, judged=()
        )

    def wait_turns(self, state: FenceState, turns: float, slot: float) -> None:
        backoff.wait_turns(self.log, self.clock, self.sleep, state, turns, slot)

    def steps_standing(self, state: FenceState) -> list[Commit] | None:
        """The node's step commits since vB (a pre-hook's DELETE); None when the log cannot
        say which they are."""
        if state.expected_version == state.read_version:
            return []  # no step of ours committed: the next commit had to follow vB
        try:
            commits = self.commits_since(state.table, state.read_version)
        except DbtRuntimeError:
            return None
        return list(verify.own_steps(self.context, state, commits))

    def commits_since(self, table: str, version: int) -> list[Commit]:
        return self.context.commits_since(table, version)

    def tagged(
        self,
        state: FenceState,
        step: str,
        strict: bool | None = None,
        token: Token | None = None,
    ) -> AbstractContextManager[None]:
        return self.context.tagged(state, step, strict, token)

    def write(self, state: FenceState, sql: str) -> FenceResult:
        """The write, sent again (same SQL, same vB) while Delta refuses it for commits that
        conflict with nothing: another fenced write that overtook it, or a commit Delta's own
        check counts against it and the fence's does not. Each send judges the commits that
        landed since the last and carries a new token."""
        tokens = True
        for send in itertools.count(1):
            verdict = self._send(state, sql, tokens)
            if isinstance(verdict, FenceResult):
                return verdict
            state = verdict.state
            if not verdict.explained:
                # No commit says why Delta skipped it: the sequence as read was wrong. The
                # next send goes without a token, verification covering the gap as before.
                tokens = False
            if send >= MAX_SENDS:
                self.refuse(
                    state,
                    f"Delta refused the write {send} times, each time for commits that "
                    "conflict with nothing this model read or writes (last: "
                    f"{verdict.why}); it was never written",
                )
            self._wait_to_send(state, send, verdict)
        raise AssertionError("the loop always returns or raises")

    def _no_foreign_txn(self, state: FenceState) -> None:
        """A SetTransaction the session's confs ask for (a pre-hook's `SET ...txnAppId`) would
        ride on our write where it goes without the token, or be replaced by ours: neither is
        what the user set it for. Over Thrift, ours left deferred reads as unset, unsent."""
        txn = self.context.format.session_txn()
        if txn is not None:
            raise FenceSessionTxn(state, *txn, self.steps_standing(state))

    def _wait_to_send(self, state: FenceState, send: int, verdict: verify.Overtaken) -> None:
        # Writers that Delta refused together would meet again at once: a random share of a
        # few turns, counted in commits landing or in the write's own length.
        turns = backoff_turns(send, self.rng)
        slot = max(BACKOFF_BASE_SECONDS / 4, verdict.seconds)
        logger.info(
            f"fenced {state.strategy} into {state.display}: Delta refused the write inside its "
            f"commit, nothing of it written, for {verdict.why}, which conflicts with nothing "
            f"this model read or writes; sending it again on v{verdict.horizon} after "
            f"{turns:.1f} turns (a turn: a commit landing, or {slot:.1f}s without one)"
        )
        self.wait_turns(replace(state, expected_version=verdict.horizon), turns, slot)

    def _send(self, state: FenceState, sql: str, tokens: bool) -> "FenceResult | verify.Overtaken":
        conflict: BaseException | None = None
        # Checked right before the statement (the tag then names what it tolerated): the gap
        # to the write's own snapshot is all that verification and revert still have to cover.
        state = self.precheck(state)
        self._no_foreign_txn(state)
        table_format = self.context.format
        token = table_format.token(state.table, state.horizon) if tokens else None
        finished = False
        started = self.clock()
        try:
            with self.tagged(state, "write", token=token):
                table_format.forget_own_commit()
                with self.single_attempt():
                    self.context.watching_commits = True
                    conflict = table_format.publish(sql)
                finished = True
        except Exception as failed:
            if not finished:
                # The statement may have committed before it failed (a post-commit hook, a
                # connection lost after the commit): the log says which, never the exception.
                self.after_failed_write(state, failed)
            # The statement finished and resetting the tag's confs failed (a lost session): a
            # new session carries none of them, so no later statement can take our tag.
            with suppress(Exception):  # from_the_log says what stands, and tries once more
                self.runner.reconnect()
        seconds = self.clock() - started
        # Anything but a verdict here would read as the write's own error ("nothing was
        # written"), which may be false: the statement finished.
        return verify.from_the_log(
            self.context, state, lambda: self.verify(state, conflict, token, seconds)
        )

    def after_failed_write(self, state: FenceState, failed: Exception) -> NoReturn:
        def outcome() -> FenceResult | None:
            commits = self.commits_since(state.table, state.read_version)
            if not self.context.ours(state, commits, "write"):
                return None
            result = self.verify(state, None)
            assert isinstance(result, FenceResult)  # ours is in the log: a verdict on it
            return result

        result = verify.from_the_log(self.context, state, outcome, failed)
        if result is None:
            raise failed  # nothing of ours in the log: the write's own error, nothing written
        assert result.commit_version is not None  # ours is in the log
        raise FenceCommittedThenFailed(
            state.strategy, state.display, result.commit_version, result.read_version, failed
        )

    # The steps, each in its own module; methods here so that tests and the crash harness
    # can watch or replace one step on the Fence class.
    def capture(self, table: str) -> tuple[int, Iterator[Commit] | None]:
        return self._timed_head(table, lambda: capture.capture(self.context, table))

    def _timed_head(self, table: str, read: Callable[[], _Read]) -> _Read:
        started = self.clock()
        answer = read()
        ended = self.clock()
        version = answer if isinstance(answer, int) else answer[0]
        # one read of the head (SqlLog's EXPLAIN), where the reader knows it: not a DESCRIBE
        # or a search for commits that came with it
        probe = getattr(self.log, "probe_seconds", None)
        took = ended - started if probe is None else min(probe, ended - started)
        self._heads[table] = (version, ended, took)
        return answer

    def head_seen(self, state: FenceState) -> FenceState:
        """`state` with this fence's last read of its table's head."""
        return replace(state, head=self._heads.get(state.table))

    def settled(self, table: str) -> int | None:
        return self.context.settled(table)

    def check_earlier_runs(
        self, state: FenceState, accepted: frozenset[int], recent: Iterator[Commit] | None = None
    ) -> None:
        capture.check_earlier_runs(self.context, state, accepted, recent)

    def batch_applied(self, state: FenceState, recent: Iterable[Commit]) -> Commit | None:
        return batch.applied(state, recent, self.context.format.changes(state.table, self.runner))

    def latest_version(self, table: str, known: int | None = None) -> int:
        return self.context.latest_version(table, known)

    def precheck(self, state: FenceState) -> FenceState:
        return verify.precheck(self.context, state)

    def after_step(self, state: FenceState, step: str) -> FenceState:
        return verify.after_step(self.context, state, step)

    def verify(
        self,
        state: FenceState,
        conflict: BaseException | None,
        token: Token | None = None,
        seconds: float = 0.0,
    ) -> "FenceResult | verify.Overtaken":
        return verify.verify(self.context, state, conflict, token, seconds)

    def refuse(self, state: FenceState, cause: str, our_write: Commit | None = None) -> NoReturn:
        revert.refuse(self.context, state, cause, our_write)
