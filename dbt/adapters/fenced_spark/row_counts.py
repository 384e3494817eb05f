"""How many rows a write changed, from its Delta commit's `operationMetrics`.

run_results.json's `rows_affected` is what dbt's own adapters report there; for a MERGE it is
inserted + updated + deleted, as Databricks counts a MERGE's `num_affected_rows`. The three
counts go beside it. Delta counts the rows an overwrite removes only for a REPLACE WHERE: an
INSERT OVERWRITE or a CREATE OR REPLACE that removed files leaves `deleted` unknown (None), and
`rows_affected` then counts what Delta counted.
"""

from dataclasses import dataclass
from typing import Any

from dbt.adapters.fenced_spark.fence.history import Commit, HistoryReader

# (inserted, updated, deleted): each count's metric, by operation. Any other write (WRITE,
# CREATE [OR REPLACE] TABLE AS SELECT) counts the rows it wrote, and a REPLACE WHERE the rows
# it replaced.
METRICS = {
    "MERGE": ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted"),
    "UPDATE": (None, "numUpdatedRows", None),
    "DELETE": (None, None, "numDeletedRows"),
}
WRITE_METRICS = ("numOutputRows", None, "numDeletedRows")
REMOVED_FILES = "numRemovedFiles"
COUNT_KEYS = ("rows_affected", "rows_inserted", "rows_updated", "rows_deleted")


@dataclass(frozen=True)
class RowCounts:
    inserted: int | None = 0
    updated: int | None = 0
    deleted: int | None = 0

    @property
    def affected(self) -> int:
        return sum(n for n in (self.inserted, self.updated, self.deleted) if n is not None)

    def fields(self) -> dict[str, Any]:
        """The adapter_response's keys: an unknown count is left out (docs/inspect.md)."""
        counts = (self.affected, self.inserted, self.updated, self.deleted)
        return {k: v for k, v in zip(COUNT_KEYS, counts, strict=True) if v is not None}


NOTHING = RowCounts()  # a write that changed nothing, a batch already applied


def of_commit(commit: Commit) -> RowCounts | None:
    """The rows `commit` inserted, updated and deleted; None when it has no metrics (Delta's
    `history.metricsEnabled` off), so nothing is reported rather than zeros."""
    metrics = commit.metrics
    if not metrics:
        return None

    def count(key: str | None) -> int | None:
        value = metrics.get(key) if key else None
        return int(value) if value is not None and str(value).isdigit() else None

    inserted, updated, deleted = METRICS.get(commit.operation, WRITE_METRICS)
    removed = count(deleted)
    if removed is None and (deleted is None or not count(REMOVED_FILES)):
        removed = 0  # an operation that removes no row, or nothing of the table removed
    return RowCounts(count(inserted) or 0, count(updated) or 0, removed)


def written(
    log: HistoryReader,
    table: str,
    version: int,
    commit: Commit | None,
    node: str | None = None,
) -> RowCounts | None:
    """The counts of the write that committed `version` (`commit`, when the fence read it
    already). A session's last commit may be Delta's auto compaction right after its write:
    then the write is the commit below it. With `node`, a commit read here counts only if it
    carries that node's tag (the log read may be where the table was, not where it is)."""
    if commit is None or commit.version != version:
        commits = {c.version: c for c in log.commits_since(table, max(version - 2, -1))}
        commit = commits.get(version)
        if commit is not None and commit.compaction:
            commit = commits.get(version - 1)
        if node is not None and (commit is None or commit.tag is None or commit.tag.node != node):
            return None
    return of_commit(commit) if commit is not None else None
