"""The one error a fence failure raises, and the words it uses."""

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.conflicts import Judgement
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
_DELTA_ERROR = re.compile(r"\[DELTA_[A-Z0-9_]+\]")
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


def _listed(commits: list[Commit]) -> str:
    return ", ".join(step_name(c) for c in commits)


@dataclass(frozen=True)
class BringBack:
    """The RESTORE that brings a revert's `rolled_back` commits back: its version, whether
    this run's commits come back with it, the foreign commits it rolls back again (besides
    later ones), and this run's standing commits it would undo."""

    version: int
    with_ours: bool = True
    undoes: list[Commit] = field(default_factory=list)
    undoes_ours: list[Commit] = field(default_factory=list)


@dataclass
class FenceReport:
    strategy: str
    table: str
    read_version: int
    outcome: Outcome
    landed: list[Commit] = field(default_factory=list)
    our_version: int | None = None
    revert_version: int | None = None
    cause: str | None = None
    revert_error: str | None = None
    # Set when the table's history could not be read at all: no version to compare with.
    gone: Gone | None = None
    earlier_attempts: list["FenceReport"] = field(default_factory=list)
    # This node's own commits since vB (pre-hook and schema-change steps, the write), and
    # those the revert undid; foreign commits a RESTORE rolled back and could not bring back.
    ours: list[Commit] = field(default_factory=list)
    reverted: list[Commit] = field(default_factory=list)
    rolled_back: list[Commit] = field(default_factory=list)
    # Set with `rolled_back`.
    bring_back: BringBack | None = None
    # Why a retry could not recompute this run (`fence_retries` is then not suggested), and
    # the model's `fence_retries`.
    no_retry: str | None = None
    retries: int = 0
    # The conflict analysis's verdict on each foreign commit it judged, by version.
    judged: dict[int, Judgement] = field(default_factory=dict)
    # fence_batch_id: another run's write of this batch, which refused this run.
    applied_by: Commit | None = None
    # Our write's commit when it changed no rows (only the fence's SetTransaction): left as is.
    empty: Commit | None = None

    def _landed_line(self, commit: Commit) -> str:
        judgement = self.judged.get(commit.version)
        if judgement is None:
            return f"    - {commit.describe()}"
        verdict = "CONFLICT" if judgement.conflict else "no conflict"
        return f"    - {commit.describe()}: {verdict}: {judgement.why}"

    @property
    def steps(self) -> list[Commit]:
        return [c for c in self.ours if c.version != self.our_version]

    @property
    def standing(self) -> list[Commit]:
        """Our commits still in the table."""
        return [c for c in self.ours if c not in self.reverted]

    @property
    def nothing_of_ours_remains(self) -> bool:
        return not self.standing and not self.rolled_back and self.outcome != Outcome.NOT_REVERTED

    def response(self) -> dict[str, Any]:
        landed = [c.version for c in self.landed]
        # Judging stops at the first conflict; Delta's own conflict, and 'version' isolation,
        # judge none: then every commit that landed is the reason.
        judged = [j.commit.version for j in self.judged.values() if j.conflict]
        return {
            "_message": f"{self.strategy.upper()} refused",
            "fence_outcome": self.outcome.value,
            "read_version": self.read_version,
            "commit_version": self.our_version,
            "revert_version": self.revert_version,
            "landed": landed,
            "conflicts": judged or landed,
            "tolerated": [j.describe() for j in self.judged.values() if not j.conflict],
            "steps": [step_name(c) for c in self.steps],
            "standing": [c.version for c in self.standing],
            "rolled_back": [c.version for c in self.rolled_back],
            "table_gone": self.gone.name.lower() if self.gone else None,
        }

    def summary(self) -> str:
        landed = ", ".join(f"v{c.version} {c.operation}" for c in self.landed) or "a conflict"
        return f"read v{self.read_version}; {landed} landed; {self.outcome.value.replace('_', ' ')}"

    def _write(self) -> str:
        if self.outcome == Outcome.NEVER_WRITTEN:
            return "never written"
        if self.outcome == Outcome.REVERTED:
            return (
                f"written as v{self.our_version}, then reverted by RESTORE (v{self.revert_version})"
            )
        return f"written as v{self.our_version} and NOT reverted ({self.revert_error})"

    def what_happened(self) -> str:
        steps, standing = self.steps, self.standing
        if self.rolled_back and self.bring_back:
            # Our RESTORE took a foreign commit with it and could not give it back.
            bring = self.bring_back
            again = bring.undoes + [
                c
                for c in self.landed
                if c.version > bring.version and c not in self.rolled_back + bring.undoes
            ]
            restore = f"`RESTORE TABLE {self.table} TO VERSION AS OF {bring.version}`"
            text = self._write()
            if self.outcome != Outcome.NOT_REVERTED:
                text += f"; {self.revert_error}"
            kept_steps = [c for c in steps if c in standing]
            if kept_steps:
                text += f"; this run's earlier steps {_listed(kept_steps)} stand"
            text += (
                f". Other writers' commits now missing from the table: "
                f"{versions(self.rolled_back)}."
            )
            if bring.undoes_ours:
                others = f", and {versions(again)} by other writers" if again else ""
                return (
                    f"{text} {restore} would bring them back and undo this run's "
                    f"{_listed(bring.undoes_ours)}{others}: first make sure none of "
                    "that needs keeping."
                )
            with_ours = " (with this run's commits)" if bring.with_ours else ""
            also = (
                f"; it also undoes {versions(again)} by other writers, so first make sure "
                "none of that needs keeping"
                if again
                else ""
            )
            return f"{text} To bring them back{with_ours}, run {restore}{also}."
        if not standing:
            if not steps and self.empty is not None:
                return (
                    f"never written: its commit v{self.empty.version} {self.empty.operation} "
                    "changed no rows (it holds only the fence's SetTransaction), so the table "
                    "is as the other writer(s) left it."
                )
            if not steps and self.outcome == Outcome.NEVER_WRITTEN:
                return "never written: the table is as the other writer(s) left it."
            if self.outcome == Outcome.NEVER_WRITTEN:
                return (
                    f"never written; this run's earlier steps ({_listed(steps)}) were reverted "
                    f"by RESTORE (v{self.revert_version}): nothing of this run remains."
                )
            also = f", with this run's earlier steps ({_listed(steps)})" if steps else ""
            return f"{self._write()}{also}: nothing of this run remains."
        kept_steps = [c for c in steps if c in standing]
        text = self._write()
        if kept_steps and self.outcome != Outcome.NOT_REVERTED:
            text += f"; this run's earlier steps {_listed(kept_steps)} were NOT reverted"
            text += f" ({self.revert_error})"
        elif kept_steps:
            text += f"; nor were this run's earlier steps {_listed(kept_steps)}"
        first = min(c.version for c in standing)
        later = [c for c in self.landed if c.version > first]
        also = (
            f"; it also undoes {versions(later)} by other writers, so first make sure "
            "none of that needs keeping"
            if later
            else ""
        )
        return (
            f"{text}. Inspect `DESCRIBE HISTORY {self.table}`; to undo this run's commits, run "
            f"`RESTORE TABLE {self.table} TO VERSION AS OF {first - 1}`{also}."
        )

    def message(self) -> str:
        node = node_kind(self.strategy)
        if self.gone:
            landed = f"    - the table itself: {self.gone.value}"
        elif self.landed:
            landed = "\n".join(self._landed_line(c) for c in self.landed)
        else:
            landed = "    - (no foreign commit is in the history; see the cause below)"
        lines = [
            f"Fenced {self.strategy} into {self.table} refused: the table changed after "
            f"this run read it at version {self.read_version}.",
            f"  read version (vB): {self.read_version}",
            "  landed meanwhile:",
            landed,
            f"  this run's write: {self.what_happened()}",
        ]
        if self.cause:
            lines.append(f"  detected by: {self.cause}")
        if self.earlier_attempts:
            listed = attempts(self.earlier_attempts, self.summary(), self.retries, ", all refused")
            lines += [f"  {line}" for line in listed]
        if self.no_retry and self.retries:
            again = " again" if self.earlier_attempts else ""
            lines.append(f"  not retried{again} (fence_retries: {self.retries}): {self.no_retry}.")
        if not self.nothing_of_ours_remains:
            lines.append(f"  what to do: fix the table by hand as above, then re-run the {node}.")
        elif self.gone == Gone.DROPPED:
            lines.append(f"  what to do: re-run the {node}; its first run creates the table anew.")
        elif self.gone == Gone.NOT_DELTA and node == "snapshot":
            # dbt never rebuilds a snapshot: --full-refresh would not help.
            lines.append(
                "  what to do: drop the table, then run the snapshot to create it anew as "
                "Delta; a plain re-run refuses a table that is not Delta."
            )
        elif self.gone == Gone.NOT_DELTA:
            lines.append(
                f"  what to do: run the {node} once with --full-refresh to rebuild the table as "
                "Delta; a plain re-run refuses a table that is not Delta."
            )
        elif self.applied_by is not None:
            lines.append(
                f"  what to do: nothing; the table holds the batch once, from "
                f"v{self.applied_by.version}. A re-run finds it there and writes nothing."
            )
        else:
            rerun = f"  what to do: re-run the {node}; it recomputes from the new version."
            if self.steps or self.no_retry:
                lines.append(rerun)
            elif self.earlier_attempts:
                # fence_retries is set and spent: asking to set it would be advice already taken.
                lines.append(f"{rerun} {self._retries_spent(node)}")
            else:
                lines.append(
                    f"{rerun} To do that automatically, set `fence_retries: N` on the {node}."
                )
        return "\n".join(lines)

    def _retries_spent(self, node: str) -> str:
        every = (*self.earlier_attempts, self)
        if all(report.landed for report in every):
            return (
                f"Each of its {len(every)} attempts was refused after commits landed since "
                f"the version it read (listed above): re-run when those writers are done, or "
                f"raise `fence_retries` (now {self.retries}) on the {node}."
            )
        return f"All {self.retries} retries (`fence_retries`) on the {node} were spent."


class FenceError(DbtRuntimeError):
    """A fenced node's failure. dbt records an errored node's adapter_response as `{}`: each
    subclass's `response` is what the adapter writes there instead (run_results.py)."""

    response: dict[str, Any]


class FenceViolation(FenceError):
    CODE = 10100
    MESSAGE = "Fence violation"

    def __init__(self, report: FenceReport) -> None:
        self.report = report
        self.response = report.response()
        super().__init__(report.message())

    @property
    def type(self) -> str:
        return "Fence violation"


def attempts(earlier: Sequence[FenceReport], last: str, retries: int, how: str) -> list[str]:
    """The attempts of a run with fence_retries, one line each, the last one `last`."""
    total = len(earlier) + 1
    return [
        f"attempts: {total} (fence_retries: {retries}){how}:",
        *(f"  {n}. {report.summary()}" for n, report in enumerate(earlier, start=1)),
        f"  {total}. {last}",
    ]


def never_written(state: Attempt, steps: list[Commit] | None) -> dict[str, Any]:
    """The response of a run whose write never committed: Spark refused it, or the model's
    own error (E114) came first. `steps`: the node's step commits standing (None: unknown)."""
    return {
        "_message": f"{state.strategy.upper()} failed",
        "fence_outcome": Outcome.NEVER_WRITTEN.value,
        "read_version": state.read_version,
        "steps": None if steps is None else [step_name(c) for c in steps],
        "standing": None if steps is None else [c.version for c in steps],
    }


class FenceWriteRefused(FenceError):
    """Delta refused the write statement itself (duplicate source keys, rows outside a
    replace_where) and the log holds no commit of it: the engine's words, and the model.
    `earlier`: the attempts refused before it (fence_retries), none of which stands."""

    def __init__(
        self,
        state: Attempt,
        words: str,
        steps: list[Commit] | None,
        earlier: Sequence[FenceReport] = (),
        retries: int = 0,
    ) -> None:
        self.response = never_written(state, steps)
        # The node's own steps (a pre-hook's DELETE) stand: never claim nothing was written.
        its = "the write of its last attempt" if earlier else "its write"
        if steps is None:
            written = (
                f"{its} was never written; this run's earlier steps stand (the last as "
                f"v{state.expected_version})"
            )
        elif steps:
            written = f"{its} was never written; this run's earlier steps stand: {_listed(steps)}"
        elif earlier:
            written = f"{its} was never written, and nothing of the earlier attempts stands"
        else:
            written = "nothing was written"
        listed = " "
        if earlier:
            last = f"read v{state.read_version}; failed, nothing written"
            lines = attempts(earlier, last, retries, "; a failure is not retried")
            listed = "\n".join(["", *lines, ""])
        super().__init__(
            f"Fenced {state.strategy} into {state.display} ({state.node}) failed; {written}."
            f"{listed}{'Delta' if _DELTA_ERROR.search(words) else 'Spark'} said:\n{words}"
        )


class FenceSessionTxn(FenceError):
    """The session carries Delta's idempotent-write confs of another app id: the fence's write
    carries its own SetTransaction, and Delta takes one per statement. Raised before the
    write, so nothing of it is written (E118)."""

    def __init__(self, state: Attempt, conf: str, value: str, steps: list[Commit] | None) -> None:
        self.response = never_written(state, steps)
        if steps:
            written = f"its write was not sent; this run's earlier steps stand: {_listed(steps)}"
        elif steps is None:
            written = "its write was not sent; this run's earlier steps stand"
        else:
            written = "nothing was written"
        super().__init__(
            f"Fenced {state.strategy} into {state.display} ({state.node}) failed; {written}.\n"
            f"The session sets {conf} to '{value}' (a hook, on-run-start or the profile's "
            "server_side_parameters). A fenced write carries the fence's own SetTransaction "
            "(app id 'dbt-fenced-spark'), and Delta takes one per statement: with yours Delta "
            "would skip the write as a replay, or apply again a batch your txnVersion was to "
            "skip. Set it after the model's write (a post-hook) or on another connection, or "
            "give the model `fence_batch_id` for a batch that must apply once."
        )


class FenceUnverified(FenceError):
    """The write statement ran but its commit could not be read back: the run must not claim
    either outcome, so it names the commit to look for instead."""

    CODE = 10101
    MESSAGE = "Fence verification failed"

    def __init__(
        self,
        strategy: str,
        table: str,
        read_version: int,
        expected: str,
        tag: str,
        error: BaseException,
        statement: BaseException | None = None,
    ) -> None:
        sent = (
            "the write statement finished"
            if statement is None
            else "the write statement failed after it was sent, perhaps after its commit"
        )
        self.response = {
            "_message": f"{strategy.upper()} {Outcome.UNVERIFIED.value}",
            "fence_outcome": Outcome.UNVERIFIED.value,
            "read_version": read_version,
        }
        super().__init__(
            "\n".join(
                [
                    f"Fenced {strategy} into {table}: {sent}, but reading "
                    f"the table's history to verify it failed, so this run cannot tell whether "
                    f"its write is in the table or whether it was based on version "
                    f"{read_version}.",
                    f"  read version (vB): {read_version}",
                    *([f"  the statement's failure: {reason(statement)}"] if statement else []),
                    f"  verification failed: {reason(error)}",
                    f"  this run's commit, if any: the one in `DESCRIBE HISTORY {table}` whose "
                    f"userMetadata has {tag}.",
                    "  what to do: find that commit. If there is none, nothing was written. If "
                    f"{expected}, the write is right. Otherwise another writer came first: if "
                    "nothing after it needs keeping, undo it with "
                    f"`RESTORE TABLE {table} TO VERSION AS OF <its version - 1>`. Then re-run "
                    f"the {node_kind(strategy)}.",
                ]
            )
        )

    @property
    def type(self) -> str:
        return "Fence verification"


class FenceCommittedThenFailed(FenceError):
    """The write statement failed after its commit landed (a post-commit hook, a connection
    lost after the commit): the log shows the commit, verified; the run fails for the error,
    saying that the write stands."""

    CODE = 10103
    MESSAGE = "Fence: committed, then failed"

    def __init__(
        self,
        strategy: str,
        table: str,
        commit_version: int,
        read_version: int,
        error: BaseException,
    ) -> None:
        self.commit_version, self.read_version = commit_version, read_version
        self.response = {
            "_message": f"{strategy.upper()} {Outcome.COMMITTED_THEN_FAILED.value}",
            "fence_outcome": Outcome.COMMITTED_THEN_FAILED.value,
            "read_version": read_version,
            "commit_version": commit_version,
        }
        node = node_kind(strategy)
        super().__init__(
            "\n".join(
                [
                    f"Fenced {strategy} into {table}: the write committed as "
                    f"v{commit_version} (verified: based on v{read_version}), "
                    "then the statement failed.",
                    f"  the failure: {reason(error)}",
                    f"  this run's write: committed as v{commit_version}; it stands.",
                    f"  what to do: do not re-run this batch of the {node} for its data: it is "
                    "in the table. Fix the cause of the failure; the next run builds on it.",
                ]
            )
        )

    @property
    def type(self) -> str:
        return "Fence committed"


class FenceUnresolved(FenceError):
    """An earlier run of this node committed, and its commit fails the fence's check with
    nothing after it that undid it: it died before its verdict, or left its write standing.
    Building on it would make that lost update silent."""

    CODE = 10102
    MESSAGE = "Fence: an earlier run is unresolved"

    def __init__(
        self,
        strategy: str,
        table: str,
        commit: Commit,
        before: list[Commit],
        after: list[Commit],
        overtaken: str | None = None,
    ) -> None:
        tag = commit.tag
        assert tag is not None and tag.expected_version is not None
        self.response = {
            "_message": f"{strategy.upper()} refused",
            "fence_outcome": Outcome.EARLIER_RUN_UNRESOLVED.value,
            "unresolved_version": commit.version,
            "conflicts": [c.version for c in before],
        }
        base = f"v{tag.expected_version}"
        if tag.tolerated:
            judged = ", ".join(f"v{v}" for v in tag.tolerated)
            base += f" or the commits its run judged no conflict ({judged})"
        if overtaken and (commit.read_version or 0) < commit.version - 1:
            check = (
                f"it read v{commit.read_version}, and Delta committed it above a commit that "
                f"landed while it ran and conflicts with it ({overtaken})"
            )
        elif overtaken:
            check = (
                f"it read v{commit.read_version}, above a commit that landed after "
                f"v{tag.expected_version} and conflicts with it ({overtaken})"
            )
        elif tag.strict:
            check = f"it had to directly follow {base}, and it followed v{commit.read_version}"
        else:
            check = f"it had to read {base}, and it read v{commit.read_version}"
        also = (
            f"; that also undoes {versions(after)} by other writers, so first make sure "
            "none of it needs keeping"
            if after
            else ""
        )
        landed = [f"    - {c.describe()}" for c in before] or ["    - (not in the history)"]
        node = node_kind(strategy)
        super().__init__(
            "\n".join(
                [
                    f"Fenced {strategy} into {table} refused: an earlier run of this "
                    f"{node} left a commit that fails the fence's check, and "
                    "nothing since has undone it.",
                    f"  its commit: {commit.describe()}, step {tag.step}; {check}.",
                    "  landed before it:",
                    *landed,
                    "  what happened: that run stopped between its commit and its verdict (a "
                    "crash or a kill), or was refused with its write NOT reverted. Its write "
                    "was computed from a version the commits above had already changed, so "
                    "their change may be lost.",
                    f"  what to do: inspect `DESCRIBE HISTORY {table}`. To undo that commit, run "
                    f"`RESTORE TABLE {table} TO VERSION AS OF {commit.version - 1}`{also}. If "
                    f"the table is right as it is, set `fence_accept_unverified: "
                    f"{commit.version}` on the {node}. Then re-run the {node}.",
                ]
            )
        )

    @property
    def type(self) -> str:
        return "Fence violation"
