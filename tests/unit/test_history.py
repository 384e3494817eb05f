"""History rows as the session and the Thrift server return them, and the commit tag."""

import datetime

from dbt.adapters.fenced_spark.fence.delta.history import parse_history
from dbt.adapters.fenced_spark.fence.history import Commit, FenceTag
from dbt.adapters.fenced_spark.fence.scope import STEPS, Scope
from dbt.adapters.fenced_spark.fence.state import SNAPSHOT, VERSION, FenceState

COLUMNS = [
    "version",
    "timestamp",
    "userId",
    "userName",
    "operation",
    "operationParameters",
    "job",
    "notebook",
    "clusterId",
    "readVersion",
    "isolationLevel",
    "isBlindAppend",
    "operationMetrics",
    "userMetadata",
    "engineInfo",
]

TAG = FenceTag("inv-1", "model.p.orders", "merge", 4)


def row(version, operation, read_version, metadata=None, metrics=None):
    return [
        version,
        datetime.datetime(2026, 11, 22, 10, 0, version),
        None,
        None,
        operation,
        {},
        None,
        None,
        None,
        read_version,
        "Serializable",
        False,
        metrics or {},
        metadata,
        "Apache-Spark/4.1.4 Delta-Lake/4.4.0",
    ]


def test_session_rows_sorted_oldest_first():
    commits = parse_history(COLUMNS, [row(6, "MERGE", 4, TAG.to_json()), row(5, "UPDATE", 4)])
    assert [c.version for c in commits] == [5, 6]
    assert commits[1].tag == TAG and commits[0].tag is None


def test_thrift_rows_with_text_maps_and_empty_strings():
    thrift = [
        [
            "3",
            "2026-11-22 10:00:03",
            "",
            "",
            "WRITE",
            '{"mode":"Append"}',
            "",
            "",
            "",
            "2",
            "Serializable",
            "true",
            '{"numOutputRows":"5"}',
            "",
            "engine",
        ]
    ]
    (commit,) = parse_history(COLUMNS, thrift)
    assert commit.version == 3 and commit.read_version == 2
    assert commit.metrics == {"numOutputRows": "5"} and commit.user_metadata is None


def test_first_commit_has_no_read_version():
    (commit,) = parse_history(COLUMNS, [row(0, "CREATE TABLE", None)])
    assert commit.read_version is None


def test_tag_round_trip_and_foreign_metadata():
    assert FenceTag.parse(TAG.to_json()) == TAG
    assert FenceTag.parse('{"job": "nightly"}') is None
    assert FenceTag.parse("not json") is None
    assert FenceTag.parse(None) is None


def test_tag_escapes_hostile_names():
    hostile = FenceTag("inv", "model.p.o\"r`d'e;r\ns é", "merge", 1)
    text = hostile.to_json()
    assert "\n" not in text and "é" not in text
    assert FenceTag.parse(text) == hostile


def test_same_run_ignores_step_but_not_attempt():
    assert TAG.same_run(FenceTag("inv-1", "model.p.orders", "merge", 4, 1, "revert"))
    assert not TAG.same_run(FenceTag("inv-1", "model.p.orders", "merge", 4, 2))
    assert not TAG.same_run(FenceTag("inv-2", "model.p.orders", "merge", 4))


def test_writer_names_dbt_runs_and_other_engines():
    dbt_commit = Commit(7, "MERGE", 6, TAG.to_json())
    assert "model.p.orders" in dbt_commit.writer and "inv-1" in dbt_commit.writer
    notebook = Commit(7, "UPDATE", 6, None, user_name="ana", engine_info="Spark 4")
    assert notebook.describe() == "v7 UPDATE by ana via Spark 4"
    job = Commit(8, "WRITE", 7, "nightly backfill", engine_info="Spark 4")
    assert job.describe() == 'v8 WRITE by an unnamed writer ("nightly backfill") via Spark 4'


def test_merge_shaped_writes_keep_deltas_conflict_detection_and_every_other_write_is_strict():
    for strategy in ("merge", "insert", "snapshot"):
        write = FenceTag("inv-1", "snapshot.p.s", strategy, 4, step="write", expected_version=4)
        assert not write.strict
        assert write.holds(Commit(7, "MERGE", 4, write.to_json())) is True  # read vB
        assert write.holds(Commit(5, "MERGE", 3, write.to_json())) is False
        step = FenceTag("inv-1", "snapshot.p.s", strategy, 4, step="schema_change")
        assert step.strict
    for strategy in ("append_if_unchanged", "replace_where", "microbatch"):
        assert FenceTag("inv-1", "model.p.m", strategy, 4).strict


def test_an_append_or_replace_that_let_delta_retry_is_checked_as_a_merge_is():
    tag = FenceTag("inv-1", "model.p.m", "replace_where", 4, expected_version=4, delta_retries=True)
    assert not tag.strict
    assert FenceTag.parse(tag.to_json()) == tag
    assert '"delta_retries":true' in tag.to_json()
    # Delta committed it two commits above the snapshot it read: that holds, as for a MERGE.
    assert tag.holds(Commit(7, "WRITE", 4, tag.to_json())) is True
    assert tag.holds(Commit(7, "WRITE", 3, tag.to_json())) is False
    # A tag written before the flag existed stays strict.
    old = FenceTag("inv-1", "model.p.m", "replace_where", 4, expected_version=4)
    assert "delta_retries" not in old.to_json() and FenceTag.parse(old.to_json()).strict


def test_which_writes_let_delta_commit_them_above_their_snapshot():
    def state(strategy, scope, isolation=SNAPSHOT):
        return FenceState(
            "t", "t", strategy, 4, 4, "inv", "model.p.m", scope=scope, isolation=isolation
        )

    bounded = Scope(replaces=("day >= 2",))
    assert not state("replace_where", bounded).strict
    assert state("replace_where", bounded).tag("write").delta_retries
    assert not state("replace_where", bounded).tag("pre_hook").delta_retries
    # The promise of append_if_unchanged, the 'version' reading, and unknown scopes stay strict.
    assert state("append_if_unchanged", STEPS).strict
    assert state("replace_where", bounded, VERSION).strict
    assert not state("replace_where", bounded, VERSION).tag("write").delta_retries
    # A MERGE always let Delta retry; its tag needs no flag.
    assert (
        not state("merge", bounded).strict
        and not state("merge", bounded).tag("write").delta_retries
    )
