"""The errors a fence failure raises: a refusal (FenceViolation), Spark's own refusal of the
write, an unverified write, a commit followed by a failure, an earlier run left unresolved."""

from collections.abc import Sequence
from typing import Any

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.outcome import (
    DELTA_ERROR,
    Attempt,
    Outcome,
    named,
    node_kind,
    reason,
    step_name,
    versions,
)
from dbt.adapters.fenced_spark.fence.report import FenceReport, attempts


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
            written = f"{its} was never written; this run's earlier steps stand: {named(steps)}"
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
            f"{listed}{'Delta' if DELTA_ERROR.search(words) else 'Spark'} said:\n{words}"
        )


class FenceSessionTxn(FenceError):
    """The session carries Delta's idempotent-write confs of another app id: the fence's write
    carries its own SetTransaction, and Delta takes one per statement. Raised before the
    write, so nothing of it is written (E118)."""

    def __init__(self, state: Attempt, conf: str, value: str, steps: list[Commit] | None) -> None:
        self.response = never_written(state, steps)
        if steps:
            written = f"its write was not sent; this run's earlier steps stand: {named(steps)}"
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
