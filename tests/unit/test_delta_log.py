"""The Delta log reader's search and parsing, on a log made of plain version numbers."""

import json

import pytest

from dbt.adapters.fenced_spark.fence.delta.log_tail import _gallop, _Log, commit_from_info
from dbt.adapters.fenced_spark.fence.history import FenceTag


class FakeLog:
    def __init__(self, latest: int, first: int = 0) -> None:
        self.latest, self.first = latest, first
        self.probes: list[int] = []

    def has(self, version: int) -> bool:
        self.probes.append(version)
        return self.first <= version <= self.latest


@pytest.mark.parametrize("latest", [-1, 0, 1, 2, 9, 10, 17, 1023, 1024, 10_000])
@pytest.mark.parametrize("start_back", [None, 0, 1, 9, 500])
def test_gallop_finds_the_newest_version(latest, start_back):
    start = -1 if start_back is None else max(-1, latest - start_back)
    log = FakeLog(latest)
    assert _gallop(log, start) == latest  # type: ignore[arg-type]


def test_gallop_from_a_checkpoint_costs_a_few_probes_at_any_length():
    for latest in (15, 10_005, 1_000_009):
        log = FakeLog(latest, first=latest - 10)
        assert _gallop(log, (latest // 10) * 10) == latest  # type: ignore[arg-type]
        assert len(log.probes) <= 8


def test_pre_check_on_an_unchanged_table_is_one_probe():
    log = FakeLog(41)
    assert _gallop(log, 41) == 41  # type: ignore[arg-type]
    assert log.probes == [42]


def test_commit_info_reads_like_a_history_row():
    tag = FenceTag("inv", "model.p.orders", "merge", 7)
    info = {
        "timestamp": 1795000000000,
        "operation": "MERGE",
        "operationParameters": {"predicate": "[]"},
        "readVersion": 7,
        "isolationLevel": "Serializable",
        "isBlindAppend": False,
        "operationMetrics": {"numTargetRowsUpdated": "1", "numOutputRows": 2},
        "userMetadata": tag.to_json(),
        "engineInfo": "Apache-Spark/4.1.4 Delta-Lake/4.4.0",
        "txnId": "x",
    }
    commit = commit_from_info(8, info)
    assert (commit.version, commit.operation, commit.read_version) == (8, "MERGE", 7)
    assert commit.tag == tag
    assert commit.metrics == {"numTargetRowsUpdated": "1", "numOutputRows": "2"}
    assert commit.timestamp is not None and commit.timestamp.startswith("2026-")


def test_first_commit_and_foreign_writers_without_optional_fields():
    commit = commit_from_info(0, {"operation": "CREATE TABLE"})
    assert commit.read_version is None and commit.tag is None and commit.metrics == {}
    assert commit_from_info(3, {}).operation == "None"  # as str(None) from a history row


class Reader:
    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)

    def readLine(self) -> str | None:  # noqa: N802 (java.io.BufferedReader's name)
        return self.lines.pop(0) if self.lines else None

    def close(self) -> None:
        pass


class CommitLandingMidRead(_Log):
    """Commit 52 is renamed into place after the first open failed and before the probe."""

    def __init__(self) -> None:
        self.opens = 0

    def has(self, version: int) -> bool:
        return version == 52 and self.opens > 0

    def _lines(self, name: str) -> Reader:
        self.opens += 1
        if self.opens == 1:
            raise FileNotFoundError(name)
        return Reader([json.dumps({"commitInfo": {"operation": "WRITE", "readVersion": 51}})])


def test_a_commit_that_lands_between_open_and_probe_is_read_not_raised():
    log = CommitLandingMidRead()
    assert log.head(52) == ({"operation": "WRITE", "readVersion": 51}, None)
    assert log.opens == 2


def test_a_missing_commit_is_none():
    log = CommitLandingMidRead()
    assert log.head(53) is None


class Commit(_Log):
    def __init__(self, lines: list[str]) -> None:
        self.text = lines

    def has(self, version: int) -> bool:
        return True

    def _lines(self, name: str) -> Reader:
        return Reader(self.text)


INFO = json.dumps({"commitInfo": {"operation": "MERGE"}})
ADD = json.dumps({"add": {"path": "a.parquet", "dataChange": True}})


def txn(app: str, version: int) -> str:
    return json.dumps({"txn": {"appId": app, "version": version, "lastUpdated": 1}})


@pytest.mark.parametrize(
    "lines, expected",
    [
        ([INFO, txn("dbt-fenced-spark", 7), ADD], 7),
        ([INFO, txn("a-stream", 3), ADD], None),  # another writer's idempotent write
        ([INFO, ADD, txn("dbt-fenced-spark", 7)], None),  # after the files: not Delta's order
        ([txn("dbt-fenced-spark", 5), INFO, ADD], 5),
        ([INFO], None),
    ],
)
def test_head_reads_the_fences_txn_before_the_files(lines, expected):
    assert Commit(lines).head(1) == ({"operation": "MERGE"}, expected)
