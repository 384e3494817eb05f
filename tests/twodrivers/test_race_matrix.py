"""The scorecard's races across separate drivers on HDFS (tests/twodrivers/race_matrix.py):
merge, append_if_unchanged (a compile-time watermark), replace_where and a snapshot, each at
the three timings, each raced `dbt` command a process of its own while a notebook driver or a
second model's `dbt run` commits to the same table; stock dbt-spark as the control where it
loses or duplicates rows in the in-JVM scorecard.

Each foreign commit is proved from the history (race_matrix raises when it is not where the
timing says), then the table is judged. Cost: one raced `dbt build` process per adapter and timing
(five JVM starts: its nodes are raced one after the other, each on its own table) plus the
notebook driver's. With TWODRIVERS_SCORECARD set (`make
scorecard-twodrivers`), docs/scorecard-twodrivers.md and .png are written from these outcomes.
"""

import os

import pytest

from tests.twodrivers import race_matrix
from tests.twodrivers.race_matrix import CELLS, SECOND_MODEL_RACES


@pytest.fixture(scope="module")
def matrix(shared_lakehouse, tmp_path_factory):
    matrix = race_matrix.Matrix(shared_lakehouse, str(tmp_path_factory.mktemp("race_matrix")))
    yield matrix
    matrix.close()
    command = os.environ.get("TWODRIVERS_SCORECARD")
    if command and matrix.cells:
        race_matrix.write_docs(matrix, command)


@pytest.mark.parametrize(("adapter", "race", "timing"), CELLS, ids=["-".join(c) for c in CELLS])
def test_race(matrix, adapter, race, timing):
    cell = matrix.cell(adapter, race, timing)
    outcome, verdict = cell.outcome, cell.verdict
    said = f"{verdict.text}\n{outcome.timeline}\n{outcome.message}"
    if (race, timing) in SECOND_MODEL_RACES:
        assert cell.other_writer.startswith("a second model's dbt run"), cell.other_writer
    if adapter == "stock":
        # The control: the same race costs stock dbt-spark rows, with a green run.
        assert outcome.status == "success" and (verdict.lost or verdict.duplicated), said
        return
    assert not (verdict.lost or verdict.duplicated or verdict.bad), said
    if timing == "before":
        assert outcome.status == "success", said
    else:
        # Every foreign change here conflicts with what the node read or writes: refused, and
        # nothing of the run stands (judge compared the table with the foreign commit's).
        assert outcome.status != "success", said
        assert "refused" in outcome.message, said
