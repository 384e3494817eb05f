"""A foreign commit's changes as the conflict analysis judges them, in any table format: the
files it added and removed (by name), their partitions and rows, what it changed of the table
itself; and what a format gives the analysis to read them (TableChanges) and rows (RowProbe)."""

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from dbt.adapters.fenced_spark.fence.partitions import PartitionValues


class RowProbe(Protocol):
    def any_row(self, sql: str) -> bool: ...

    def fetch(self, sql: str) -> list[Sequence[Any]]: ...

    def session_conf(self, key: str) -> str | None: ...

    def location(self, table: str) -> str: ...


@dataclass
class Actions:
    """One commit's actions, as far as conflicts go."""

    added: list[str] = field(default_factory=list)  # data files with dataChange, by name
    removed: list[str] = field(default_factory=list)
    partitions: set[str] = field(default_factory=set)  # "p=a" of every data-changing file
    partition_values: set[PartitionValues] = field(default_factory=set)
    # A file whose partition values its log does not give (optional on `remove` in Delta's
    # protocol): its values, and so the commit's, are unknown.
    partition_values_unknown: bool = False
    # The rows the files added and removed hold (Delta: their stats' numRecords, less the rows
    # a deletion vector deletes); None once one of them does not say.
    rows_added: int | None = 0
    rows_removed: int | None = 0
    table_changes: list[str] = field(default_factory=list)  # a user's domain, an unknown action
    # The table's definition as the commit writes it; compared with the table's before it.
    metadata: dict[str, Any] | None = None
    protocol: dict[str, Any] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # commitInfo.operationMetrics
    # The files marked `dataChange: false` by the commit's writer (a compaction's), apart.
    rearranged: "Actions | None" = None

    @property
    def data_change(self) -> bool:
        return bool(self.added or self.removed)


def as_data(actions: Actions) -> Actions:
    """The commit with the files its writer marked `dataChange: false` judged as data files
    too: its claim is not borne out, or the commit mixes both kinds."""
    other = actions.rearranged
    if other is None:
        return actions
    return replace(
        actions,
        added=actions.added + other.added,
        removed=actions.removed + other.removed,
        partitions=actions.partitions | other.partitions,
        partition_values=actions.partition_values | other.partition_values,
        partition_values_unknown=actions.partition_values_unknown or other.partition_values_unknown,
        rearranged=None,
    )


class TableChanges(Protocol):
    """One table's commits as its format's log gives them to the conflict analysis, each
    read once; what the format alone can tell of them; and the SQL of their rows."""

    # Read the commits' changes at once: the versions read (a commit whose file is gone is
    # not among them). Raises when the log cannot be read.
    def read(self, versions: Sequence[int]) -> Collection[int]: ...

    # A commit `read` read.
    def actions(self, version: int) -> Actions: ...

    # One commit's changes, read apart from the others (None: its file is gone).
    def one(self, version: int) -> Actions | None: ...

    # How the commit changes the table's own definition, as why it conflicts; None: it does not.
    def definition_change(self, version: int, actions: Actions) -> str | None: ...

    # What contradicts the writer's claim that the commit changed no data; None: nothing.
    def doubt(self, actions: Actions) -> str | None: ...

    # The rows of the files the commit removed (before it) and added (at it), as SQL.
    def sides(self, version: int, actions: Actions) -> tuple[str, str]: ...

    # Whether the log names columns apart from the table (so its partition values may not
    # be the columns' by name).
    def remaps_columns(self) -> bool: ...
