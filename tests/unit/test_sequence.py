"""Fenced writers refuse each other inside Delta (fence/delta/sequence.py): on the in-memory table
with Delta's rule for idempotent writes. A write whose token is not above the table's
SetTransaction version at its snapshot is skipped with no commit; the fence then judges what
landed, refuses a conflict with nothing of it written, and sends the write again otherwise.
tests/functional/test_contention.py races real writers."""

from contextlib import nullcontext
from dataclasses import replace

import pytest

from dbt.adapters.fenced_spark.fence.delta import sequence
from dbt.adapters.fenced_spark.fence.delta.history import SqlHistory
from dbt.adapters.fenced_spark.fence.delta.words import USER_METADATA
from dbt.adapters.fenced_spark.fence.errors import FenceViolation
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.outcome import Outcome
from dbt.adapters.fenced_spark.fence.protocol import MAX_SENDS, Fence, FenceState
from tests.unit.delta_fake import FakeTable

TABLE = "`a`.`t`"


class TxnTable(FakeTable):
    """FakeTable with Delta's idempotent-DML rule: a write with the txn confs is skipped when
    its version is not above the app id's at the write's snapshot, else commits it."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped = 0
        self.refuse_with: str | None = None  # a Delta error the next write fails with

    def sequence_at(self, version: int) -> int:
        found = [c.fence_txn for c in self.commits[: version + 1] if c.fence_txn is not None]
        return max(found, default=-1)

    def fenced(self, operation: str = "OPTIMIZE") -> None:
        """Another fenced writer's commit (OPTIMIZE: one that conflicts with nothing here)."""
        self.commit(operation, self.rows[-1], self.latest)
        last = self.commits[-1]
        self.commits[-1] = replace(last, fence_txn=self.sequence_at(self.latest) + 1)

    def execute(self, sql: str) -> None:
        version = self.conf.get(sequence.VERSION_CONF)
        if sql.startswith(("SET ", "RESET ")) or version is None or "RESTORE" in sql:
            super().execute(sql)
            return
        before, self.before = self.before, lambda sql: None
        before(sql)
        if self.refuse_with is not None:
            words, self.refuse_with = self.refuse_with, None
            raise RuntimeError(words)
        if int(version) <= self.sequence_at(self.latest):
            self.skipped += 1
            return  # Delta skips it: nothing committed
        super().execute(sql)
        self.commits[-1] = replace(self.commits[-1], fence_txn=int(version))


class TxnLog(SqlHistory):
    """DESCRIBE HISTORY over the fake, with the txn actions a Delta log reader sees."""

    def __init__(self, table: TxnTable) -> None:
        super().__init__(table)
        self.table = table
        self.unknown = False

    def sequence(self, table: str, version: int) -> int | None:
        return None if self.unknown else self.table.sequence_at(version)


def fence(table: TxnTable, log: TxnLog | None = None) -> Fence:
    return Fence(table, nullcontext, sleep=lambda s: None, log=log or TxnLog(table), rng=lambda: 0)


def state(strategy: str = "merge") -> FenceState:
    return FenceState(TABLE, "a.t", strategy, 0, 0, "inv", "model.p.t")


def test_a_write_carries_the_next_version_of_the_sequence_and_resets_it():
    table = TxnTable()
    table.fenced()  # v1: another fenced writer, sequence 0
    s = replace(state(), read_version=1, expected_version=1)
    result = fence(table).write(s, "merge into t")
    assert (result.outcome, result.commit_version) == (Outcome.COMMITTED, 2)
    assert table.commits[-1].fence_txn == 1 and table.commits[-1].operation == "MERGE"
    assert sequence.APP_ID_CONF not in table.conf and sequence.VERSION_CONF not in table.conf
    assert USER_METADATA not in table.conf


def test_a_conflicting_fenced_write_in_the_gap_is_refused_by_delta_never_written():
    table = TxnTable()
    # Another fenced writer commits after our pre-check, before our write's snapshot.
    table.before = lambda sql: table.fenced("WRITE")
    with pytest.raises(FenceViolation) as raised:
        fence(table).write(state(), "merge into t")
    report = raised.value.report
    assert table.skipped == 1
    assert [c.operation for c in table.commits] == ["CREATE TABLE", "WRITE"]  # no RESTORE
    assert report.outcome == Outcome.NEVER_WRITTEN and report.nothing_of_ours_remains
    assert "another fenced write committed after this one's pre-check" in report.message()
    assert "v1 WRITE" in report.message()


def test_a_fenced_write_in_the_gap_that_conflicts_with_nothing_is_sent_again():
    table = TxnTable()
    table.before = lambda sql: table.fenced()  # a commit that changed no row
    result = fence(table).write(state(), "merge into t")
    assert table.skipped == 1
    assert [c.operation for c in table.commits] == ["CREATE TABLE", "OPTIMIZE", "MERGE"]
    ours = table.commits[-1]
    assert result.commit_version == ours.version == 2 and ours.read_version == 1
    assert ours.fence_txn == 1  # the second send read the sequence anew
    assert [j.commit.version for j in result.tolerated] == [1]
    assert ours.tag is not None and ours.tag.tolerated == (1,)


def test_deltas_conflict_error_over_a_commit_that_conflicts_with_nothing_is_sent_again():
    table = TxnTable()

    def lands(sql: str) -> None:
        table.fenced()
        table.refuse_with = "[DELTA_CONCURRENT_TRANSACTION] ConcurrentTransactionException"

    table.before = lands
    result = fence(table).write(state(), "merge into t")
    assert result.outcome == Outcome.COMMITTED and result.commit_version == 2


def test_deltas_conflict_error_over_a_conflicting_commit_refuses_and_writes_nothing():
    table = TxnTable()

    def lands(sql: str) -> None:
        table.foreign("theirs")  # an unfenced writer's append, during the write
        table.refuse_with = "[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files added"

    table.before = lands
    with pytest.raises(FenceViolation) as raised:
        fence(table).write(state(), "merge into t")
    report = raised.value.report
    assert report.outcome == Outcome.NEVER_WRITTEN
    assert "Delta's conflict detection during the write (DELTA_CONCURRENT_APPEND)" in (
        report.message()
    )
    assert [c.operation for c in table.commits] == ["CREATE TABLE", "WRITE"]


def test_a_skip_no_commit_explains_sends_the_write_again_without_a_token():
    table = TxnTable()
    table.fenced()  # v1, sequence 0
    log = TxnLog(table)
    real = log.sequence
    calls: list[int] = []

    def wrong(table_name: str, version: int) -> int | None:
        calls.append(version)
        return -1 if len(calls) == 1 else real(table_name, version)  # read too low once

    log.sequence = wrong  # type: ignore[method-assign]
    s = replace(state(), read_version=1, expected_version=1)
    result = fence(table, log).write(s, "merge into t")
    assert table.skipped == 1 and len(calls) == 1  # the second send carries no token
    assert result.commit_version == 2 and table.commits[-1].fence_txn is None


def test_a_log_that_cannot_say_the_sequence_writes_without_a_token():
    table = TxnTable()
    log = TxnLog(table)
    log.unknown = True
    result = fence(table, log).write(state(), "insert into t")
    assert result.commit_version == 1 and table.commits[-1].fence_txn is None
    assert sequence.VERSION_CONF not in table.conf


def test_sends_stop_after_max_sends_with_nothing_written():
    table = TxnTable()

    def again(sql: str) -> None:
        table.fenced()
        table.before = again

    table.before = again
    with pytest.raises(FenceViolation) as raised:
        fence(table).write(state(), "merge into t")
    assert table.skipped == MAX_SENDS
    report = raised.value.report
    assert report.outcome == Outcome.NEVER_WRITTEN
    assert f"Delta refused the write {MAX_SENDS} times" in report.message()
    assert not [c for c in table.commits if c.operation == "MERGE"]


def test_commits_carry_their_sequence_from_the_log():
    info = {"operation": "MERGE"}
    from dbt.adapters.fenced_spark.fence.delta.log_tail import commit_from_info

    assert commit_from_info(3, info, 7) == Commit(3, "MERGE", None, None, fence_txn=7)
    token = sequence.Token(horizon=2, version=5)
    assert token.explains(Commit(3, "MERGE", 2, None, fence_txn=5))
    assert not token.explains(Commit(3, "MERGE", 2, None, fence_txn=4))
    assert not token.explains(Commit(3, "MERGE", 2, None))


def test_a_skip_only_an_unfenced_commit_follows_is_not_explained_by_it():
    # The sequence was read too low, and an unfenced commit that conflicts with nothing
    # landed in the gap: that commit cannot have made Delta skip the write (it holds no
    # SetTransaction), so the next send goes without a token.
    table = TxnTable()
    table.fenced()  # v1: sequence 0
    log = TxnLog(table)
    log.sequence = lambda table_name, version: -1  # type: ignore[method-assign]
    table.before = lambda sql: table.commit("OPTIMIZE", table.rows[-1], table.latest)
    s = replace(state(), read_version=1, expected_version=1)
    result = fence(table, log).write(s, "merge into t")
    assert table.skipped == 1
    assert result.commit_version == 3 and table.commits[-1].fence_txn is None


def test_what_overtook_a_write_is_named_from_after_the_precheck_only():
    table = TxnTable()
    table.commit("OPTIMIZE", table.rows[-1], table.latest)  # v1: judged by the pre-check
    table.before = lambda sql: table.fenced()  # v2: in the gap
    sent = []
    f = fence(table)
    original = f._wait_to_send
    f._wait_to_send = lambda s, n, verdict: (sent.append(verdict), original(s, n, verdict))  # type: ignore[method-assign]
    result = f.write(state(), "merge into t")
    [verdict] = sent
    assert verdict.explained and verdict.horizon == 2
    assert verdict.why.startswith("v2 OPTIMIZE") and "v1" not in verdict.why
    assert [j.commit.version for j in result.tolerated] == [1, 2]


@pytest.mark.parametrize("app_id", ["userapp", None])
def test_a_session_carrying_its_own_app_id_is_refused_before_the_write(app_id):
    # A user's txnAppId / txnVersion would ride on a write sent without the token (Delta then
    # skips it as a replay, reported as no change), or be replaced by ours (a batch they were
    # to skip applied again): refused before the write, nothing of it sent.
    from dbt.adapters.fenced_spark.fence.errors import FenceSessionTxn

    table = TxnTable()
    if app_id:
        table.conf[sequence.APP_ID_CONF] = app_id
        table.conf[sequence.VERSION_CONF] = "5"
        with pytest.raises(FenceSessionTxn) as raised:
            fence(table).write(state(), "merge into t")
        assert [c.operation for c in table.commits] == ["CREATE TABLE"]
        text = raised.value.msg
        assert "failed; nothing was written" in text and "(model.p.t)" in text
        assert f"sets {sequence.APP_ID_CONF} to 'userapp'" in text and "fence_batch_id" in text
        assert raised.value.response["fence_outcome"] == "never_written"
        assert table.conf[sequence.APP_ID_CONF] == "userapp"  # the user's confs left as they were
        return
    # Our own app id left set (over Thrift, our RESETs wait for the next statement) is no
    # user's: the write goes on.
    table.conf[sequence.APP_ID_CONF] = sequence.TXN_APP_ID
    assert fence(table).write(state(), "merge into t").outcome == Outcome.COMMITTED


def test_a_commit_that_changed_no_rows_is_told_by_its_metrics():
    def commit(operation, **metrics):
        return Commit(1, operation, 0, None, metrics={k: str(v) for k, v in metrics.items()})

    empty_merge = {"numTargetFilesAdded": 0, "numTargetFilesRemoved": 0, "numSourceRows": 0}
    assert commit("MERGE", **empty_merge).changed_no_rows
    assert not commit("MERGE", **{**empty_merge, "numTargetFilesRemoved": 1}).changed_no_rows
    # A deletion vector or a change file is a change too.
    assert not commit("MERGE", **empty_merge, numTargetDeletionVectorsAdded=1).changed_no_rows
    assert not commit("MERGE", **empty_merge, numTargetChangeFilesAdded=1).changed_no_rows
    assert commit("WRITE", numFiles=0, numOutputRows=0).changed_no_rows
    assert not commit("WRITE", numFiles=0, numRemovedFiles=2).changed_no_rows  # replace_where
    assert not commit("WRITE", numFiles=1, numOutputRows=3).changed_no_rows
    # No metrics (history metrics off), or another operation: a change, for all we can tell.
    assert not commit("MERGE").changed_no_rows
    assert not commit("UPDATE", numRemovedFiles=0, numAddedFiles=0).changed_no_rows
