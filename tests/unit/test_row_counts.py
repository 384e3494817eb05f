"""The rows a write changed, from its commit's operationMetrics (as Delta 4.4 records them)."""

from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.row_counts import NOTHING, RowCounts, of_commit, written
from dbt.adapters.fenced_spark.run_results import batches_response


def commit(operation, version=5, **metrics):
    return Commit(
        version, operation, version - 1, None, metrics={k: str(v) for k, v in metrics.items()}
    )


def test_a_merge_counts_inserted_updated_and_deleted():
    merge = commit(
        "MERGE",
        numTargetRowsInserted=2,
        numTargetRowsUpdated=3,
        numTargetRowsDeleted=1,
        numTargetRowsCopied=7,
        numOutputRows=12,
        numTargetFilesRemoved=1,
    )
    counts = of_commit(merge)
    assert counts == RowCounts(2, 3, 1)
    assert counts.fields() == {
        "rows_affected": 6,
        "rows_inserted": 2,
        "rows_updated": 3,
        "rows_deleted": 1,
    }


def test_an_append_and_a_create_count_the_rows_written():
    assert of_commit(commit("WRITE", numFiles=2, numOutputRows=3)) == RowCounts(3, 0, 0)
    assert of_commit(commit("CREATE TABLE AS SELECT", numOutputRows=10)) == RowCounts(10, 0, 0)
    first = commit("CREATE OR REPLACE TABLE AS SELECT", numOutputRows=4, numFiles=1)
    assert of_commit(first) == RowCounts(4, 0, 0)


def test_a_replace_where_counts_the_rows_it_replaced():
    replaced = commit("WRITE", numOutputRows=2, numDeletedRows=5, numRemovedFiles=3)
    assert of_commit(replaced) == RowCounts(2, 0, 5)


def test_an_overwrite_that_removed_files_leaves_deleted_unknown():
    overwrite = commit("WRITE", numOutputRows=2, numRemovedFiles=2, numRemovedBytes=1889)
    counts = of_commit(overwrite)
    assert counts == RowCounts(2, 0, None)
    assert counts.fields() == {"rows_affected": 2, "rows_inserted": 2, "rows_updated": 0}
    replaced = commit("CREATE OR REPLACE TABLE AS SELECT", numOutputRows=6, numRemovedFiles=2)
    assert of_commit(replaced) == RowCounts(6, 0, None)


def test_an_update_deletes_nothing_and_no_metrics_is_no_count():
    update = commit("UPDATE", numUpdatedRows=3, numRemovedFiles=3, numAddedFiles=2)
    assert of_commit(update) == RowCounts(0, 3, 0)
    assert of_commit(commit("MERGE")) is None
    assert NOTHING.fields() == {
        "rows_affected": 0,
        "rows_inserted": 0,
        "rows_updated": 0,
        "rows_deleted": 0,
    }


class Log:
    def __init__(self, *commits):
        self.commits = commits
        self.asked: list[int] = []

    def commits_since(self, table, version):
        self.asked.append(version)
        return [c for c in self.commits if c.version > version]


def test_the_write_is_read_from_the_log_unless_the_fence_read_it_already():
    write = commit("WRITE", version=7, numOutputRows=4)
    log = Log(commit("WRITE", version=6, numOutputRows=1), write)
    assert written(log, "s.t", 7, write) == RowCounts(4, 0, 0)
    assert log.asked == []
    assert written(log, "s.t", 7, None) == RowCounts(4, 0, 0)
    assert written(log, "s.t", 8, None) is None  # not in the log (cleaned up): unknown


def test_delta_s_auto_compaction_after_the_write_is_not_the_write():
    write = commit("MERGE", version=7, numTargetRowsInserted=2)
    log = Log(write, commit("OPTIMIZE", version=8, numRemovedFiles=4, numAddedFiles=1))
    assert written(log, "s.t", 8, None) == RowCounts(2, 0, 0)


def test_a_microbatch_model_sums_its_batches_when_each_is_known():
    first = {"fence_outcome": "committed", **RowCounts(2, 0, 1).fields()}
    second = {"fence_outcome": "committed", **RowCounts(3, 0, 0).fields()}
    assert batches_response([first, second]) == {
        "batches": [first, second],
        "rows_affected": 6,
        "rows_inserted": 5,
        "rows_updated": 0,
        "rows_deleted": 1,
    }
    refused = {"fence_outcome": "never_written"}
    assert batches_response([first, refused]) == {"batches": [first, refused]}
