"""A Delta commit's actions as the conflict analysis reads them: its files, their partitions
and row counts, its metaData and protocol; and what its writer's `dataChange: false` is worth
(claim_doubt). The readers of commit files and of rows are the protocols below."""

import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from urllib.parse import unquote

from dbt.adapters.fenced_spark.fence.partitions import (
    PartitionValues,
)


class ActionReader(Protocol):
    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]: ...


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
    # A file without partitionValues (optional on `remove` in Delta's protocol): its values,
    # and so the commit's, are unknown.
    partition_values_unknown: bool = False
    # The rows the files added and removed hold (their stats' numRecords, less the rows a
    # deletion vector deletes); None once one of them does not say.
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

    def _file(self, kind: str, body: Mapping[str, Any]) -> None:
        name = unquote(posixpath.basename(str(body["path"])))
        (self.added if kind == "add" else self.removed).append(name)
        values = body.get("partitionValues") or {}
        self.partition_values.add(tuple(sorted(values.items())))
        if not isinstance(body.get("partitionValues"), dict):
            self.partition_values_unknown = True
        self.partitions.add(
            ", ".join(f"{k}={'null' if v is None else v}" for k, v in sorted(values.items()))
            or "unpartitioned"
        )
        rows = _live_rows(body)
        if kind == "add":
            self.rows_added = (
                None if rows is None or self.rows_added is None else self.rows_added + rows
            )
        else:
            self.rows_removed = (
                None if rows is None or self.rows_removed is None else self.rows_removed + rows
            )


def _live_rows(body: Mapping[str, Any]) -> int | None:
    """The rows a file action's file holds for the table: its stats' numRecords, less those
    its deletion vector deletes. None when its stats do not say (optional on a remove)."""
    try:
        stats = body.get("stats")
        records = json.loads(stats).get("numRecords") if isinstance(stats, str) else None
        deleted = (body.get("deletionVector") or {}).get("cardinality", 0)
        return None if records is None else int(records) - int(deleted)
    except (ValueError, TypeError, AttributeError):
        return None


# Actions that say nothing about rows or the table's definition. Delta's own domains
# (`delta.*`: row tracking's high-water mark, clustering) move with data changes checked
# through the files; a user's domain is the user's meaning, so it conflicts.
_NEUTRAL = {"txn", "cdc", "checkpointMetadata", "sidecar"}


def parse_actions(lines: Iterable[str]) -> Actions:
    actions = Actions()
    rearranged = Actions()
    for line in lines:
        if not line.strip():
            continue
        for kind, body in json.loads(line).items():
            if kind in ("add", "remove"):
                # Delta's protocol requires dataChange; a file that does not say changed data.
                marked = body.get("dataChange", True) is False
                (rearranged if marked else actions)._file(kind, body)
            elif kind == "metaData":
                actions.metadata = body
            elif kind == "protocol":
                actions.protocol = body
            elif kind == "commitInfo":
                metrics = body.get("operationMetrics")
                actions.metrics = metrics if isinstance(metrics, dict) else {}
            elif kind == "domainMetadata":
                domain = str(body.get("domain", ""))
                if not domain.startswith("delta."):
                    actions.table_changes.append(f"domainMetadata {domain}")
            elif kind not in _NEUTRAL:
                actions.table_changes.append(kind)
    if rearranged.data_change:
        actions.rearranged = rearranged
    return actions


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


# Metrics of rows a commit deleted, updated or inserted: a rewrite that changes no row has
# none of them (OPTIMIZE, REORG and auto compaction report files and bytes only).
_ROW_METRICS = {
    "numDeletedRows": "deleted",
    "numUpdatedRows": "updated",
    "numInsertedRows": "inserted",
    "numTargetRowsInserted": "inserted",
    "numTargetRowsUpdated": "updated",
    "numTargetRowsDeleted": "deleted",
    "numTargetRowsMatchedUpdated": "updated",
    "numTargetRowsMatchedDeleted": "deleted",
    "numTargetRowsNotMatchedBySourceUpdated": "updated",
    "numTargetRowsNotMatchedBySourceDeleted": "deleted",
}


def _rows(count: int) -> str:
    return f"{count} row{'' if count == 1 else 's'}"


def _metric(metrics: Mapping[str, Any], key: str) -> int | None:
    try:
        return int(metrics[key])
    except (KeyError, ValueError, TypeError):
        return None


def claim_doubt(actions: Actions) -> str | None:
    """What in a commit marked `dataChange: false` contradicts its writer's claim, from the
    log alone (no Spark job): its metrics count rows deleted, updated or inserted, or the
    rows it wrote are not the rows of the files it removed. None: nothing does."""
    files = actions.rearranged
    if files is None:
        return None
    for key, verb in _ROW_METRICS.items():
        count = _metric(actions.metrics, key)
        if count:
            return f"its metrics count {_rows(count)} {verb} ({key})"
    written = _metric(actions.metrics, "numOutputRows")
    removed = files.rows_removed
    if not files.removed:
        if written:
            return f"it wrote {_rows(written)} (numOutputRows) and removed no file"
        return None  # files re-added as they were (new stats, row ids), or nothing said
    if removed is None:
        if written is not None:
            return (
                f"it wrote {_rows(written)} (numOutputRows) in place of files whose rows "
                "its log does not count"
            )
        # Neither its metrics nor the files it removed count rows (a writer with history
        # metrics off): the claim cannot be checked from the log, so its rows are read.
        return "its log counts none of the rows of the files it removed"
    if written is not None and written != removed:
        return f"the files it removed hold {_rows(removed)} and it wrote {written} (numOutputRows)"
    added = files.rows_added
    if added is not None and added != removed:
        return f"the files it removed hold {_rows(removed)} and those it added {added}"
    if not actions.metrics:
        # From a writer with metrics off that kept the files' counts: a partition rewritten
        # WITH ('dataChange' = 'false') removes and adds as many rows as it changes.
        return "its writer recorded no metrics, and row counts alone do not show its rows unchanged"
    return None
