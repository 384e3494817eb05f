"""What a fence failure says: table, vB, what landed, what happened to our write, what to do."""

from dbt.adapters.fenced_spark.fence.errors import FenceReport, FenceViolation, Outcome, first_lines
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.protocol import conflict_name, set_conf_sql

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


def test_written_and_reverted():
    text = report(Outcome.REVERTED, our_version=14, revert_version=15).message()
    assert "written as v14, then reverted by RESTORE (v15)" in text


def test_written_not_reverted_tells_how_to_undo():
    text = report(Outcome.NOT_REVERTED, our_version=14, revert_error="v15 landed").message()
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
    )
    second.earlier_attempts = [first]
    text = second.message()
    assert "attempts: 2 (fence_retries: 1), all refused:" in text
    assert "1. read v12; v13 UPDATE landed; never written" in text
    assert "2. read v13; v15 WRITE landed; written and reverted" in text


def test_revert_reason_is_the_engines_line_not_dbts_header():
    from dbt_common.exceptions import DbtRuntimeError

    from dbt.adapters.fenced_spark.fence.errors import reason

    error = DbtRuntimeError(
        "[DELTA_CONCURRENT_WRITE] ConcurrentWriteException: a commit landed\nat x"
    )
    assert str(error).splitlines()[0] == "Runtime Error"  # what the message used to show
    assert reason(error) == "[DELTA_CONCURRENT_WRITE] ConcurrentWriteException: a commit landed"
    assert reason(ValueError("")) == "ValueError"
