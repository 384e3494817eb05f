"""The session's Delta log reader against DESCRIBE HISTORY, on real Delta tables: same
commits, same fields, across checkpoints, and without a Spark job."""

import pytest

from dbt.adapters.fenced_spark.fence.delta_log import LogTail
from dbt.adapters.fenced_spark.fence.history import FenceTag, SqlHistory
from dbt.adapters.fenced_spark.fence.protocol import USER_METADATA, set_conf_sql
from tests.harness.runner import SessionRunner

pytestmark = pytest.mark.skip_profile(
    "thrift", reason="the log reader runs in the embedded session's JVM; a Thrift client has none"
)

SCHEMA = "delta_log_reader"


def readers(spark):
    session = spark.newSession()
    sql = SqlHistory(SessionRunner(session))
    return sql, LogTail(session, fallback=sql)


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


def test_same_commits_as_describe_history(spark, table):
    sql, log = readers(spark)
    latest = sql.latest_version(table)
    assert latest > 20  # past Delta's checkpoints at 10 and 20
    for since in (-1, 0, 3, 9, 10, 19, 20, 23, 24):
        assert essentials(log.commits_since(table, since)) == essentials(
            sql.commits_since(table, since)
        ), since
    operations = {c.operation for c in log.commits_since(table, -1)}
    assert {"CREATE TABLE", "WRITE", "UPDATE", "MERGE", "DELETE", "ADD COLUMNS"} <= operations


def test_latest_version_from_any_starting_point(spark, table):
    sql, log = readers(spark)
    latest = sql.latest_version(table)
    for known in (None, 0, 5, 10, latest - 1, latest):
        assert log.latest_version(table, known) == latest
    spark.newSession().sql(f"insert into {table} values (99, 'late', 'x')")
    assert log.latest_version(table, known=latest) == latest + 1
    [late] = log.commits_since(table, latest)
    assert (late.version, late.operation, late.read_version) == (latest + 1, "WRITE", latest)


def test_runs_no_spark_job(spark, table):
    sql, log = readers(spark)
    tracker = spark.sparkContext.statusTracker()

    def jobs(group, read):
        spark.sparkContext.setJobGroup(group, group)
        try:
            read()
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        return len(tracker.getJobIdsForGroup(group))

    # The control proves the count sees the jobs of this thread's reads.
    assert jobs("fence-sql-history", lambda: sql.commits_since(table, 10)) >= 1
    assert (
        jobs("fence-log-tail", lambda: (log.latest_version(table), log.commits_since(table, 10)))
        == 0
    )


def test_what_it_cannot_read_goes_to_describe_history(spark):
    writer = spark.newSession()
    writer.sql(f"create schema if not exists {SCHEMA}")
    writer.sql(f"drop table if exists {SCHEMA}.plain")
    writer.sql(f"create table {SCHEMA}.plain (id int) using parquet")
    writer.sql(f"create or replace view {SCHEMA}.v as select 1 as id")
    sql, log = readers(spark)
    for name in (f"{SCHEMA}.plain", f"{SCHEMA}.v", f"{SCHEMA}.missing"):
        with pytest.raises(Exception) as direct:
            sql.latest_version(name)
        with pytest.raises(Exception) as through_log:
            log.latest_version(name)
        assert type(through_log.value) is type(direct.value)
        # The same error; only Spark's expression ids in the plan text below it differ.
        first_line = str(direct.value).splitlines()[0]
        assert str(through_log.value).splitlines()[0] == first_line
