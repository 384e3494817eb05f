"""A failed fenced node's adapter_response: what each fence error records, and how it reaches
run_results.json (dbt writes `{}` for a node that raised)."""

import json
from dataclasses import replace

from dbt.adapters.fenced_spark.fence.errors import FenceViolation
from dbt.adapters.fenced_spark.fence.history import Commit, FenceTag
from dbt.adapters.fenced_spark.fence.outcome import Gone, Outcome
from dbt.adapters.fenced_spark.fence.report import FenceReport
from dbt.adapters.fenced_spark.fence.scope import Judgement
from dbt.adapters.fenced_spark.run_results import FenceResponses, LastRun, last_runs

UPDATE = Commit(13, "UPDATE", 12, None)
OPTIMIZE = Commit(14, "OPTIMIZE", 13, None)


def test_a_refusal_names_conflicts_apart_from_tolerated_commits():
    report = FenceReport(
        "merge",
        "s.orders",
        12,
        Outcome.REVERTED,
        [UPDATE, OPTIMIZE],
        our_version=15,
        revert_version=16,
        judged={
            13: Judgement(UPDATE, True, "it changed rows this run read"),
            14: Judgement(OPTIMIZE, False, "no data change"),
        },
    )
    assert FenceViolation(report).response == {
        "_message": "MERGE refused",
        "fence_outcome": "written_and_reverted",
        "read_version": 12,
        "commit_version": 15,
        "revert_version": 16,
        "landed": [13, 14],
        "conflicts": [13],
        "tolerated": ["v14 OPTIMIZE: no data change"],
        "steps": [],
        "standing": [],
        "rolled_back": [],
        "table_gone": None,
    }


def test_without_a_judgement_every_landed_commit_is_the_reason_and_a_gone_table_says_how():
    gone = FenceReport("snapshot", "s.snap", 12, Outcome.NEVER_WRITTEN, gone=Gone.NOT_DELTA)
    assert FenceViolation(gone).response["table_gone"] == "not_delta"
    landed = FenceReport("merge", "s.orders", 12, Outcome.NEVER_WRITTEN, [UPDATE, OPTIMIZE])
    assert FenceViolation(landed).response["conflicts"] == [13, 14]


def test_a_step_of_ours_that_stands_is_named():
    delete = Commit(
        13, "DELETE", 12, FenceTag("inv", "model.p.orders", "merge", 12, step="pre_hook").to_json()
    )
    report = FenceReport("merge", "s.orders", 12, Outcome.NEVER_WRITTEN, [OPTIMIZE], ours=[delete])
    response = FenceViolation(report).response
    assert (response["steps"], response["standing"]) == (["v13 DELETE (pre_hook)"], [13])


def results_file(tmp_path, invocation: str, response: dict) -> None:
    (tmp_path / "run_results.json").write_text(
        json.dumps(
            {
                "metadata": {"invocation_id": invocation},
                "results": [
                    {"unique_id": "model.p.orders", "adapter_response": response},
                    {"unique_id": "model.p.other", "adapter_response": {}},
                ],
            }
        )
    )


def responses_of(tmp_path) -> dict[str, dict]:
    data = json.loads((tmp_path / "run_results.json").read_text())
    return {r["unique_id"]: r["adapter_response"] for r in data["results"]}


def test_a_microbatch_model_gets_each_batchs_response(tmp_path):
    responses = FenceResponses()
    responses.record("model.p.orders", {"fence_outcome": "committed", "commit_version": 3})
    responses.record("model.p.orders", {"fence_outcome": "never_written"})
    results_file(tmp_path, "new", {})
    data = json.loads((tmp_path / "run_results.json").read_text())
    data["results"][0]["batch_results"] = {"successful": [], "failed": []}
    (tmp_path / "run_results.json").write_text(json.dumps(data))
    responses.write(str(tmp_path), "new")
    assert responses_of(tmp_path)["model.p.orders"] == {
        "batches": [
            {"fence_outcome": "committed", "commit_version": 3},
            {"fence_outcome": "never_written"},
        ]
    }


def test_the_failed_nodes_response_is_filled_into_this_invocations_file_only(tmp_path):
    failed = FenceResponses()
    failed.record("model.p.orders", {"fence_outcome": "never_written", "commit_version": None})
    # dbt's first cleanup: the file is still the previous invocation's.
    results_file(tmp_path, "old", {})
    failed.write(str(tmp_path), "new")
    assert responses_of(tmp_path)["model.p.orders"] == {}
    # After dbt wrote this invocation's file: filled in, without the keys that have no value.
    results_file(tmp_path, "new", {})
    failed.write(str(tmp_path), "new")
    assert responses_of(tmp_path) == {
        "model.p.orders": {"fence_outcome": "never_written"},
        "model.p.other": {},
    }


def test_a_response_dbt_wrote_is_kept_and_a_missing_file_is_no_error(tmp_path):
    failed = FenceResponses()
    failed.write(str(tmp_path / "none"), "new")
    failed.record("model.p.orders", {"fence_outcome": "never_written"})
    results_file(tmp_path, "new", {"_message": "OK"})
    failed.write(str(tmp_path), "new")
    assert responses_of(tmp_path)["model.p.orders"] == {"_message": "OK"}


def test_a_delta_refusal_after_our_step_never_says_nothing_was_written():
    from dbt.adapters.fenced_spark.fence.errors import FenceWriteRefused
    from dbt.adapters.fenced_spark.fence.state import FenceState

    state = FenceState("`s`.`t`", "s.t", "append_if_unchanged", 12, 13, "inv", "model.p.t")
    delete = Commit(
        13, "DELETE", 12, FenceTag("inv", "model.p.t", "x", 12, step="pre_hook").to_json()
    )
    stepped = FenceWriteRefused(state, "DELTA_REPLACE_WHERE_MISMATCH", [delete])
    assert "this run's earlier steps stand: v13 DELETE (pre_hook)" in str(stepped)
    assert "nothing was written" not in str(stepped)
    assert stepped.response["standing"] == [13]
    unknown = FenceWriteRefused(state, "DELTA_REPLACE_WHERE_MISMATCH", None)
    assert "earlier steps stand (the last as v13)" in str(unknown)
    clean = FenceWriteRefused(replace(state, expected_version=12), "words", [])
    assert "failed; nothing was written. Spark said:" in str(clean)
    delta = FenceWriteRefused(
        replace(state, expected_version=12), "Error running query: [DELTA_X] no", []
    )
    assert "failed; nothing was written. Delta said:" in str(delta)


def test_the_last_run_s_versions_are_read_by_node(tmp_path):
    (tmp_path / "run_results.json").write_text(
        json.dumps(
            {
                "metadata": {"invocation_id": "last"},
                "results": [
                    {"unique_id": "model.p.a", "adapter_response": {"commit_version": 7}},
                    {"unique_id": "model.p.b", "adapter_response": {"read_version": 4}},
                    {
                        "unique_id": "model.p.c",
                        "adapter_response": {
                            "batches": [{"commit_version": 2}, {"commit_version": 3}]
                        },
                    },
                    {"unique_id": "model.p.d", "adapter_response": {}},
                    {"unique_id": "model.p.e", "adapter_response": {"commit_version": True}},
                    {"unique_id": "model.p.f", "adapter_response": {"commit_version": 10**30}},
                ],
            }
        )
    )
    assert last_runs(str(tmp_path), "now") == {
        "model.p.a": LastRun(7, invocation_id="last"),
        "model.p.b": LastRun(4, invocation_id="last"),
        "model.p.c": LastRun(3, invocation_id="last"),
    }
    assert last_runs(str(tmp_path), "last") == {}  # this run's own: not a last run
    assert last_runs(str(tmp_path / "missing"), "now") == {}


def test_only_a_verified_commit_with_its_table_s_location_settles_the_version(tmp_path):
    where = "file:/w/orders"
    committed = {"fence_outcome": "committed", "commit_version": 7, "table_location": where}
    responses = {
        "model.p.a": committed,
        "model.p.b": {**committed, "table_location": None},  # the session: no location
        "model.p.c": {**committed, "fence_outcome": "written_not_reverted"},
        # A retry reads above what its capture checked: no_change settles nothing.
        "model.p.d": {"fence_outcome": "no_change", "read_version": 7, "table_location": where},
        "model.p.e": {"batches": [{"fence_outcome": "unverified", "read_version": 2}, committed]},
        "model.p.f": {
            "batches": [
                committed,
                {
                    "fence_outcome": "batch_already_applied",
                    "commit_version": 9,
                    "table_location": where,
                },
            ]
        },
        "model.p.g": {"fence_outcome": "committed", "read_version": 7, "table_location": where},
        "model.p.h": {"batches": [{**committed, "commit_version": 6}, committed]},
    }
    (tmp_path / "run_results.json").write_text(
        json.dumps(
            {
                "metadata": {"invocation_id": "last"},
                "results": [
                    {"unique_id": node, "adapter_response": response}
                    for node, response in responses.items()
                ],
            }
        )
    )
    runs = last_runs(str(tmp_path), "now")
    assert {node: (run.version, run.settled_at) for node, run in runs.items()} == {
        "model.p.a": (7, where),
        "model.p.b": (7, None),
        "model.p.c": (7, None),
        "model.p.d": (7, None),
        # An earlier batch's commit its later batches took as their own run's: not settled.
        "model.p.e": (7, None),
        "model.p.f": (9, None),
        "model.p.g": (7, None),
        "model.p.h": (7, where),
    }
    assert runs["model.p.b"].verified and not runs["model.p.c"].verified
    assert {run.invocation_id for run in runs.values()} == {"last"}


def test_a_run_results_file_it_cannot_read_gives_no_start(tmp_path):
    for text in ('{"metadata": null}', '{"metadata": {}, "results": 5}', "[1]", "{"):
        (tmp_path / "run_results.json").write_text(text)
        assert last_runs(str(tmp_path), "now") == {}
