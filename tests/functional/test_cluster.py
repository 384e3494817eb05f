"""The fence on a Spark standalone cluster: the server (Thrift or Connect) is the driver that
commits to the Delta log; the data files are written by executors in other JVMs.

Run with `--profile connect --cluster` or `--profile thrift --cluster` (`make cluster` runs both;
`make test` runs the Connect one). Without --cluster these tests are skipped: the server would
run its tasks in its own JVM.
"""

import pytest

from tests.functional import test_merge_races as races

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skip_profile("session", reason="a cluster runs a server's executors"),
]


class TestExecutorsAreOtherJvms:
    def test_tasks_run_in_processes_other_than_the_driver(self, spark, spark_server, spark_cluster):
        pids = {
            int(r[0])
            for r in spark.sql(
                "select distinct reflect('java.lang.ProcessHandle', 'current') "
                "from range(0, 64, 1, 8)"
            ).collect()
        }
        driver = spark_server.process.pid  # spark-submit execs the driver's JVM
        assert pids and driver not in pids and not pids & spark_cluster.pids()
        executors = [e for e in spark_server.executors() if e["id"] != "driver"]
        assert executors and all(e["hostPort"].startswith("127.0.0.1:") for e in executors)
        (app,) = [a for a in spark_cluster.state()["activeapps"] if a["id"]]
        assert app["name"] == f"dbt-fenced-spark-{spark_server.kind}"


class TestMergeRaceOnTheCluster(races.MergeRaceBase):
    """test_merge_races.py's fenced races at "between" and "during", on the cluster's executors
    (`make cluster` runs that whole file, and the other race files, with --cluster)."""

    test_race_b = races.TestFencedMerge.test_race_b_foreign_commit_after_vb_fails_the_run
    test_race_c = races.TestFencedMerge.test_race_c_foreign_commit_during_merge_is_refused
