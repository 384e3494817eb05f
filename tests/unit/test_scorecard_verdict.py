"""The scorecard's verdict on a raced table: a failed run is "nothing lost" only if the table is
exactly as the foreign commit left it, checked from its contents, never assumed."""

import importlib.util
import os
from datetime import date, datetime

import pytest

from tests.conftest import REPO

PATH = os.path.join(REPO, "integration_projects", "lakehouse_orders", "scorecard.py")


@pytest.fixture(scope="module")
def scorecard():
    spec = importlib.util.spec_from_file_location("scorecard", PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


THEIRS = [(1, "cancelled"), (2, "open")]
REFUSED = "Fenced merge into t refused: the table changed after this run read it at version 3."


def outcome(scorecard, status, message, rows, at_foreign=THEIRS):
    return scorecard.Outcome(
        adapter="fenced",
        status=status,
        message=message,
        start_version=2,
        foreign_version=4,
        window_version=3,
        rows=rows,
        rows_at_foreign=at_foreign,
        foreign_effect_present=True,
    )


def test_a_refusal_that_left_the_table_as_they_did_lost_nothing(scorecard):
    verdict = scorecard.judge("between", outcome(scorecard, "error", REFUSED, list(THEIRS)))
    assert verdict.text == "refused, explained; nothing lost" and not verdict.bad


def test_a_failed_run_whose_write_stands_is_flagged(scorecard):
    # Their cancel is still there (nothing "lost"), but our shipped row 3 stayed.
    left = [*THEIRS, (3, "shipped")]
    verdict = scorecard.judge("between", outcome(scorecard, "error", REFUSED, left))
    assert verdict.text == "failed, yet its write stands in the table" and verdict.bad


def test_only_a_delta_conflict_is_called_one(scorecard):
    conflict = "[DELTA_CONCURRENT_APPEND] Transaction conflict detected."
    said = scorecard.judge("during", outcome(scorecard, "error", conflict, list(THEIRS)))
    assert said.text == "failed with Delta's conflict error; nothing lost"
    other = scorecard.judge("during", outcome(scorecard, "error", "\nOut of memory", THEIRS))
    assert other.text == "failed (Out of memory); nothing lost"


def test_the_projects_tests_judge_the_table_after_the_re_run(scorecard):
    refused = outcome(scorecard, "error", REFUSED, list(THEIRS))
    refused.reran, refused.tests_failed = "success", []
    assert scorecard.judge("between", refused).text == "refused, explained; nothing lost"
    refused.tests_failed = ["assert_order_ids_unique"]
    verdict = scorecard.judge("between", refused)
    assert verdict.bad and verdict.text.endswith("project tests failed: assert_order_ids_unique")
    refused.reran, refused.tests_failed = "error", []
    verdict = scorecard.judge("between", refused)
    assert verdict.bad and verdict.text.endswith("its re-run: error")


def test_the_output_reads_as_sql_rows_and_says_what_vb_is(scorecard):
    # What `make demo` prints: rows as a reader writes them, not Python's datetime reprs, and
    # vB explained on the first line that uses it (the "between" race comes first).
    stock = outcome(scorecard, "success", "", [(4, "shipped", datetime(2026, 1, 2, 8, 0), None)])
    fenced = outcome(scorecard, "error", REFUSED, [(1, "late", date(2026, 1, 2), 2)])
    assert scorecard.table_difference(stock, fenced) == (
        "only in stock: (4, 'shipped', 2026-01-02 08:00:00, null); "
        "only in fenced: (1, 'late', 2026-01-02, 2)"
    )
    assert "(vB, the version" in scorecard.TIMINGS["between"]
    assert "vB" not in scorecard.TIMINGS["before"]
