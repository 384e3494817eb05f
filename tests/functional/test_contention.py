"""Eight overlapping runs, all green and exact (issue 59): a refused write never commits, Delta's
own conflicts are retried, and no table is left for a person to repair.

The workload is tests/harness/contention.py's: `counter` (a merge on one row that reads the
counter from `{{ this }}`) and `batches` (an append_if_unchanged of the run's own batch), with
fence_retries 20. Over a server, eight `dbt run` processes at once; on the embedded session,
eight writers in threads with sessions of their own (separate processes would be separate JVMs
on a local disk, which Delta cannot serialise: docs/limits.md). `make reliability` sets
FENCE_CONTENTION_ROUNDS=3 and a 16-writer variant (FENCE_CONTENTION_RUNS=16).
"""

import json
import os

import pytest
from dbt.tests.util import run_dbt

from tests.functional.lakehouse import dbt_process, process_output
from tests.harness import contention

ROUNDS = int(os.environ.get("FENCE_CONTENTION_ROUNDS", "1"))
RUNS = int(os.environ.get("FENCE_CONTENTION_RUNS", "8"))
RETRIES = 20
# Disjoint writers commit one at a time (docs/fence.md): four show it at a quarter the cost.
DISJOINT = int(os.environ.get("FENCE_CONTENTION_DISJOINT", "4"))


class Contention:
    @pytest.fixture(scope="class")
    def models(self):
        return contention.models(RETRIES)

    def check(self, project, spark, codes: dict[str, int], outputs) -> contention.Tally:
        result = contention.tally(contention.dict_rows(spark), project.test_schema, codes)
        red = {n: outputs(n) for n, code in codes.items() if code}
        assert result.problems() == [], red
        # They raced: some attempt of some run was refused and retried (a tag's attempt > 1),
        # which only another run's commit after its vB can cause.
        attempts = contention.attempts(contention.dict_rows(spark), project.test_schema)
        assert max(attempts) > 1, attempts
        print(
            f"{len(codes)} runs: {result.green} green, counter {result.counter}, "
            f"{result.restores} RESTOREs, attempts {sorted(attempts)}"
        )
        return result


@pytest.mark.skip_profile(
    "session",
    reason="separate dbt processes would each start an embedded JVM on one local disk, which "
    "Delta cannot serialise; the session runs TestWritersInThreads",
)
class TestOverlappingDbtRuns(Contention):
    def test_every_run_green_and_exact(self, project, spark):
        run_dbt(["run"])  # the first build: the counter at 0, the batch 'first'
        codes: dict[str, int] = {}
        for round_ in range(ROUNDS):
            names = contention.run_names(round_, RUNS)
            runs = {name: dbt_process(project, name, {"run": name}) for name in names}
            codes.update({name: run.wait(timeout=1800) for name, run in runs.items()})
        result = self.check(project, spark, codes, lambda n: process_output(project, n)[-4000:])
        assert result.green == ROUNDS * RUNS and result.counter == ROUNDS * RUNS


@pytest.mark.skip_profile(
    "thrift",
    "connect",
    reason="over a server the eight writers are dbt processes (TestOverlappingDbtRuns); these "
    "threads drive the fence through the embedded session's own runner",
)
class TestWritersInThreads(Contention):
    def test_every_run_green_and_exact(self, project, spark):
        run_dbt(["run"])
        codes: dict[str, int] = {}
        for round_ in range(ROUNDS):
            names = contention.run_names(round_, RUNS)
            codes.update(contention.fenced_runs(spark, project.test_schema, names, RETRIES))
        result = self.check(project, spark, codes, lambda n: repr(contention.errors.get(n)))
        assert result.green == ROUNDS * RUNS and result.counter == ROUNDS * RUNS


@pytest.mark.skip_profile(
    "thrift",
    "connect",
    reason="these threads drive the fence through the embedded session's own runner",
)
class TestDisjointPartitions(Contention):
    """Fenced writers of one table commit one at a time, but never refuse each other for
    commits that conflict with nothing: K writers on their own partitions, no fence_retries,
    all commit. One whose write another's commit overtook is sent again (Delta skipped or
    refused it), and its tag lists that commit as tolerated."""

    def test_every_writer_commits_without_retries(self, project, spark):
        rows = contention.dict_rows(spark)
        contention.make_parts(rows, project.test_schema)
        names = contention.run_names(0, DISJOINT)
        codes = contention.fenced_runs(spark, project.test_schema, names, 0, disjoint=True)
        assert codes == {n: 0 for n in names}, {n: repr(contention.errors.get(n)) for n in codes}
        table = f"{project.test_schema}.parts"
        found = rows(f"select p, n from {table} where p != 'seed'")
        assert sorted((r["p"], r["n"]) for r in found) == sorted((n, 1) for n in names)
        history = sorted(rows(f"describe history {table}"), key=lambda h: int(h["version"]))
        assert "RESTORE" not in [h["operation"] for h in history]
        tags = [json.loads(h["userMetadata"]) for h in history if h["userMetadata"]]
        assert sorted(t["node"] for t in tags) == ["model.contention.parts"] * DISJOINT
        assert all(t["attempt"] == 1 for t in tags)  # no fence_retries: none was refused
        # They overlapped: a writer committed over another's commit, judged no conflict.
        assert any(t.get("tolerated") for t in tags), tags
