"""fence_batch_id: which earlier commit holds this model's batch, and what races it."""

import json

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence import batch
from dbt.adapters.fenced_spark.fence.delta.changes import DeltaChanges
from dbt.adapters.fenced_spark.fence.history import Commit, FenceTag
from dbt.adapters.fenced_spark.fence.outcome import Outcome
from dbt.adapters.fenced_spark.fence.report import FenceReport
from dbt.adapters.fenced_spark.fence.scope import Judgement
from dbt.adapters.fenced_spark.fence.state import FenceState

STATE = FenceState(
    "s.t", "s.t", "append", 9, 9, invocation_id="now", node="model.p.events", batch="2026-01-02"
)


def write(
    version,
    batch_id="2026-01-02",
    invocation="then",
    node="model.p.events",
    operation="WRITE",
    **kw,
):
    tag = FenceTag(invocation, node, "append", version - 1, batch=batch_id, **kw)
    return Commit(version, operation, version - 1, tag.to_json())


def commit(version, operation="WRITE", restored=None, metadata=None):
    parameters = {} if restored is None else {"version": str(restored)}
    return Commit(version, operation, version - 1, metadata, parameters=parameters)


class LogFiles:
    """Commit files' add/remove actions by version, as the log reader returns them."""

    def __init__(self, **versions):
        self.lines = {int(v[1:]): [json.dumps(a) for a in acts] for v, acts in versions.items()}

    def actions(self, table, versions):
        return {v: self.lines.get(v, []) for v in versions}


def add(path, change=True):
    return {"add": {"path": path, "dataChange": change}}


def remove(path, change=True):
    return {"remove": {"path": path, "dataChange": change}}


def files_of(**versions):
    """The table's changes as the fence reads them from such a log (Delta's format)."""
    return DeltaChanges("s.t", LogFiles(**versions), probe=None)


NO_FILES = files_of()


def newest_first(*commits):
    return sorted(commits, key=lambda c: -c.version)


def test_the_tag_records_the_batch_and_reads_it_back():
    tag = FenceTag("i", "model.p.events", "append", 3, batch="2026-01-02")
    assert '"batch":"2026-01-02"' in tag.to_json()
    assert FenceTag.parse(tag.to_json()) == tag
    assert "batch" not in FenceTag("i", "n", "append", 3).to_json()
    assert STATE.tag("write").batch == "2026-01-02"


def test_the_batch_is_found_past_other_commits():
    found = batch.applied(STATE, newest_first(commit(8), write(7), commit(6)), NO_FILES)
    assert found is not None and found.version == 7


@pytest.mark.parametrize(
    "other",
    [
        write(7, batch_id="2026-01-01"),  # another batch
        write(7, node="model.p.other"),  # another model
        write(7, invocation="now"),  # this run itself
        write(7, step="pre_hook"),  # a step of that run, not its write
        commit(7, metadata="a job's own label"),
    ],
)
def test_only_another_runs_write_of_this_models_batch_counts(other):
    assert batch.applied(STATE, newest_first(commit(8), other), NO_FILES) is None


def test_auto_compaction_carrying_the_tag_is_not_the_write():
    compaction = Commit(8, "OPTIMIZE", 7, write(8).user_metadata)
    assert not batch.twin(STATE, compaction)


def test_a_restore_to_before_the_batch_undid_it():
    restore = commit(8, "RESTORE", restored=6)
    assert batch.applied(STATE, newest_first(restore, write(7)), NO_FILES) is None


def test_a_restore_that_kept_the_batch_leaves_it_applied():
    restore = commit(9, "RESTORE", restored=7)
    found = batch.applied(STATE, newest_first(restore, commit(8), write(7)), NO_FILES)
    assert found is not None and found.version == 7


def test_a_foreign_replace_ends_the_search():
    replaced = commit(8, "CREATE OR REPLACE TABLE AS SELECT")
    assert batch.applied(STATE, newest_first(replaced, write(7)), NO_FILES) is None


def test_below_a_restore_by_timestamp_the_batch_is_neither_applied_nor_skipped():
    with pytest.raises(DbtRuntimeError) as raised:
        batch.applied(STATE, newest_first(commit(8, "RESTORE"), write(7)), NO_FILES)
    assert "restored the table by timestamp, which names no version" in str(raised.value)
    assert "cannot tell whether the batch is still whole" in str(raised.value)
    assert "give the run another fence_batch_id" in str(raised.value)
    # With no batch of this model below it, the RESTORE changes nothing.
    assert batch.applied(STATE, newest_first(commit(8, "RESTORE"), commit(7)), NO_FILES) is None


def test_a_table_built_from_the_batch_is_its_write():
    built = write(0, operation="CREATE TABLE AS SELECT")
    found = batch.applied(STATE, newest_first(commit(1), built), NO_FILES)
    assert found is not None and found.version == 0


def test_no_batch_id_never_searches():
    state = FenceState("s.t", "s.t", "append", 9, 9, invocation_id="now", node="model.p.events")
    assert batch.applied(state, [write(7, batch_id=None)], NO_FILES) is None
    assert not batch.twin(state, write(7, batch_id=None))


def test_a_refusal_by_the_batchs_twin_is_never_retried():
    report = FenceReport("append", "s.t", 9, Outcome.NEVER_WRITTEN)
    assert batch.no_retry(STATE, report) is None
    judged = [
        Judgement(commit(10), False, "no data change"),
        Judgement(write(11), True, "it applied this model's batch too"),
    ]
    report.applied_by = batch.applied_by(STATE, judged)
    assert report.applied_by is not None and report.applied_by.version == 11
    assert batch.no_retry(STATE, report) == (
        "v11 applied this model's batch '2026-01-02', and a retry would apply it again"
    )
    assert "what to do: nothing; the table holds the batch once, from v11." in report.message()


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2026-01-02", "2026-01-02"),
        (20260102, "20260102"),
        (" a ", " a "),
        (" ", None),
        (None, None),
    ],
)
def test_the_batch_id_as_configured(value, expected):
    assert batch.batch_id(value) == expected


def test_a_later_commit_that_removed_the_batchs_rows_leaves_it_undecided():
    files = files_of(v7=[add("b.parquet")], v8=[remove("b.parquet"), add("b2.parquet")])
    with pytest.raises(DbtRuntimeError) as raised:
        batch.applied(STATE, newest_first(commit(8, "DELETE"), write(7)), files)
    assert "v8 DELETE by an unnamed writer removed rows of a file the batch wrote" in str(
        raised.value
    )


def test_a_compaction_moves_the_batchs_rows_and_a_delete_of_them_counts():
    compacted = files_of(
        v7=[add("b.parquet")],
        v8=[remove("b.parquet", False), remove("o.parquet", False), add("c.parquet", False)],
        v9=[remove("x.parquet"), add("y.parquet")],
    )
    history = newest_first(commit(9), commit(8, "OPTIMIZE"), write(7))
    found = batch.applied(STATE, history, compacted)
    assert found is not None and found.version == 7  # v9 removed another file
    compacted.log.lines[9] = [json.dumps(remove("c.parquet"))]
    with pytest.raises(DbtRuntimeError):
        batch.applied(STATE, history, compacted)


def test_a_delete_undone_by_a_restore_leaves_the_batch_whole():
    files = files_of(v7=[add("b.parquet")], v8=[remove("b.parquet")], v9=[add("b.parquet")])
    restore = commit(9, "RESTORE", restored=7)
    found = batch.applied(STATE, newest_first(restore, commit(8, "DELETE"), write(7)), files)
    assert found is not None and found.version == 7


def test_only_the_create_of_the_table_carries_a_first_runs_batch():
    from dbt.adapters.fenced_spark.fence.node import NodeTransaction
    from dbt.adapters.fenced_spark.routing import builds

    txn = NodeTransaction("s", "events", "`s`.`events`", "s.events", "model.p.events", "inv")
    assert builds("/* dbt */ create or replace table s.events using delta as select 1", txn)
    assert builds("create table `s`.`events` using delta as select 1", txn)
    assert not builds("delete from s.events where ds = 'd1'", txn)  # a pre-hook's step
    assert not builds("insert into s.events select 1", txn)  # a post-hook's
    assert not builds("create or replace table s.audit as select 1", txn)
