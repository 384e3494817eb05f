"""FenceReport: what one refused attempt found (vB, the commits that landed, the analysis's
verdicts, our commits and their revert), and the message a user reads of it."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.outcome import (
    Gone,
    Outcome,
    named,
    node_kind,
    step_name,
    versions,
)
from dbt.adapters.fenced_spark.fence.scope import Judgement


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
                text += f"; this run's earlier steps {named(kept_steps)} stand"
            text += (
                f". Other writers' commits now missing from the table: "
                f"{versions(self.rolled_back)}."
            )
            if bring.undoes_ours:
                others = f", and {versions(again)} by other writers" if again else ""
                return (
                    f"{text} {restore} would bring them back and undo this run's "
                    f"{named(bring.undoes_ours)}{others}: first make sure none of "
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
                    f"never written; this run's earlier steps ({named(steps)}) were reverted "
                    f"by RESTORE (v{self.revert_version}): nothing of this run remains."
                )
            also = f", with this run's earlier steps ({named(steps)})" if steps else ""
            return f"{self._write()}{also}: nothing of this run remains."
        kept_steps = [c for c in steps if c in standing]
        text = self._write()
        if kept_steps and self.outcome != Outcome.NOT_REVERTED:
            text += f"; this run's earlier steps {named(kept_steps)} were NOT reverted"
            text += f" ({self.revert_error})"
        elif kept_steps:
            text += f"; nor were this run's earlier steps {named(kept_steps)}"
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


def attempts(earlier: Sequence["FenceReport"], last: str, retries: int, how: str) -> list[str]:
    """The attempts of a run with fence_retries, one line each, the last one `last`."""
    total = len(earlier) + 1
    return [
        f"attempts: {total} (fence_retries: {retries}){how}:",
        *(f"  {n}. {report.summary()}" for n, report in enumerate(earlier, start=1)),
        f"  {total}. {last}",
    ]
