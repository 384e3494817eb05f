"""A Delta commit's actions as the conflict analysis reads them (changes.Actions): its files,
their partitions and row counts, its metaData and protocol; and what its writer's
`dataChange: false` is worth (claim_doubt). Commit files are read through an ActionReader."""

import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import unquote

from dbt.adapters.fenced_spark.fence.changes import Actions


class ActionReader(Protocol):
    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]: ...


def _file(actions: Actions, kind: str, body: Mapping[str, Any]) -> None:
    """One add or remove into `actions`: its file by name, its partition, its live rows."""
    name = unquote(posixpath.basename(str(body["path"])))
    (actions.added if kind == "add" else actions.removed).append(name)
    values = body.get("partitionValues") or {}
    actions.partition_values.add(tuple(sorted(values.items())))
    if not isinstance(body.get("partitionValues"), dict):
        actions.partition_values_unknown = True
    actions.partitions.add(
        ", ".join(f"{k}={'null' if v is None else v}" for k, v in sorted(values.items()))
        or "unpartitioned"
    )
    rows = _live_rows(body)
    if kind == "add":
        actions.rows_added = (
            None if rows is None or actions.rows_added is None else actions.rows_added + rows
        )
    else:
        actions.rows_removed = (
            None if rows is None or actions.rows_removed is None else actions.rows_removed + rows
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
                _file(rearranged if marked else actions, kind, body)
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
