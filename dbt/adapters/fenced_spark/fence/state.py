"""What the fence knows about one node's attempt."""

from dataclasses import dataclass

from dbt.adapters.fenced_spark.fence.history import NATIVE_STRATEGIES, Commit, FenceTag
from dbt.adapters.fenced_spark.fence.outcome import Outcome, step_name
from dbt.adapters.fenced_spark.fence.scope import STEPS, Judgement, Scope, scope_json

# The steps whose commits are this node's own changes to the table (revert and post_hook
# commits are not: the first undo ours, the second come after the verdict).
OWN_STEPS = ("compile", "pre_hook", "schema_change", "write")


def set_conf_sql(key: str, value: str | None) -> str:
    # None resets the key. Backquotes let the value hold `;` and `=`; one inside is doubled.
    if value is None:
        return f"RESET {key}"
    quoted = value.replace("`", "``")
    return f"SET {key}=`{quoted}`"


# fence_isolation: 'snapshot' refuses conflicts (the default); 'version' any commit after vB.
SNAPSHOT, VERSION = "snapshot", "version"


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
    # What the node read and writes, for the conflict analysis; until the write knows it
    # (pre-hook steps), any data change conflicts.
    scope: Scope = STEPS
    isolation: str = SNAPSHOT
    # Foreign commits after vB judged so far (a conflict ends the run).
    judged: tuple[Judgement, ...] = ()
    # The model's fence_batch_id (fence/batch.py).
    batch: str | None = None
    # The head as the fence last read it: (version, when the read ended, how long it took),
    # in the fence's clock (Fence.head_seen).
    head: tuple[int, float, float] | None = None

    @property
    def strict(self) -> bool:
        """The write must directly follow the snapshot it read (maxCommitAttempts=0). Under
        snapshot isolation an append or replace whose conflicts the fence can bound lets
        Delta commit it above commits that land while it runs, as a MERGE does: verification
        judges every one of them. append_if_unchanged and 'version' keep their promise."""
        if self.strategy in NATIVE_STRATEGIES:
            return False
        return self.isolation == VERSION or self.scope.any_change

    @property
    def horizon(self) -> int:
        """The newest version whose commits this attempt judged (or built on): what a write's
        token is read at (fence/delta/sequence.py)."""
        return max([self.expected_version, *(j.commit.version for j in self.judged)])

    @property
    def tolerated(self) -> list[Judgement]:
        return [j for j in self.judged if not j.conflict]

    @property
    def pinned(self) -> int:
        """The version the node's reads of its table see: vB with its own steps (a pre-hook's
        DELETE) on top, as stock dbt reads its own writes. Below expected_version lie only
        our steps and commits without data change (STEPS refuses any other)."""
        return self.expected_version

    def tag(self, step: str) -> FenceTag:
        return FenceTag(
            self.invocation_id,
            self.node,
            self.strategy,
            self.read_version,
            self.attempt,
            step,
            self.expected_version,
            tuple(j.commit.version for j in self.tolerated),
            delta_retries=step == "write"
            and self.strategy not in NATIVE_STRATEGIES
            and not self.strict,
            # What the write read and writes, for a later run to judge the commits below it
            # that its run never did (capture.check_earlier_runs). A strict write's is only
            # recorded when known: STEPS says nothing of what it read.
            scope=(
                scope_json(self.scope)
                if step == "write" and (not self.strict or self.scope != STEPS)
                else None
            ),
            batch=self.batch,
        )


@dataclass(frozen=True)
class FenceResult:
    read_version: int
    commit_version: int | None
    outcome: Outcome
    attempt: int = 1
    tolerated: tuple[Judgement, ...] = ()
    # The node's own commits before its write (pre-hook, schema-change, compile-time steps).
    steps: tuple[Commit, ...] = ()
    # The write's commit as read from the log; None where it was verified without a read.
    write: Commit | None = None

    def step_names(self) -> list[str]:
        return [step_name(c) for c in self.steps]
