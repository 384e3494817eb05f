"""What a fence failure says: table, vB, what landed, what happened to our write, what to do."""

from contextlib import nullcontext

import pytest

from dbt.adapters.fenced_spark.fence.delta.words import conflict_name
from dbt.adapters.fenced_spark.fence.errors import FenceViolation
from dbt.adapters.fenced_spark.fence.history import Commit, FenceTag
from dbt.adapters.fenced_spark.fence.outcome import Outcome, first_lines, reason
from dbt.adapters.fenced_spark.fence.protocol import set_conf_sql
from dbt.adapters.fenced_spark.fence.report import FenceReport

LANDED = [Commit(13, "UPDATE", 12, None, user_name="ana", engine_info="Spark")]


def report(outcome, **kw):
    return FenceReport("merge", "analytics.orders", 12, outcome, LANDED, **kw)


def test_never_written():
    text = str(FenceViolation(report(Outcome.NEVER_WRITTEN, cause="pre-check: x")))
    assert "Fenced merge into analytics.orders refused" in text
    assert "read version (vB): 12" in text
    assert "v13 UPDATE by ana via Spark" in text
    assert "never written" in text
    assert "re-run the model" in text and "fence_retries" in text
    assert "try the operation again" not in text


OURS = Commit(14, "MERGE", 13, FenceTag("inv", "model.p.orders", "merge", 12).to_json())


def test_written_and_reverted():
    text = report(
        Outcome.REVERTED, our_version=14, revert_version=15, ours=[OURS], reverted=[OURS]
    ).message()
    assert "written as v14, then reverted by RESTORE (v15): nothing of this run remains" in text
    assert "fence_retries" in text


def test_written_not_reverted_tells_how_to_undo():
    text = report(
        Outcome.NOT_REVERTED, our_version=14, revert_error="v15 landed", ours=[OURS]
    ).message()
    assert "written as v14 and NOT reverted (v15 landed)" in text
    assert "RESTORE TABLE analytics.orders TO VERSION AS OF 13" in text
    assert "fix the table by hand" in text


def test_delta_conflicts_are_recognised_by_text():
    assert conflict_name(Exception("io.delta.exceptions.ConcurrentAppendException: x")) == (
        "ConcurrentAppendException"
    )
    assert conflict_name(Exception("[DELTA_CONCURRENT_DELETE_READ] Transaction conflict")) == (
        "DELTA_CONCURRENT_DELETE_READ"
    )
    assert conflict_name(Exception("[DELTA_MAX_COMMIT_RETRIES_EXCEEDED] ...")) is not None
    assert conflict_name(Exception("[DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW]")) is None
    both = "io.delta.exceptions.ConcurrentAppendException: [DELTA_CONCURRENT_APPEND] Files added"
    assert conflict_name(Exception(both)) == "DELTA_CONCURRENT_APPEND"


def test_first_lines_drops_the_jvm_stack():
    text = "[X] boom\n\tat org.apache.spark.Foo(Foo.scala:1)\n  at bar\nmore"
    assert first_lines(text) == "[X] boom\nmore"


def test_set_conf_quotes_backticks():
    assert set_conf_sql("k", "a`b;c") == "SET k=`a``b;c`"


def test_every_attempt_is_listed():
    first = report(Outcome.NEVER_WRITTEN)
    second = FenceReport(
        "merge",
        "analytics.orders",
        13,
        Outcome.REVERTED,
        [Commit(15, "WRITE", 14, None)],
        our_version=14,
        revert_version=16,
        retries=1,
    )
    second.earlier_attempts = [first]
    text = second.message()
    assert "attempts: 2 (fence_retries: 1), all refused:" in text
    assert "1. read v12; v13 UPDATE landed; never written" in text
    assert "2. read v13; v15 WRITE landed; written and reverted" in text
    # fence_retries is already set and spent: no advice to set it.
    assert "set `fence_retries: N`" not in text
    assert (
        "Each of its 2 attempts was refused after commits landed since the version it read "
        "(listed above): re-run when those writers are done, or raise `fence_retries` (now 1) "
        "on the model."
    ) in text


def test_spent_retries_name_no_writer_where_an_attempt_saw_no_commit_land():
    # Delta's conflict exception with no foreign commit after vB: nothing landed to wait for.
    first = FenceReport("merge", "analytics.orders", 12, Outcome.NEVER_WRITTEN, [], retries=1)
    second = report(Outcome.NEVER_WRITTEN, retries=1)
    second.earlier_attempts = [first]
    text = second.message()
    assert "All 1 retries (`fence_retries`) on the model were spent." in text
    assert "writers are done" not in text and "set `fence_retries: N`" not in text


def test_revert_reason_is_the_engines_line_not_dbts_header():
    from dbt_common.exceptions import DbtRuntimeError

    from dbt.adapters.fenced_spark.fence.outcome import reason

    error = DbtRuntimeError(
        "[DELTA_CONCURRENT_WRITE] ConcurrentWriteException: a commit landed\nat x"
    )
    assert str(error).splitlines()[0] == "Runtime Error"  # what the message used to show
    assert reason(error) == "[DELTA_CONCURRENT_WRITE] ConcurrentWriteException: a commit landed"
    assert reason(ValueError("")) == "ValueError"


def nested(message: str):
    """An engine error as dbt-spark hands it on: re-raised once more, header and all."""
    from dbt_common.exceptions import DbtRuntimeError

    return DbtRuntimeError(str(DbtRuntimeError(message)))


def test_engine_message_drops_every_runtime_error_header():
    from dbt.adapters.fenced_spark.fence.outcome import engine_message, reason

    error = nested("[DELTA_X] first line\n  indented detail")
    assert str(error).splitlines()[:2] == ["Runtime Error", "  Runtime Error"]
    assert engine_message(error) == "[DELTA_X] first line\n  indented detail"
    assert reason(error) == "[DELTA_X] first line"


def test_first_lines_stops_at_the_sqlstate_before_the_plan():
    text = "[T] gone. SQLSTATE: 42P01; line 1 pos 0;\n'DescribeDeltaHistory 1, [version#1L]"
    assert first_lines(text) == "[T] gone. SQLSTATE: 42P01; line 1 pos 0;"


def test_a_table_that_is_gone_is_a_refusal_that_says_so_and_is_not_retried():
    from dbt_common.exceptions import DbtRuntimeError

    from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState

    class Gone:
        def execute(self, sql):
            assert sql.startswith(("SET", "RESET")), f"only the tag's confs may run: {sql}"

        def history(self, table, limit):
            raise nested("[TABLE_OR_VIEW_NOT_FOUND] The table `a`.`t` cannot be found. Verify")

    state = FenceState("a.t", "a.t", "merge", 4, 4, "inv", "model.p.t")
    with pytest.raises(FenceViolation) as refused:
        Fence(Gone(), nullcontext, rng=lambda: 0.0).run(state, "merge ...", retries=3)
    report = refused.value.report
    assert report.outcome == Outcome.NEVER_WRITTEN and report.earlier_attempts == []
    text = report.message()
    assert "landed meanwhile:\n    - the table itself: dropped\n" in text
    assert (
        "detected by: pre-check: expected v4, found no table: "
        "[TABLE_OR_VIEW_NOT_FOUND] The table `a`.`t` cannot be found. Verify\n"
    ) in text
    assert "its first run creates the table anew" in text and "Runtime Error" not in text

    class Parquet(Gone):
        def history(self, table, limit):
            raise nested("[DELTA_ONLY_OPERATION] DESCRIBE HISTORY is only supported for Delta")

    with pytest.raises(FenceViolation) as refused:
        Fence(Parquet(), nullcontext).precheck(state)
    text = refused.value.report.message()
    assert "the table itself: re-created as a table that is not Delta" in text
    assert "found a table that is not Delta: [DELTA_ONLY_OPERATION]" in text
    assert "run the model once with --full-refresh" in text

    class Broken(Gone):
        def history(self, table, limit):
            raise DbtRuntimeError("connection reset")

    with pytest.raises(DbtRuntimeError) as raised:
        Fence(Broken(), nullcontext).precheck(state)
    assert not isinstance(raised.value, FenceViolation)  # not every failure is a gone table


class ChangedAfterWrite:
    """History at vB = 4 until the write statement runs; `after()` answers from then on."""

    def __init__(self, after):
        self.after, self.wrote = after, False

    def execute(self, sql):
        self.wrote = self.wrote or sql.startswith("merge")

    def history(self, table, limit):
        return self.after() if self.wrote else [Commit(4, "WRITE", 3, None)]

    def session_conf(self, key):
        return None

    def set_session_conf(self, key, value):
        pass

    def reconnect(self):
        pass  # the table stays gone on a new session too


def unverified(strategy: str, after) -> str:
    from dbt.adapters.fenced_spark.fence.errors import FenceUnverified
    from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState

    state = FenceState("a.t", "a.t", strategy, 4, 4, "inv-1", "model.p.t")
    runner = ChangedAfterWrite(after)
    with pytest.raises(FenceUnverified) as raised:
        Fence(runner, nullcontext, rng=lambda: 0.0).run(state, "merge ...", retries=3)
    assert runner.wrote
    return raised.value.msg


@pytest.mark.parametrize(
    "strategy, expected",
    [
        ("merge", "If it read version 4, or commits above it that do not conflict, the write"),
        ("replace_where", "If it directly follows version 4 or commits above it that do not"),
    ],
)
def test_a_history_read_that_fails_after_the_write_never_claims_nothing_was_written(
    strategy, expected
):
    def gone():
        raise nested("[TABLE_OR_VIEW_NOT_FOUND] The table `a`.`t` cannot be found.")

    text = unverified(strategy, gone)
    assert "the write statement finished, but reading the table's history" in text
    assert "verification failed: [TABLE_OR_VIEW_NOT_FOUND] The table `a`.`t` cannot" in text
    assert 'invocation_id "inv-1", node "model.p.t", attempt 1 and step "write"' in text
    assert expected in text
    assert "Runtime Error" not in text


def test_no_commit_of_ours_on_a_replaced_table_is_not_no_change():
    text = unverified("merge", lambda: [Commit(0, "CREATE TABLE", None, None)])
    assert "history now ends at v0, before v4: replaced after the write" in text


def test_a_snapshot_is_called_a_snapshot_and_never_told_to_full_refresh():
    from dbt.adapters.fenced_spark.fence.outcome import Gone

    snap = FenceReport("snapshot", "s.snap", 12, Outcome.NEVER_WRITTEN, LANDED)
    text = str(FenceViolation(snap))
    assert "re-run the snapshot" in text and "on the snapshot" in text and "model" not in text
    gone = FenceReport("snapshot", "s.snap", 12, Outcome.NEVER_WRITTEN, gone=Gone.NOT_DELTA)
    text = str(FenceViolation(gone))
    assert "drop the table, then run the snapshot" in text and "--full-refresh" not in text


def test_a_quoted_delta_error_loses_its_try_again():
    # A failed RESTORE is quoted inside "written and NOT reverted", whose advice is the RESTORE.
    delta = (
        "[DELTA_CONCURRENT_WRITE] ConcurrentWriteException: A concurrent transaction has written"
        " new data since the current transaction read the table. Please try the operation again."
    )
    quoted = reason(RuntimeError(delta + "\nConflicting commit: {...}"))
    assert quoted == delta.removesuffix(" Please try the operation again.")
    assert reason(RuntimeError("Please try the operation again.")) == "RuntimeError"
    append = "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] ConcurrentAppendException: Files were added."
    assert reason(RuntimeError(append + " Please retry the operation.")) == append


class MovedThenFails:
    """v5 landed after vB = 4 (refused under 'version' isolation); every history read after
    attempt 1's pre-check and refusal (three reads) raises `error`."""

    def __init__(self, error: Exception) -> None:
        self.error, self.calls = error, 0

    def execute(self, sql):
        raise AssertionError(f"nothing is written: {sql}")

    def history(self, table, limit):
        self.calls += 1
        if self.calls > 3:
            raise self.error
        return [Commit(4, "WRITE", 3, None), Commit(5, "UPDATE", 4, None)][-limit:]


def run_refused(error: Exception) -> FenceReport:
    from dataclasses import replace

    from dbt.adapters.fenced_spark.fence.protocol import VERSION, Fence, FenceState

    state = replace(FenceState("a.t", "a.t", "merge", 4, 4, "inv", "model.p.t"), isolation=VERSION)
    with pytest.raises(FenceViolation) as refused:
        Fence(MovedThenFails(error), nullcontext, rng=lambda: 0.0).run(state, "merge", retries=2)
    return refused.value.report


def test_a_retry_that_cannot_start_leaves_the_last_refusal_saying_why():
    from dbt_common.exceptions import DbtRuntimeError

    report = run_refused(DbtRuntimeError("connection reset"))
    assert report.outcome == Outcome.NEVER_WRITTEN and report.read_version == 4
    assert report.no_retry == "the retry could not start (connection reset)"
    assert "not retried (fence_retries: 2): the retry could not start (connection reset)." in (
        report.message()
    )


def test_a_write_refused_on_a_retry_lists_the_attempts_before_it():
    from dbt.adapters.fenced_spark.fence.errors import FenceWriteRefused
    from dbt.adapters.fenced_spark.fence.state import FenceState

    first = report(
        Outcome.REVERTED, our_version=14, revert_version=15, ours=[OURS], reverted=[OURS]
    )
    state = FenceState("`a`.`o`", "analytics.orders", "merge", 15, 15, "inv", "model.p.orders")
    text = FenceWriteRefused(state, "[DELTA_X] no", [], [first], retries=3).msg
    assert (
        "failed; the write of its last attempt was never written, and nothing of the earlier "
        "attempts stands.\nattempts: 2 (fence_retries: 3); a failure is not retried:\n"
        "  1. read v12; v13 UPDATE landed; written and reverted\n"
        "  2. read v15; failed, nothing written\nDelta said:\n[DELTA_X] no"
    ) in text
    assert FenceWriteRefused(state, "x", [], [first], 3).response["read_version"] == 15


def test_a_table_dropped_before_the_retry_is_refused_after_the_attempts_before_it():
    report = run_refused(nested("[TABLE_OR_VIEW_NOT_FOUND] The table `a`.`t` cannot be found."))
    assert report.gone is not None and report.retries == 2
    assert [r.read_version for r in report.earlier_attempts] == [4]
    assert "attempts: 2 (fence_retries: 2), all refused:" in report.message()


class Moved(MovedThenFails):
    """v5 landed after vB = 4, for as long as it is read."""

    def __init__(self) -> None:
        super().__init__(AssertionError("never raised"))

    def history(self, table, limit):
        return [Commit(4, "WRITE", 3, None), Commit(5, "UPDATE", 4, None)][-limit:]


def test_a_retry_whose_model_cannot_be_staged_anew_is_not_said_to_have_spent_the_retries():
    from dataclasses import replace

    from dbt.adapters.fenced_spark.fence.protocol import VERSION, Fence, FenceState

    restaged = []

    def restage(state):
        # Staging.stage: the view failed at the new vB, and the log named a commit after it.
        restaged.append(state.read_version)
        landed = [Commit(6, "WRITE", 5, None)]
        raise FenceViolation(
            FenceReport("merge", "a.t", state.read_version, Outcome.NEVER_WRITTEN, landed)
        )

    state = replace(FenceState("a.t", "a.t", "merge", 4, 4, "inv", "model.p.t"), isolation=VERSION)
    with pytest.raises(FenceViolation) as refused:
        Fence(Moved(), nullcontext, rng=lambda: 0.0).run(state, "merge", retries=2, restage=restage)
    final = refused.value.report
    assert restaged == [5]
    assert [r.read_version for r in final.earlier_attempts] == [4]
    text = final.message()
    assert "attempts: 2 (fence_retries: 2), all refused:" in text
    assert "not retried again (fence_retries: 2): its model could not be staged anew." in text
    assert "raise `fence_retries`" not in text and "set `fence_retries: N`" not in text
