"""A revert undoes only the run of our own commits at the head of the log, never a foreign
commit, and the message says exactly what of ours stands."""

from contextlib import nullcontext
from dataclasses import replace

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.delta.words import (
    LAST_COMMIT,
    MAX_COMMIT_ATTEMPTS,
    USER_METADATA,
)
from dbt.adapters.fenced_spark.fence.errors import FenceUnresolved, FenceViolation
from dbt.adapters.fenced_spark.fence.footprint import ReadFilter
from dbt.adapters.fenced_spark.fence.outcome import Outcome
from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState
from dbt.adapters.fenced_spark.fence.scope import Scope
from tests.unit.delta_fake import FakeTable

TABLE = "`a`.`t`"


def fence(table: FakeTable) -> Fence:
    return Fence(table, nullcontext, rng=lambda: 0.0)


def state(strategy: str = "merge", expected: int = 0) -> FenceState:
    return FenceState(TABLE, "a.t", strategy, 0, expected, "inv", "model.p.t")


def our_step(table: FakeTable, s: FenceState, step: str, sql: str) -> FenceState:
    with fence(table).tagged(s, step, strict=True):
        table.execute(sql)
    return replace(s, expected_version=table.latest)


def refused(call) -> FenceViolation:
    with pytest.raises(FenceViolation) as raised:
        call()
    return raised.value


def test_a_foreign_commit_between_our_schema_change_and_our_write_survives_the_revert():
    table = FakeTable()
    s = our_step(table, state(), "schema_change", "alter table add columns")
    table.before = lambda sql: table.foreign("theirs")  # lands before the MERGE's snapshot

    error = refused(lambda: fence(table).write(s, "merge into t"))

    assert [c.operation for c in table.commits[1:]] == ["ALTER", "WRITE", "MERGE", "RESTORE"]
    restore = table.commits[-1]
    assert restore.read_version == 3 and table.rows[-1] == table.rows[2]  # back to theirs
    assert "theirs" in table.rows[-1] and "alter table add columns" in table.rows[-1]
    report = error.report
    assert report.outcome == Outcome.REVERTED and report.reverted == [table.commits[3]]
    assert [c.version for c in report.standing] == [1]
    text = report.message()
    assert "written as v3, then reverted by RESTORE (v4)" in text
    assert "earlier steps v1 ALTER (schema_change) were NOT reverted" in text
    assert "v2 landed after them, so a RESTORE would undo that too" in text
    assert "nothing of this run remains" not in text
    assert "the table is as the other writer(s) left it" not in text
    assert "fence_retries" not in text and "fix the table by hand" in text
    assert (
        "RESTORE TABLE a.t TO VERSION AS OF 0" in text
        and "it also undoes v2 WRITE by other writers" in text
    )


def test_our_steps_in_a_row_at_the_head_are_reverted_together():
    table = FakeTable()
    s = our_step(table, state("append_if_unchanged"), "pre_hook", "delete from t")
    table.before = lambda sql: table.foreign("theirs")
    error = refused(lambda: fence(table).write(s, "insert into t"))
    # theirs at v2 was below our write (v3) but above our DELETE (v1): only v3 goes.
    assert "theirs" in table.rows[-1] and "delete from t" in table.rows[-1]
    assert error.report.outcome == Outcome.REVERTED

    table = FakeTable()
    table.foreign("before vB")
    s = FenceState(TABLE, "a.t", "merge", 1, 1, "inv", "model.p.t")
    s = our_step(table, s, "pre_hook", "delete from t")
    # A foreign RESTORE after our DELETE refuses the write at the pre-check.
    table.commit("RESTORE", table.rows[0], table.latest)
    error = refused(lambda: fence(table).write(s, "merge into t"))
    text = error.report.message()
    assert error.report.outcome == Outcome.NEVER_WRITTEN
    assert "never written; this run's earlier steps v2 DELETE (pre_hook) were NOT reverted" in text
    assert "detected by: pre-check: v3 RESTORE: changed data" in text


def test_a_write_and_the_steps_before_it_all_at_the_head_leave_nothing():
    table = FakeTable()
    s = our_step(table, state(), "pre_hook", "delete from t")
    s = our_step(table, s, "schema_change", "alter table add columns")
    # A foreign commit at v3 after our steps: our write at v4 reads v3, and only it is ours
    # at the head; an ALTER chain with no foreign commit in it goes as one.
    table.before = lambda sql: table.foreign("theirs")
    error = refused(lambda: fence(table).write(s, "merge into t"))
    assert [c.version for c in error.report.standing] == [1, 2]

    table = FakeTable()
    s = our_step(table, state(), "pre_hook", "delete from t")
    s = our_step(table, s, "schema_change", "alter table add columns")
    with fence(table).tagged(s, "write"):
        table.execute("merge into t")
    table.commits[-1] = table.commits[-1].__class__(
        3, "MERGE", 1, table.commits[-1].user_metadata
    )  # as if it had read v1: the check fails with all three of ours at the head
    error = refused(lambda: fence(table).verify(s, None))
    assert table.rows[-1] == table.rows[0]
    text = error.report.message()
    assert (
        "written as v3, then reverted by RESTORE (v4), with this run's earlier steps "
        "(v1 DELETE (pre_hook), v2 ALTER (schema_change)): nothing of this run remains."
    ) in text
    assert "fence_retries" not in text  # a retry would not redo the steps


def merge_refused(table: FakeTable, *before_restores) -> FenceViolation:
    """Our MERGE, refused for a foreign commit that landed before it; each of
    `before_restores` runs right before the next statement after our look at the head (a
    RESTORE of the revert) takes its snapshot."""
    table.before = lambda sql: table.foreign("theirs")
    s = state()
    races = list(before_restores)

    def next_race(sql: str) -> None:
        races.pop(0)(sql)
        if races:
            table.before = next_race

    def merge_then_races():
        with fence(table).tagged(s, "write"):
            table.execute("merge into t")
        if races:
            table.before = next_race
        fence(table).verify(s, None)

    return refused(merge_then_races)


def test_a_commit_that_slips_in_before_the_restore_is_given_back():
    table = FakeTable()
    # Lands after our look at the head, right before the RESTORE takes its snapshot.
    error = merge_refused(table, lambda sql: table.foreign("late"))
    operations = [c.operation for c in table.commits[1:]]
    assert operations == ["WRITE", "MERGE", "WRITE", "RESTORE", "RESTORE"]
    assert table.rows[-1] == table.rows[3]  # theirs, ours and late: as before the RESTORE
    assert {"theirs", "late", "merge into t"} <= table.rows[-1]
    report = error.report
    assert report.outcome == Outcome.NOT_REVERTED and report.rolled_back == []
    text = report.message()
    assert "(v3 WRITE landed just before the RESTORE (v4)" in text
    assert "so v5 restored v3: the table is as it was before the RESTORE" in text
    assert "RESTORE TABLE a.t TO VERSION AS OF 1" in text
    # Our write stands below our own RESTOREs: the node's next run refuses to build on it.
    with pytest.raises(FenceUnresolved) as raised:
        fence(table).check_earlier_runs(next_run(table), frozenset())
    assert "its commit: v2 MERGE by dbt-fenced-spark model.p.t (invocation inv)" in raised.value.msg


def test_a_restore_that_cannot_be_undone_says_what_it_took():
    table = FakeTable()
    table.before = lambda sql: table.foreign("theirs")
    s = state()

    def refuse_the_undo(sql: str) -> None:
        raise DbtRuntimeError("[DELTA_MAX_COMMIT_RETRIES_EXCEEDED] busy")

    def merge_then_late_commit():
        with fence(table).tagged(s, "write"):
            table.execute("merge into t")

        def late(sql: str) -> None:
            table.foreign("late")
            table.before = refuse_the_undo

        table.before = late
        fence(table).verify(s, None)

    error = refused(merge_then_late_commit)
    assert "late" not in table.rows[-1]  # the RESTORE took it, and it could not be undone
    report = error.report
    assert report.outcome == Outcome.REVERTED and [c.version for c in report.rolled_back] == [3]
    text = report.message()
    assert "undoing the RESTORE failed: [DELTA_MAX_COMMIT_RETRIES_EXCEEDED] busy" in text
    assert "Other writers' commits now missing from the table: v3 WRITE" in text
    assert "RESTORE TABLE a.t TO VERSION AS OF 3" in text
    assert "fix the table by hand" in text


def test_a_commit_that_slips_in_before_the_undo_is_named_missing():
    table = FakeTable()
    # One before the RESTORE's snapshot, one before the undo's.
    error = merge_refused(
        table, lambda sql: table.foreign("late"), lambda sql: table.foreign("later")
    )
    operations = [c.operation for c in table.commits[1:]]
    assert operations == ["WRITE", "MERGE", "WRITE", "RESTORE", "WRITE", "RESTORE"]
    # The undo gave back ours and "late", and took "later": no RESTORE gives back all three.
    assert table.rows[-1] == table.rows[3] and "later" not in table.rows[-1]
    report = error.report
    assert report.outcome == Outcome.NOT_REVERTED and report.reverted == []
    assert [c.version for c in report.rolled_back] == [5] and not report.nothing_of_ours_remains
    text = report.message()
    assert (
        "written as v2 and NOT reverted (v3 WRITE landed just before the RESTORE (v4), which "
        "rolled it back too, so v6 restored v3; but v5 WRITE landed just before that RESTORE "
        "(v6), which rolled it back)"
    ) in text
    assert "Other writers' commits now missing from the table: v5 WRITE" in text
    # RESTORE TO 5 is the RESTORE's state plus "later": without ours and without "late".
    assert table.rows[5] == (table.rows[1] | {"later"})
    assert (
        "`RESTORE TABLE a.t TO VERSION AS OF 5` would bring them back and undo this run's "
        "v2 MERGE (write), and v3 WRITE by other writers: first make sure"
    ) in text
    with pytest.raises(FenceUnresolved) as raised:
        fence(table).check_earlier_runs(next_run(table), frozenset())
    text = raised.value.msg
    assert "its commit: v2 MERGE by dbt-fenced-spark model.p.t (invocation inv)" in text
    # Only what is in the table and not ours: v5 is gone already, v4 and v6 are our RESTOREs.
    assert "TO VERSION AS OF 1`; that also undoes v3 WRITE by other writers, so" in text


def test_the_undo_names_only_what_its_restore_would_undo_of_ours():
    table = FakeTable()
    s = our_step(table, state(), "schema_change", "alter table add columns")
    table.before = lambda sql: table.foreign("theirs")
    races = [lambda: table.foreign("late"), lambda: table.foreign("later")]

    def race(sql: str) -> None:
        races.pop(0)()
        if races:
            table.before = race

    def write_then_races():
        with fence(table).tagged(s, "write"):
            table.execute("merge into t")
        table.before = race
        fence(table).verify(s, None)

    error = refused(write_then_races)
    operations = [c.operation for c in table.commits[1:]]
    assert operations == ["ALTER", "WRITE", "MERGE", "WRITE", "RESTORE", "WRITE", "RESTORE"]
    assert "alter table add columns" in table.rows[6]  # the RESTORE it names keeps our ALTER
    text = error.report.message()
    assert "this run's earlier steps v1 ALTER (schema_change) stand" in text
    assert (
        "`RESTORE TABLE a.t TO VERSION AS OF 6` would bring them back and undo this run's "
        "v3 MERGE (write), and v4 WRITE by other writers" in text
    )


def test_a_restore_that_slipped_in_and_undid_ours_is_not_claimed_to_stand():
    table = FakeTable()
    # Another writer restores v1 (before ours) right before our RESTORE's snapshot.
    error = merge_refused(
        table,
        lambda sql: table.commit(
            "RESTORE", table.rows[1], table.latest, parameters={"version": "1"}
        ),
    )
    operations = [c.operation for c in table.commits[1:]]
    assert operations == ["WRITE", "MERGE", "RESTORE", "RESTORE", "RESTORE"]
    assert table.rows[-1] == table.rows[1]  # theirs only: our MERGE is not in the table
    report = error.report
    assert report.outcome == Outcome.REVERTED and report.standing == []
    assert report.revert_version == 3 and report.nothing_of_ours_remains
    assert "written as v2, then reverted by RESTORE (v3): nothing of this run remains" in (
        report.message()
    )


def test_a_compaction_the_undo_took_is_nothing_lost():
    table = FakeTable()
    error = merge_refused(
        table,
        lambda sql: table.foreign("late"),
        lambda sql: table.commit("OPTIMIZE", table.rows[-1], table.latest),
    )
    assert [c.operation for c in table.commits[4:]] == ["RESTORE", "OPTIMIZE", "RESTORE"]
    report = error.report
    assert report.outcome == Outcome.NOT_REVERTED and report.rolled_back == []
    assert "the table is as it was before the RESTORE" in report.message()


def next_run(table: FakeTable) -> FenceState:
    return FenceState(TABLE, "a.t", "merge", table.latest, table.latest, "inv-2", "model.p.t")


def test_a_restore_that_failed_after_it_committed_is_read_from_the_log():
    table = FakeTable()
    table.before = lambda sql: table.foreign("theirs")
    s = state()
    sent = table.execute

    def commit_then_fail(sql: str) -> None:
        sent(sql)
        if sql.startswith("RESTORE"):
            raise DbtRuntimeError("connection reset after the RESTORE committed")

    def merge_then_lost_answer():
        with fence(table).tagged(s, "write"):
            table.execute("merge into t")
        table.execute = commit_then_fail
        fence(table).verify(s, None)

    error = refused(merge_then_lost_answer)
    assert [c.operation for c in table.commits[1:]] == ["WRITE", "MERGE", "RESTORE"]
    assert table.rows[-1] == table.rows[1]
    report = error.report
    assert report.outcome == Outcome.REVERTED and report.revert_version == 3
    assert "written as v2, then reverted by RESTORE (v3)" in report.message()


def earlier_run(table: FakeTable, strategy: str = "merge") -> None:
    """A run of the node (invocation inv-0) whose write lands on a foreign commit, then dies
    before its verdict."""
    s = FenceState(TABLE, "a.t", strategy, 0, 0, "inv-0", "model.p.t")
    table.foreign("theirs")
    with fence(table).tagged(s, "write"):
        table.execute("merge into t")


@pytest.mark.parametrize("strategy", ["merge", "append_if_unchanged"])
def test_an_earlier_run_that_died_before_its_verdict_refuses_the_next(strategy):
    table = FakeTable()
    earlier_run(table, strategy)
    table.foreign("later")
    from dbt.adapters.fenced_spark.fence.errors import FenceUnresolved

    with pytest.raises(FenceUnresolved) as raised:
        fence(table).check_earlier_runs(state(expected=3), frozenset())
    text = raised.value.msg
    assert "its commit: v2 MERGE by dbt-fenced-spark model.p.t (invocation inv-0)" in text
    check = "it had to directly follow v0, and it followed v1"
    if strategy == "merge":  # a MERGE's tag records its scope: v1 is judged by it
        check = "it read v1, above a commit that landed after v0 and conflicts with it"
    assert check in text
    assert "landed before it:\n    - v1 WRITE by an unnamed writer" in text
    assert "`RESTORE TABLE a.t TO VERSION AS OF 1`; that also undoes v3 WRITE" in text
    assert "set `fence_accept_unverified: 2`" in text
    # A RESTORE that undid only the later commit leaves it in the table: still refused.
    table.execute("RESTORE TABLE a.t TO VERSION AS OF 2")
    with pytest.raises(FenceUnresolved):
        fence(table).check_earlier_runs(state(expected=4), frozenset())
    # Accepted by the user, or undone by anyone's RESTORE: the next run goes on.
    fence(table).check_earlier_runs(state(expected=4), frozenset({2}))
    table.execute("RESTORE TABLE a.t TO VERSION AS OF 1")
    fence(table).check_earlier_runs(state(expected=5), frozenset())
    # ...unless a later RESTORE brought its version back.
    table.execute("RESTORE TABLE a.t TO VERSION AS OF 2")
    with pytest.raises(FenceUnresolved):
        fence(table).check_earlier_runs(state(expected=6), frozenset())
    # A RESTORE by timestamp names no version: nothing below it is taken as undone.
    table.commit("RESTORE", table.rows[1], table.latest, parameters={"timestamp": "2026-11-25"})
    with pytest.raises(FenceUnresolved):
        fence(table).check_earlier_runs(state(expected=7), frozenset())
    # A replace of the table ends the search: nothing before it is in the table.
    table.commit("CREATE OR REPLACE TABLE AS SELECT", table.rows[1], table.latest)
    fence(table).check_earlier_runs(state(expected=8), frozenset())


@pytest.mark.parametrize("read_itself", [False, True])
def test_a_strict_write_over_commits_that_changed_nothing_it_read_is_serial(read_itself):
    """An append_if_unchanged left standing above a commit in its gap (its revert failed, or
    its run died) is refused at write time by any data change; the next run judges the gap by
    what it read (its tag's scope): a blind append over another writer's rows is a serial
    result, and blocks nobody. One that read the table is still refused."""
    table = FakeTable()
    why = "append_if_unchanged is refused by any change to the rows of its table"
    reads = (ReadFilter(None),) if read_itself else ()
    scope = Scope(reads=reads, any_change=True, why_any=why)
    s = FenceState(TABLE, "a.t", "append_if_unchanged", 0, 0, "inv-0", "model.p.t", scope=scope)
    table.foreign("theirs")  # v1: in its gap, after its pre-check
    with fence(table).tagged(s, "write"):
        table.execute("insert into t")  # v2, strict: it read v1
    table.foreign("later")  # v3: above it
    assert table.commits[2].tag is not None and table.commits[2].tag.scope is not None
    check = lambda: fence(table).check_earlier_runs(state(expected=3), frozenset())  # noqa: E731
    if not read_itself:
        check()
        return
    from dbt.adapters.fenced_spark.fence.errors import FenceUnresolved

    with pytest.raises(FenceUnresolved):
        check()


def test_an_earlier_run_that_reached_its_verdict_or_held_is_not_reported():
    table = FakeTable()
    earlier_run(table)
    s = FenceState(TABLE, "a.t", "merge", 0, 0, "inv-0", "model.p.t")
    with fence(table).tagged(s, "revert", strict=True):
        table.execute("RESTORE TABLE a.t TO VERSION AS OF 1")
    fence(table).check_earlier_runs(state(expected=3), frozenset())

    table = FakeTable()
    s = FenceState(TABLE, "a.t", "merge", 0, 0, "inv-0", "model.p.t")
    with fence(table).tagged(s, "write"):
        table.execute("merge into t")  # read v0 as it had to
    table.foreign("later")
    fence(table).check_earlier_runs(state(expected=2), frozenset())

    # Another node's bad commit is that node's business.
    table = FakeTable()
    earlier_run(table)
    other = FenceState(TABLE, "a.t", "merge", 2, 2, "inv-1", "model.p.other")
    fence(table).check_earlier_runs(other, frozenset())


def test_a_foreign_commit_during_a_step_of_ours_that_committed_nothing():
    table = FakeTable()
    s = state("append_if_unchanged")
    table.foreign("theirs")  # lands while our DELETE runs; the DELETE matched no row
    error = refused(lambda: fence(table).after_step(s, "pre_hook"))
    report = error.report
    assert report.outcome == Outcome.NEVER_WRITTEN and report.standing == []
    text = report.message()
    assert "detected by: pre_hook step: v1 WRITE: changed data" in (text)
    assert "the table is as the other writer(s) left it" in text


def test_an_earlier_write_over_a_later_compaction_holds():
    # Its tag lists no tolerated commit (the OPTIMIZE landed after its pre-check), but a
    # commit that changed no data is no conflict for any node: the next run goes on.
    table = FakeTable()
    s = FenceState(TABLE, "a.t", "append_if_unchanged", 0, 0, "inv-0", "model.p.t")
    table.commit("OPTIMIZE", table.rows[-1], table.latest)
    with fence(table).tagged(s, "write"):
        table.execute("insert into t")
    fence(table).check_earlier_runs(state(expected=2), frozenset())


def test_an_earlier_run_whose_pre_hook_step_was_auto_compacted_holds():
    # Pre-hook DELETE (v1), Delta's auto compaction with the step's tag (v2), the write (v3)
    # on top of it: the next run goes on.
    table = FakeTable()
    s = FenceState(TABLE, "a.t", "append_if_unchanged", 0, 0, "inv-0", "model.p.t")
    with fence(table).tagged(s, "pre_hook", strict=True):
        table.execute("delete from t")
        table.execute("OPTIMIZE t")
    s = fence(table).after_step(s, "pre_hook")
    assert s.expected_version == 2
    with fence(table).tagged(s, "write"):
        table.execute("insert into t")
    fence(table).check_earlier_runs(state(expected=3), frozenset())


def delta_retried_write(table: FakeTable, foreign_operation: str) -> None:
    """A run (inv-0) whose replace_where Delta committed above a commit that landed while it
    ran (readVersion 0, version 2), then died before its verdict."""
    scope = Scope(reads=(ReadFilter(None),), replaces=("p = 0",))
    s = FenceState(TABLE, "a.t", "replace_where", 0, 0, "inv-0", "model.p.t", scope=scope)
    table.commit(foreign_operation, table.rows[-1] | {"theirs"}, 0)
    table.commit("WRITE", table.rows[-1] | {"ours"}, 0, s.tag("write").to_json())


def test_an_earlier_write_delta_committed_above_a_conflict_refuses_the_next():
    table = FakeTable()
    delta_retried_write(table, "WRITE")
    tag = table.commits[-1].tag
    assert tag is not None and tag.delta_retries and tag.holds(table.commits[-1])
    with pytest.raises(FenceUnresolved) as raised:
        fence(table).check_earlier_runs(state(expected=2), frozenset())
    text = raised.value.msg
    assert "its commit: v2 WRITE by dbt-fenced-spark model.p.t (invocation inv-0)" in text
    assert "it read v0, and Delta committed it above a commit that landed while it ran" in text
    assert "(v1 WRITE: changed rows, among them rows this model read (the whole table))" in text
    fence(table).check_earlier_runs(state(expected=2), frozenset({2}))  # accepted by the user


def test_an_earlier_write_delta_committed_above_a_compaction_holds():
    table = FakeTable()
    delta_retried_write(table, "OPTIMIZE")
    fence(table).check_earlier_runs(state(expected=2), frozenset())


class FailsAfterCommit(FakeTable):
    """A write statement that commits, then raises: Delta's post-commit hook failing (a
    symlink manifest it cannot write), or a connection lost after the commit."""

    def execute(self, sql: str) -> None:
        super().execute(sql)
        if sql.startswith("merge"):
            raise DbtRuntimeError("[DELTA_POST_COMMIT_HOOK_FAILED] version 1 succeeded")


def test_a_write_that_committed_and_then_failed_is_reported_committed():
    from dbt.adapters.fenced_spark.fence.errors import FenceCommittedThenFailed

    table = FailsAfterCommit()
    with pytest.raises(FenceCommittedThenFailed) as raised:
        fence(table).write(state(), "merge into t")
    text = raised.value.msg
    assert "the write committed as v1 (verified: based on v0), then the statement failed" in text
    assert "DELTA_POST_COMMIT_HOOK_FAILED" in text and "committed as v1; it stands" in text
    assert [c.operation for c in table.commits] == ["CREATE TABLE", "MERGE"]
    assert set(table.conf) == {LAST_COMMIT}  # the tag's confs are reset; Delta's own stays


def test_a_write_that_failed_without_a_commit_keeps_its_own_error():
    table = FakeTable()

    def refuse(sql: str) -> None:
        raise DbtRuntimeError("[DELTA_DUPLICATE_SOURCE_ROWS] two source rows")

    table.before = refuse
    with pytest.raises(DbtRuntimeError, match="DELTA_DUPLICATE_SOURCE_ROWS"):
        fence(table).write(state(), "merge into t")
    assert [c.operation for c in table.commits] == ["CREATE TABLE"]


class LosesItsSession(FakeTable):
    """A Connect server restarted while our write ran: `after_commit` says whether the
    statement still answered (killed before verification) or failed (killed right after the
    commit); either way the old session is gone."""

    def __init__(self, statement_fails: bool, lose_on: str = "merge") -> None:
        super().__init__()
        self.statement_fails = statement_fails
        self.lose_on = lose_on

    def execute(self, sql: str) -> None:
        super().execute(sql)
        if sql.lower().startswith(self.lose_on):
            self.lost = True
            if self.statement_fails:
                raise DbtRuntimeError("UNAVAILABLE: Connection reset by peer")


def test_a_session_lost_after_the_commit_is_opened_again_and_the_commit_reported():
    from dbt.adapters.fenced_spark.fence.errors import FenceCommittedThenFailed

    table = LosesItsSession(statement_fails=True)
    with pytest.raises(FenceCommittedThenFailed) as raised:
        fence(table).write(state(), "merge into t")
    assert table.reconnects == 1
    assert "committed as v1; it stands" in raised.value.msg
    assert "UNAVAILABLE" in raised.value.msg
    assert [c.operation for c in table.commits] == ["CREATE TABLE", "MERGE"]


def test_a_session_lost_before_verification_is_opened_again_and_the_write_verified():
    table = LosesItsSession(statement_fails=False)
    result = fence(table).write(state(), "merge into t")
    assert table.reconnects == 1
    assert (result.outcome, result.commit_version, result.read_version) == (
        Outcome.COMMITTED,
        1,
        0,
    )


def test_a_server_that_does_not_come_back_leaves_the_outcome_unknown_naming_the_tag():
    from dbt.adapters.fenced_spark.fence.errors import FenceUnverified

    for statement_fails in (True, False):
        table = LosesItsSession(statement_fails=statement_fails)
        table.server_back = False
        with pytest.raises(FenceUnverified) as raised:
            fence(table).write(state(), "merge into t")
        text = raised.value.msg
        # A statement that finished but whose RESETs failed reconnects first, so that no
        # later statement carries our tag; reading the verdict tries once more.
        assert table.reconnects == (1 if statement_fails else 2)
        assert 'invocation_id "inv", node "model.p.t", attempt 1 and step "write"' in text
        assert "If there is none, nothing was written" in text  # only if there is none
        finished = "the write statement finished, but reading the table's history"
        failed = "the write statement failed after it was sent, perhaps after its commit"
        assert (finished in text) == (not statement_fails)
        assert (failed in text) == statement_fails
        assert ("the statement's failure: UNAVAILABLE" in text) == statement_fails


def test_a_verdict_that_sent_a_restore_is_not_read_again_on_a_new_session():
    from dbt.adapters.fenced_spark.fence.errors import FenceUnverified

    table = LosesItsSession(statement_fails=False, lose_on="restore")
    table.before = lambda sql: table.foreign("theirs")  # a conflict: our write is reverted
    with pytest.raises(FenceUnverified):
        fence(table).write(state(), "merge into t")
    # One RESTORE: a second verdict would not know the first one's RESTORE was ours.
    assert [c.operation for c in table.commits] == ["CREATE TABLE", "WRITE", "MERGE", "RESTORE"]
    assert table.reconnects == 0


def test_a_reset_that_fails_after_the_write_leaves_no_tag_on_the_connection():
    class ResetFails(FakeTable):
        def execute(self, sql: str) -> None:
            if sql.startswith(f"RESET {USER_METADATA}") and not self.reconnects:
                raise DbtRuntimeError("RESET failed")
            super().execute(sql)

    table = ResetFails()
    result = fence(table).write(state(), "merge into t")
    assert (result.outcome, result.commit_version) == (Outcome.COMMITTED, 1)
    assert table.reconnects == 1 and table.conf == {}  # a later statement takes no tag of ours


class CountsHistoryReads(FakeTable):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []

    def history(self, table: str, limit: int):
        self.reads.append(limit)
        return super().history(table, limit)


@pytest.mark.parametrize("strategy", ["merge", "append_if_unchanged"])
def test_a_write_delta_says_it_committed_right_above_vb_needs_no_log_read(strategy):
    table = CountsHistoryReads()
    f = fence(table)
    result = f.write(state(strategy), "merge into t")
    assert (result.outcome, result.read_version, result.commit_version) == (Outcome.COMMITTED, 0, 1)
    assert table.reads == [1]  # the pre-check's; verification read nothing


def test_a_stale_record_of_an_earlier_commit_of_the_session_is_never_taken_for_ours():
    table = CountsHistoryReads()
    table.conf[LAST_COMMIT] = "1"  # this session committed a version 1 earlier, elsewhere
    result = fence(table).write(state(), "merge into t /* no change */")
    assert (result.outcome, result.commit_version) == (Outcome.NO_CHANGE, None)
    assert table.latest == 0 and len(table.reads) > 1  # verified from the log


def test_after_our_own_step_the_write_is_read_from_the_log_to_name_the_step():
    table = CountsHistoryReads()
    s = our_step(table, state(), "pre_hook", "delete from t")
    result = fence(table).write(s, "merge into t")
    assert [c.version for c in result.steps] == [1] and result.commit_version == 2
    assert len(table.reads) == 2  # pre-check and verification


def test_a_failed_tag_reset_still_resets_the_strict_write_s_max_commit_attempts():
    # The embedded session is never reopened: a conf left behind stays for its later models.
    class TagResetFails(FakeTable):
        def execute(self, sql: str) -> None:
            if sql.startswith(f"RESET {USER_METADATA}"):
                raise DbtRuntimeError("RESET failed")
            super().execute(sql)

    table = TagResetFails()
    tagged = fence(table).tagged(state(), "pre_hook", strict=True)
    with pytest.raises(DbtRuntimeError, match="RESET failed"), tagged:
        table.execute("delete from t")
    assert MAX_COMMIT_ATTEMPTS not in table.conf


def test_a_tag_whose_set_applied_and_then_failed_is_reset():
    # Over Thrift a cancel while the SET ran fails it after the server applied it.
    class Cancelled(FakeTable):
        def set_session_conf(self, key: str, value: str | None) -> None:
            super().set_session_conf(key, value)
            if key == USER_METADATA and value is not None:
                raise DbtRuntimeError("Query failed with status: CANCELED_STATE")

    table = Cancelled()
    with (
        pytest.raises(DbtRuntimeError, match="CANCELED_STATE"),
        fence(table).tagged(state(), "write"),
    ):
        table.execute("merge into t")
    assert table.conf.get(USER_METADATA) is None
    assert len(table.commits) == 1  # the write never ran


def test_an_earlier_commit_its_own_run_verified_is_taken_as_verified():
    # run_results.json says run inv-0 verified v2 (a commit that landed during its write was
    # judged then): the search takes that verdict for that commit, and for no other.
    table = FakeTable()
    earlier_run(table)
    verified = fence(table)
    verified.context.verified = (2, "inv-0")
    verified.check_earlier_runs(state(expected=2), frozenset())
    for other in ((2, "inv-9"), (1, "inv-0")):
        refusing = fence(table)
        refusing.context.verified = other
        with pytest.raises(FenceUnresolved):
            refusing.check_earlier_runs(state(expected=2), frozenset())


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("after", [0.01, 0.05])
def test_a_write_right_after_its_capture_is_not_pre_checked_again(after):
    # The capture's read took 30 ms: a pre-check sent 10 ms after it could not narrow the
    # window verification covers, and is not sent; 50 ms after it, it can, and is.
    table, clock = CountsHistoryReads(), Clock()
    f = Fence(table, nullcontext, rng=lambda: 0.0, clock=clock)

    def read_head() -> int:
        clock.now += 0.03
        return f.log.latest_version(TABLE)

    f._timed_head(TABLE, read_head)
    seen = f.head_seen(state())
    assert seen.head == (0, 100.03, pytest.approx(0.03))
    table.reads.clear()
    clock.now += after
    table.foreign("theirs")  # lands in the gap: whichever check runs must refuse it
    report = refused(lambda: f.write(seen, "merge into t")).report
    assert report.cause.startswith("post-write verification" if after < 0.03 else "pre-check")
    assert table.rows[-1] == frozenset({"theirs"})  # ours never stood or was reverted
    if after > 0.03:
        assert [c.operation for c in table.commits] == ["CREATE TABLE", "WRITE"]
    else:
        assert [c.operation for c in table.commits][-2:] == ["MERGE", "RESTORE"]


def test_a_head_read_at_another_version_is_no_reason_to_skip_the_pre_check():
    table, clock = CountsHistoryReads(), Clock()
    f = Fence(table, nullcontext, rng=lambda: 0.0, clock=clock)
    f._timed_head(TABLE, lambda: f.log.latest_version(TABLE))
    table.reads.clear()
    table.foreign("ours, a pre-hook's step")
    stepped = replace(f.head_seen(state()), expected_version=1)  # our own step since
    f.precheck(stepped)
    assert table.reads  # read again, though no time passed


def test_an_empty_write_that_lost_a_race_is_never_written_and_nothing_is_restored():
    # Under the fence's SetTransaction an empty MERGE commits only that: nothing of it can have
    # overwritten theirs, so no RESTORE (a commit with windows of its own), and a retry may go.
    table = FakeTable()
    table.before = lambda sql: table.foreign("theirs")
    error = refused(lambda: fence(table).write(state(), "merge into t empty"))
    assert [c.operation for c in table.commits[1:]] == ["WRITE", "MERGE"]
    report = error.report
    assert report.outcome == Outcome.NEVER_WRITTEN and report.nothing_of_ours_remains
    assert report.our_version is None and report.standing == []
    text = report.message()
    assert (
        "this run's write: never written: its commit v2 MERGE changed no rows (it holds only "
        "the fence's SetTransaction), so the table is as the other writer(s) left it." in text
    )
    assert "RESTORE" not in text and "fix the table by hand" not in text
    # The same write below a later commit: still nothing to undo, nothing NOT reverted.
    table = FakeTable()

    def theirs_before_and_after(sql):
        table.foreign("theirs")
        table.before = lambda sql: None

    table.before = theirs_before_and_after
    real = table.execute

    def and_one_after(sql):
        real(sql)
        if sql.startswith("merge"):
            table.foreign("later")

    table.execute = and_one_after
    error = refused(lambda: fence(table).write(state(), "merge into t empty"))
    assert [c.operation for c in table.commits[1:]] == ["WRITE", "MERGE", "WRITE"]
    assert error.report.outcome == Outcome.NEVER_WRITTEN
    assert "NOT reverted" not in error.report.message()


def test_an_earlier_run_whose_empty_write_stands_over_a_conflict_holds():
    # A run killed after an empty write's commit (only the SetTransaction) over a commit that
    # conflicts: nothing of it can have lost that change, so the next run is not refused.
    table = FakeTable()
    s = FenceState(TABLE, "a.t", "merge", 0, 0, "inv-0", "model.p.t")
    table.foreign("theirs")
    with fence(table).tagged(s, "write"):
        table.execute("merge into t empty")
    table.foreign("later")
    fence(table).check_earlier_runs(state(expected=3), frozenset())
    # A write that did change rows, the same way, still refuses the next run.
    earlier_run(table)
    with pytest.raises(FenceUnresolved):
        fence(table).check_earlier_runs(state(expected=5), frozenset())
