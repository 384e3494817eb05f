"""The fence's log readers against DESCRIBE HISTORY, on real Delta tables: same commits, same
fields, across checkpoints. The session's (LogTail) reads without a Spark job; the SQL one
(SqlLog, what Thrift and Connect use) through statements any server runs, here on a session."""

import os
import uuid

import pytest

from dbt.adapters.fenced_spark.fence.delta.history import SqlHistory
from dbt.adapters.fenced_spark.fence.delta.log_tail import LogTail
from dbt.adapters.fenced_spark.fence.delta.sql_log import SqlLog
from dbt.adapters.fenced_spark.fence.delta.words import USER_METADATA
from dbt.adapters.fenced_spark.fence.history import FenceTag
from dbt.adapters.fenced_spark.fence.protocol import set_conf_sql
from tests.harness.runner import SessionRunner

pytestmark = pytest.mark.skip_profile(
    "thrift", reason="the log reader runs in the embedded session's JVM; a Thrift client has none"
)

SCHEMA = "delta_log_reader"


class NoFallback:
    def history(self, table, limit):
        raise AssertionError(f"the reader fell back to DESCRIBE HISTORY {table}")

    def fetch(self, sql):
        raise AssertionError(f"the reader fell back to: {sql}")

    location = fetch


def readers(spark, kind="log_tail", fallback=False):
    """DESCRIBE HISTORY, and the reader under test, which must answer by itself unless
    `fallback` is allowed."""
    session = spark.newSession()
    sql = SqlHistory(SessionRunner(session))
    own = sql if fallback else SqlHistory(NoFallback())
    if kind == "sql_log":
        log = SqlLog(SessionRunner(session))
        log.fallback = own
        return sql, log
    return sql, LogTail(session, fallback=own)


KINDS = pytest.mark.parametrize("kind", ["log_tail", "sql_log"])


def essentials(commits):
    return [
        (c.version, c.operation, c.read_version, c.user_metadata, c.engine_info, c.metrics)
        for c in commits
    ]


@pytest.fixture(scope="module")
def table(spark):
    """25 commits of every kind the fence meets, so Delta checkpoints at 10 and 20."""
    name = f"{SCHEMA}.orders"
    writer = spark.newSession()
    writer.sql(f"create schema if not exists {SCHEMA}")
    writer.sql(f"drop table if exists {name}")
    writer.sql(f"create table {name} (id bigint, status string) using delta")
    writer.sql(f"insert into {name} values (1, 'open'), (2, 'open')")
    writer.sql(f"update {name} set status = 'shipped' where id = 1")
    writer.sql(set_conf_sql(USER_METADATA, FenceTag("inv", "model.p.o", "merge", 2).to_json()))
    writer.sql(
        f"merge into {name} t using (select 2 as id, 'cancelled' as status) s on s.id = t.id "
        "when matched then update set * when not matched then insert *"
    )
    writer.sql(f"RESET {USER_METADATA}")
    writer.sql(set_conf_sql(USER_METADATA, "nightly job; not ours"))
    writer.sql(f"delete from {name} where id = 2")
    writer.sql(f"RESET {USER_METADATA}")
    writer.sql(f"optimize {name}")
    writer.sql(f"alter table {name} add columns (note string)")
    for i in range(3, 21):
        writer.sql(f"insert into {name} values ({i}, 'open', 'n{i}')")
    return name


@KINDS
def test_same_commits_as_describe_history(spark, table, kind):
    sql, log = readers(spark, kind)
    latest = sql.latest_version(table)
    assert latest > 20  # past Delta's checkpoints at 10 and 20
    for since in (-1, 0, 3, 9, 10, 19, 20, latest - 1, latest):
        assert essentials(log.commits_since(table, since)) == essentials(
            sql.commits_since(table, since)
        ), since
    operations = {c.operation for c in log.commits_since(table, -1)}
    assert {"CREATE TABLE", "WRITE", "UPDATE", "MERGE", "DELETE", "ADD COLUMNS"} <= operations


@KINDS
def test_latest_version_from_any_starting_point(spark, table, kind):
    sql, log = readers(spark, kind)
    latest = sql.latest_version(table)
    for known in (None, 0, 5, 10, latest - 1, latest):
        assert log.latest_version(table, known) == latest
    spark.newSession().sql(f"insert into {table} values (99, 'late', 'x')")
    assert log.latest_version(table, known=latest) == latest + 1
    [late] = log.commits_since(table, latest)
    assert (late.version, late.operation, late.read_version) == (latest + 1, "WRITE", latest)


def jobs(spark, group, read):
    """How many Spark jobs `read` ran (in this thread)."""
    spark.sparkContext.setJobGroup(group, group)
    try:
        read()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_runs_no_spark_job(spark, table):
    sql, log = readers(spark)
    # The control proves the count sees the jobs of this thread's reads.
    assert jobs(spark, "fence-sql-history", lambda: sql.commits_since(table, 10)) >= 1
    assert (
        jobs(
            spark,
            "fence-log-tail",
            lambda: (log.latest_version(table), log.commits_since(table, 10)),
        )
        == 0
    )


def test_sql_log_counts_commit_files_from_spark_s_plan_without_a_job(spark, table):
    """A pre-check on a table nothing touched is one EXPLAIN: Spark's plan counts the commit
    files that exist, reading none. A commit after it is seen."""
    runner = SessionRunner(spark.newSession())
    latest = SqlHistory(runner).latest_version(table)
    node: dict = {}
    capture = SqlLog(runner, node)
    capture.fallback = SqlHistory(NoFallback())
    assert capture.latest_version(table) == latest
    log_dir = node[table]
    assert log_dir is not None and log_dir.endswith("/_delta_log")
    assert capture.commit_files.count(log_dir, [0, 5, latest, latest + 1, latest + 7]) == 3

    precheck = SqlLog(runner, node)
    precheck.fallback = SqlHistory(NoFallback())
    statements = []
    fetch = runner.fetch
    runner.fetch = lambda sql: statements.append(sql) or fetch(sql)  # type: ignore[method-assign]
    assert jobs(spark, "fence-sql-precheck", lambda: precheck.latest_version(table, latest)) == 0
    assert len(statements) == 1 and statements[0].startswith("EXPLAIN SELECT path")

    spark.newSession().sql(f"insert into {table} values (100, 'late', 'x')")
    assert SqlLog(runner, node).latest_version(table, latest) == latest + 1


@KINDS
def test_what_it_cannot_read_goes_to_describe_history(spark, kind):
    writer = spark.newSession()
    writer.sql(f"create schema if not exists {SCHEMA}")
    writer.sql(f"drop table if exists {SCHEMA}.plain")
    writer.sql(f"create table {SCHEMA}.plain (id int) using parquet")
    writer.sql(f"create or replace view {SCHEMA}.v as select 1 as id")
    sql, log = readers(spark, kind, fallback=True)
    for name in (f"{SCHEMA}.plain", f"{SCHEMA}.v", f"{SCHEMA}.missing"):
        with pytest.raises(Exception) as direct:
            sql.latest_version(name)
        with pytest.raises(Exception) as through_log:
            log.latest_version(name)
        assert type(through_log.value) is type(direct.value)
        # The same error; only Spark's expression ids in the plan text below it differ.
        first_line = str(direct.value).splitlines()[0]
        assert str(through_log.value).splitlines()[0] == first_line


@KINDS
def test_recent_is_describe_history_newest_first(spark, table, kind):
    sql, log = readers(spark, kind)
    assert essentials(list(log.recent(table, 32))) == essentials(list(sql.recent(table, 32)))


def test_sql_log_reads_the_actions_of_the_commits_asked_for(spark, table):
    sql, log = readers(spark, "sql_log")
    latest = sql.latest_version(table)
    actions = log.actions(table, [latest - 1, latest, latest + 5])
    assert set(actions) == {latest - 1, latest}  # a version not yet written is not there
    assert actions == sql.actions(table, [latest - 1, latest])


def test_sql_log_reads_a_location_with_glob_characters_as_it_is(spark, lakehouse):
    """The location is part of the pattern the server expands: `{a,b}`, `[x]` and `*` in it
    must name this table's log, not match another's."""
    writer = spark.newSession()
    writer.sql(f"create schema if not exists {SCHEMA}")
    base = f"{lakehouse}/globs {uuid.uuid4().hex}"  # external tables: their files stay
    parent = f"{base}/glob {{a,b}} [x] *?"
    for name in ("star", "decoy"):
        writer.sql(f"drop table if exists {SCHEMA}.{name}")
    # A decoy table the pattern would match if the location were read as a glob.
    writer.sql(f"create table {SCHEMA}.decoy (id int) using delta location '{base}/glob a x zz'")
    for i in range(6):
        writer.sql(f"insert into {SCHEMA}.decoy values ({i})")  # the decoy's log reaches v6
    writer.sql(f"create table {SCHEMA}.star (id int) using delta location '{parent}'")
    for i in range(3):
        writer.sql(f"insert into {SCHEMA}.star values ({i})")
    sql, log = readers(spark, "sql_log")
    table = f"{SCHEMA}.star"
    assert log.latest_version(table) == sql.latest_version(table) == 3
    assert essentials(log.commits_since(table, 0)) == essentials(sql.commits_since(table, 0))


def test_sql_log_leaves_a_log_with_staged_commits_to_describe_history(spark, lakehouse):
    """Catalog-managed commits wait in _delta_log/_staged_commits before they become N.json:
    reading N.json alone would miss them."""
    writer = spark.newSession()
    writer.sql(f"create schema if not exists {SCHEMA}")
    writer.sql(f"drop table if exists {SCHEMA}.staged")
    location = f"{lakehouse}/staged {uuid.uuid4().hex}"
    writer.sql(f"create table {SCHEMA}.staged (id int) using delta location '{location}'")
    writer.sql(f"insert into {SCHEMA}.staged values (1)")
    staged = os.path.join(location, "_delta_log", "_staged_commits")
    os.makedirs(staged, exist_ok=True)
    with open(os.path.join(staged, f"{2:020d}.{uuid.uuid4()}.json"), "w") as f:
        f.write('{"commitInfo":{"operation":"WRITE"}}\n')
    asked = []

    class Recorded(SqlHistory):
        def latest_version(self, table, known=None):
            asked.append(table)
            return super().latest_version(table, known)

    sql, log = readers(spark, "sql_log", fallback=True)
    log.fallback = Recorded(log.source)
    assert log.latest_version(f"{SCHEMA}.staged") == 1
    assert asked == [f"{SCHEMA}.staged"]
