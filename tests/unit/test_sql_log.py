"""SqlLog over a fake server: which files it reads, in how many statements, and when it leaves
the answer to DESCRIBE HISTORY. tests/functional/test_sql_log.py reads real Delta logs."""

import fnmatch
import json
import re

import pytest

from dbt.adapters.fenced_spark.connect import FrameReads
from dbt.adapters.fenced_spark.fence.delta.history import commit_file
from dbt.adapters.fenced_spark.fence.delta.sql_log import PROBES, SqlFileReads, SqlLog
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.rewriter import name_parts

LOG = "file:/w/orders/_delta_log"


class FakeServer:
    """A Delta log as files, read the way SqlLog's statements read them. Like Spark's file
    sources, it never returns a file whose name starts with `_`."""

    def __init__(self, versions: int, cleaned_below: int = 0, provider: str = "delta"):
        self.files: dict[str, str] = {}
        for v in range(cleaned_below, versions):
            info = {"commitInfo": {"timestamp": 1_700_000_000_000 + v, "operation": "WRITE"}}
            if v:
                info["commitInfo"]["readVersion"] = v - 1
            self.files[commit_file(v)] = json.dumps(info) + '\n{"add": {"path": "f"}}'
        self.files["_last_checkpoint"] = json.dumps({"version": max(versions - 3, 0)})
        self.provider = provider
        # DESCRIBE EXTENDED's column lines: a column may be named like a line of the table's.
        self.columns = [("id", "bigint", None)]
        self.statements: list[str] = []
        self.history_reads = 0
        self.fails: str | None = None
        # What EXPLAIN's file scan prints; None: a plan that says nothing of its paths.
        self.plan: str | None = "FileScan binaryFile [path#1] Location: InMemoryFileIndex({} paths)"

    def commit(self) -> None:
        latest = max(int(n[:20]) for n in self.files if n[:20].isdigit())
        self.files[commit_file(latest + 1)] = json.dumps({"commitInfo": {"operation": "MERGE"}})

    def fetch(self, sql: str) -> list:
        self.statements.append(sql)
        if self.fails:
            raise RuntimeError(self.fails)
        match = re.search(r"FROM (binaryFile|text)\.`(.*)\{(.*)\}`$", sql)
        assert match and match.group(2) == LOG, sql
        if sql.startswith("EXPLAIN SELECT path FROM binaryFile"):
            # Spark's file index counts every path the pattern expands to, `_` names too.
            found = [n for a in match.group(3).split(",") for n in self._matching(a)]
            if not found:
                raise RuntimeError("[PATH_NOT_FOUND] Path does not exist: file:/w/orders")
            plan = "== Physical Plan ==\n" + (self.plan or "LocalTableScan").format(len(found))
            return [(plan,)]
        rows = []
        for alternative in match.group(3).split(","):
            for name in self._matching(alternative):
                if name.rsplit("/", 1)[-1].startswith("_"):
                    continue  # Spark's file sources skip these
                text = self.files[name]
                if match.group(1) == "text":
                    rows += [(name, line) for line in text.split("\n")]
                elif "regexp_extract" in sql:
                    rows.append((f"{LOG}/{name}", text.split("\n")[0]))
                else:
                    rows.append((f"{LOG}/{name}", ""))
        if not rows:
            raise RuntimeError("[PATH_NOT_FOUND] Path does not exist: file:/w/orders")
        return rows

    def describe(self, table: str) -> list:
        self.statements.append(f"describe extended {table}")
        if self.fails:
            raise RuntimeError(self.fails)
        return [
            *self.columns,
            ("", "", ""),
            ("# Detailed Table Information", "", ""),
            ("Name", f"spark_catalog.{table}", ""),
            ("Location", LOG[:-11], ""),
            ("Provider", self.provider, ""),
            ("Table Properties", "[delta.minReaderVersion=1]", ""),
        ]

    def _matching(self, alternative: str) -> list[str]:
        return [n for n in self.files if fnmatch.fnmatch(n, alternative.removeprefix("/"))]

    def history(self, table: str, limit: int) -> list[Commit]:
        self.history_reads += 1
        return [Commit(0, "CREATE TABLE", None, None)]

    def location(self, table: str) -> str:
        raise AssertionError("SqlLog finds the location in the catalog")

    def reads(self) -> int:
        return sum(s.startswith("SELECT") and "binaryFile" in s for s in self.statements)

    def probes(self) -> int:
        return sum(s.startswith("EXPLAIN") for s in self.statements)

    def lookups(self) -> int:
        return sum(s.startswith("describe extended") for s in self.statements)


TABLE = "`analytics`.`orders`"


def test_names_are_split_outside_backquotes():
    assert name_parts("`analytics`.`orders`") == ["analytics", "orders"]
    assert name_parts("analytics.orders") == ["analytics", "orders"]
    assert name_parts("`a.b`.`c``d`") == ["a.b", "c`d"]
    assert name_parts("a.`b") is None


@pytest.mark.parametrize("versions", [1, 5, 15, 16])
def test_a_young_table_is_read_in_one_statement(versions):
    server = FakeServer(versions)
    assert SqlLog(server).latest_version(TABLE) == versions - 1
    assert server.reads() == 1 and server.history_reads == 0


@pytest.mark.parametrize("versions", [17, 40, 120, 1_000, 10_000, 200_000])
def test_the_newest_version_is_found_by_named_files_alone(versions):
    server = FakeServer(versions)
    assert SqlLog(server).latest_version(TABLE) == versions - 1
    assert server.history_reads == 0
    # The probes and the window are read; the narrowing between them only asks Spark's plan.
    assert server.reads() <= 2 and server.probes() <= 4
    for sql in server.statements[1:]:
        assert len(re.findall(r"/\d{20}\.json", sql)) <= PROBES


@pytest.mark.parametrize("versions", [40, 10_000, 200_000])
@pytest.mark.parametrize("behind", [0, 1, 15])
def test_from_where_the_last_run_left_it_any_length_is_one_read(versions, behind):
    server = FakeServer(versions)
    hints = {TABLE: versions - 1 - behind}
    assert SqlLog(server, hints=hints).latest_version(TABLE) == versions - 1
    assert server.reads() == 1 and server.probes() == 0 and server.history_reads == 0


@pytest.mark.parametrize(
    "versions, hint",
    [
        (40, 900),  # the table replaced since: the hint is past its newest version
        (10_000, 5),  # far behind: many landed since
        (300, 50),  # below what a cleanup left
    ],
)
def test_a_hint_is_only_where_the_search_starts(versions, hint):
    server = FakeServer(versions, cleaned_below=100 if versions == 300 else 0)
    assert SqlLog(server, hints={TABLE: hint}).latest_version(TABLE) == versions - 1
    assert server.history_reads == 0


@pytest.mark.parametrize("versions", [40, 10_000])
def test_a_plan_that_does_not_count_its_paths_is_narrowed_by_reads(versions):
    server = FakeServer(versions)
    server.plan = None
    assert SqlLog(server).latest_version(TABLE) == versions - 1
    assert server.history_reads == 0 and server.reads() <= 6


def test_a_pre_check_on_an_untouched_table_asks_the_plan_only_and_not_the_catalog_again():
    server = FakeServer(10_000)
    node: dict = {}
    SqlLog(server, node).recent(TABLE, 32).__next__()  # capture: the catalog, the files
    server.statements.clear()
    assert SqlLog(server, node).latest_version(TABLE, known=9_999) == 9_999
    assert len(server.statements) == 1 and server.probes() == 1
    later = "/00000000000000010000.json"
    staged = "/_staged_commits/*"
    assert f"/00000000000000009999.json,{later},{later},{staged},{staged}}}" in server.statements[0]


def test_a_pre_check_is_not_fooled_by_a_cleanup_that_took_vb_as_the_next_version_landed():
    # Spark counts a path as often as it is named: with the later names doubled, one file of
    # the three can only be vB's.
    server = FakeServer(5)
    node: dict = {}
    SqlLog(server, node).latest_version(TABLE)
    server.commit()
    del server.files[commit_file(4)]
    assert SqlLog(server, node).latest_version(TABLE, known=4) == 0  # FakeServer's history
    assert server.history_reads == 1


WHERE = LOG.removesuffix("/_delta_log")


def test_the_last_run_s_verified_commit_still_newest_is_settled_by_one_plan():
    server = FakeServer(10_000)
    log = SqlLog(server, {}, hints={TABLE: 9_999}, settled={TABLE: WHERE})
    assert log.settled(TABLE) == 9_999
    assert server.lookups() == 1 and server.probes() == 1 and server.reads() == 0


@pytest.mark.parametrize(
    "change",
    ["commit", "cleanup", "staged", "elsewhere", "not settled", "unreadable plan", "failing"],
)
def test_anything_but_that_commit_at_the_head_is_not_settled(change):
    server = FakeServer(10)
    hints, settled = {TABLE: 9}, {TABLE: WHERE}
    if change == "commit":
        server.commit()
    elif change == "cleanup":
        server.commit()
        del server.files[commit_file(9)]
    elif change == "staged":
        server.files["_staged_commits/00000000000000000010.3f2a.json"] = "{}"
    elif change == "elsewhere":
        settled = {TABLE: "file:/w/orders_before_it_moved"}
    elif change == "not settled":
        settled = {}
    elif change == "unreadable plan":
        server.plan = None
    if change == "failing":  # the catalog answers, the plan fails
        fetch = server.fetch

        def failing(sql: str) -> list:
            if sql.startswith("EXPLAIN"):
                raise RuntimeError("[INTERNAL_ERROR] the server is gone")
            return fetch(sql)

        server.fetch = failing  # type: ignore[method-assign]
    assert SqlLog(server, {}, hints=hints, settled=settled).settled(TABLE) is None
    assert server.reads() == 0 and server.history_reads == 0


def test_a_pre_check_after_a_commit_reads_it():
    server = FakeServer(120)
    node: dict = {}
    SqlLog(server, node).latest_version(TABLE)
    server.commit()
    log = SqlLog(server, node)
    assert log.latest_version(TABLE, known=119) == 120
    assert [c.operation for c in log.commits_since(TABLE, 119)] == ["MERGE"]


def test_reads_of_commits_ask_the_catalog_in_each_step_a_moved_table_is_read_where_it_is():
    server = FakeServer(20)
    node = {TABLE: "file:/w/moved_from/_delta_log"}  # an earlier step's lookup
    log = SqlLog(server, node)
    server.commit()
    assert [c.version for c in log.commits_since(TABLE, 19)] == [20]
    assert server.lookups() == 1 and node[TABLE] == LOG
    assert log.latest_version(TABLE, known=20) == 20  # the step's own lookup from here on


def test_a_pre_check_sees_a_staged_commit_and_a_cleaned_up_version():
    server = FakeServer(5)
    node: dict = {}
    SqlLog(server, node).latest_version(TABLE)
    server.files["_staged_commits/00000000000000000005.3f2a.json"] = "{}"
    SqlLog(server, node).latest_version(TABLE, known=4)
    assert server.history_reads == 1
    server = FakeServer(5)
    SqlLog(server, node).latest_version(TABLE)
    del server.files[commit_file(4)]  # gone: nothing to count from
    SqlLog(server, node).latest_version(TABLE, known=4)
    assert server.history_reads == 1


@pytest.mark.parametrize("versions", [120, 10_000])
def test_a_pre_check_or_verification_from_vb_is_one_read_at_any_length(versions):
    server = FakeServer(versions)
    server.commit()
    since = SqlLog(server).commits_since(TABLE, versions - 1)
    assert [c.version for c in since] == [versions] and since[0].operation == "MERGE"
    assert server.reads() == 1 and server.history_reads == 0


def test_newer_commits_are_always_read_again_never_taken_from_what_was_seen():
    server = FakeServer(4)
    log = SqlLog(server)
    assert log.latest_version(TABLE) == 3
    server.commit()
    assert log.latest_version(TABLE, known=3) == 4


def test_a_table_gone_after_a_read_is_never_answered_from_what_was_read_before():
    server = FakeServer(4)
    log = SqlLog(server)
    assert log.latest_version(TABLE) == 3
    server.files.clear()  # dropped after the write
    log.commits_since(TABLE, 3)
    assert server.history_reads == 1  # DESCRIBE HISTORY says what happened


def test_a_failing_read_raises_and_is_never_taken_for_no_commit():
    server = FakeServer(4)
    log = SqlLog(server)
    assert log.latest_version(TABLE) == 3
    server.fails = "UNAVAILABLE: Connection reset by peer"
    with pytest.raises(RuntimeError, match="UNAVAILABLE"):
        log.commits_since(TABLE, 3)


def test_recent_is_newest_first_and_reads_older_windows_only_when_asked():
    server = FakeServer(50)
    recent = SqlLog(server).recent(TABLE, 32)
    assert next(recent).version == 49
    first = server.reads()
    assert [c.version for c in recent] == list(range(48, 17, -1))
    assert server.reads() > first


@pytest.mark.parametrize(
    "server",
    [
        FakeServer(5, provider="parquet"),  # not Delta: DESCRIBE HISTORY says so
        FakeServer(0),  # no log at all
        FakeServer(120, cleaned_below=100),  # no probe lands in what is left
        FakeServer(300_000),  # beyond the largest probe (2^18)
    ],
)
def test_what_it_cannot_follow_goes_to_describe_history(server):
    SqlLog(server).latest_version(TABLE)
    assert server.history_reads == 1


def test_a_column_named_like_a_line_of_the_table_s_is_never_taken_for_it():
    server = FakeServer(5)
    server.columns += [
        ("# Detailed Table Information", "string", None),
        ("Location", "string", "file:/w/other"),
    ]
    assert SqlLog(server).latest_version(TABLE) == 4
    assert server.history_reads == 0 and "SELECT path" in server.statements[1]
    assert LOG in server.statements[1]


def test_a_name_with_pattern_characters_is_described_like_any_other():
    server = FakeServer(5)
    assert SqlLog(server).latest_version("`analytics`.`ord*ers`") == 4
    assert server.history_reads == 0 and server.lookups() == 1


def test_actions_are_read_line_by_line():
    server = FakeServer(5)
    assert SqlLog(server).actions(TABLE, [3, 4, 9]) == {
        3: server.files[commit_file(3)].split("\n"),
        4: server.files[commit_file(4)].split("\n"),
    }


def test_a_catalog_managed_log_goes_to_describe_history():
    server = FakeServer(5)
    server.files["_staged_commits/00000000000000000005.3f2a.json"] = "{}"
    SqlLog(server).latest_version(TABLE)
    assert server.history_reads == 1
    server.history_reads = 0
    SqlLog(server).commits_since(TABLE, 4)  # a pre-check or verification checks it too
    assert server.history_reads == 1


class FakeFrames:
    """Spark Connect's DataFrame API as FrameReads uses it, over FakeServer's files: each call
    answered as the SQL it stands for would be."""

    def __init__(self, server: FakeServer) -> None:
        self.server, self.logged, self.calls = server, [], []

    def on_frames(self, sql, read):
        self.logged.append(sql)
        return read(self)

    @property
    def read(self):
        return self

    def format(self, source):
        self.calls.append(("format", source))
        return self

    def load(self, path):
        self.calls.append(("load", path))
        self.path = path
        return self

    def selectExpr(self, *columns):
        self.columns = columns
        self.calls.append(("selectExpr", columns))
        return self

    def select(self, *columns):
        return self

    def collect(self):
        source = dict(self.calls)["format"]
        return self.server.fetch(SqlFileReads.select(source, self.path, self.columns))

    def _explain_string(self):
        return SqlFileReads(self.server).plan(self.path)


def test_over_connect_files_are_read_through_the_dataframe_api_and_logged_as_sql():
    server = FakeServer(40)
    frames = FakeFrames(server)
    log = SqlLog(server, {}, files=FrameReads(frames))
    assert log.latest_version(TABLE) == 39
    assert log.latest_version(TABLE, known=39) == 39
    assert [c.version for c in log.commits_since(TABLE, 37)] == [38, 39]
    # What dbt.log shows is the statement the SQL path sends for the same read.
    assert frames.logged == [s for s in server.statements if not s.startswith("describe")]
    assert any(s.startswith("EXPLAIN SELECT path FROM binaryFile") for s in frames.logged)
    assert (
        "load",
        f"{LOG}{{/{commit_file(39)},/{commit_file(40)},/{commit_file(40)},"
        "/_staged_commits/*,/_staged_commits/*}",
    ) in frames.calls
    assert list(log.actions(TABLE, [39])) == [39]
    # One expression per column, as a SELECT list has them; the path as Hadoop takes it.
    selected = {c[1] for c in frames.calls if c[0] == "selectExpr"}
    assert ("_metadata.file_name", "value") in selected
    assert {columns[0] for columns in selected} == {"path", "_metadata.file_name"}
    assert all(len(columns) == 2 for columns in selected)
