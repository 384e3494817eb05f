"""The embedded session's launch conf: sized for the machine, the user's keys win, and a
Delta package resolved once is not resolved again (no Spark)."""

import os
import threading

from dbt.adapters.fenced_spark import session
from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials


def creds(tmp_path, **params) -> FencedSparkCredentials:
    return FencedSparkCredentials(
        schema="s",
        folder=str(tmp_path / "lake"),
        jars_cache=str(tmp_path / "ivy"),
        server_side_parameters=params,
    )


def test_local_cores_reads_the_master():
    assert session.local_cores("local[3]") == 3
    assert session.local_cores("local[4,2]") == 4
    assert session.local_cores("local[*]") == len(os.sched_getaffinity(0))
    assert session.local_cores("local") == len(os.sched_getaffinity(0))
    assert session.local_cores("spark://host:7077") is None


def test_two_cores_get_small_partitions(tmp_path):
    conf = session.launch_conf(creds(tmp_path, **{"spark.master": "local[2]"}))
    assert conf["spark.sql.shuffle.partitions"] == "2"
    assert conf["spark.databricks.delta.snapshotPartitions"] == "1"
    assert conf["spark.sql.sources.parallelPartitionDiscovery.parallelism"] == "2"


def test_sixteen_cores_get_more(tmp_path):
    conf = session.launch_conf(creds(tmp_path, **{"spark.master": "local[16]"}))
    assert conf["spark.sql.shuffle.partitions"] == "16"
    assert conf["spark.databricks.delta.snapshotPartitions"] == "8"


def test_the_users_keys_win(tmp_path):
    conf = session.launch_conf(
        creds(tmp_path, **{"spark.master": "local[2]", "spark.sql.shuffle.partitions": "64"})
    )
    assert conf["spark.sql.shuffle.partitions"] == "64"
    assert conf["spark.databricks.delta.snapshotPartitions"] == "1"


def test_a_cluster_master_keeps_sparks_defaults(tmp_path):
    conf = session.launch_conf(creds(tmp_path, **{"spark.master": "spark://h:7077"}))
    assert "spark.sql.shuffle.partitions" not in conf
    assert "spark.databricks.delta.snapshotPartitions" not in conf


def resolve_once(tmp_path, c) -> list[str]:
    jars_dir = tmp_path / "ivy" / "jars"
    jars_dir.mkdir(parents=True)
    names = (session._package_jar(c.delta_package), "io.delta_delta-storage-4.4.0.jar")
    jars = [str(jars_dir / name) for name in names]
    for jar in jars:
        open(jar, "w").close()
    spark_jars = ",".join(f"file://{jar}" for jar in jars) + ",file:///elsewhere/user.jar"
    session._record_resolved(c, spark_jars)
    return jars


def test_first_start_resolves_the_package(tmp_path):
    c = creds(tmp_path)
    conf = session.launch_conf(c)
    assert conf["spark.jars.packages"] == c.delta_package
    assert "spark.jars" not in conf


def test_a_recorded_resolution_skips_ivy(tmp_path):
    c = creds(tmp_path)
    jars = resolve_once(tmp_path, c)
    conf = session.launch_conf(c)
    assert "spark.jars.packages" not in conf
    # Only the Ivy cache's jars were recorded; the user's own jar is not carried over.
    assert conf["spark.jars"] == ",".join(jars)


def test_a_missing_jar_resolves_again(tmp_path):
    c = creds(tmp_path)
    jars = resolve_once(tmp_path, c)
    os.remove(jars[1])
    conf = session.launch_conf(c)
    assert conf["spark.jars.packages"] == c.delta_package
    assert "spark.jars" not in conf


def test_another_package_resolves_again(tmp_path):
    resolve_once(tmp_path, creds(tmp_path))
    other = creds(tmp_path)
    other.delta_package = "io.delta:delta-spark_4.1_2.13:4.3.0"
    assert session.launch_conf(other)["spark.jars.packages"] == other.delta_package


def test_a_cut_record_resolves_again(tmp_path):
    c = creds(tmp_path)
    jars = resolve_once(tmp_path, c)
    record = session._resolved_record(c)
    with open(record) as f:
        lines = f.readlines()
    with open(record, "w") as f:
        f.writelines(lines[:2])  # the header and one jar of two
    assert session.launch_conf(c)["spark.jars.packages"] == c.delta_package
    # A record without the package's own jar is not it either.
    with open(record, "w") as f:
        f.write(f"# {c.delta_package} 1\n{jars[1]}\n")
    assert session.launch_conf(c)["spark.jars.packages"] == c.delta_package


def test_a_record_that_cannot_be_written_is_no_error(tmp_path):
    c = creds(tmp_path)
    (tmp_path / "ivy").mkdir()
    (tmp_path / "ivy" / "resolved").write_text("a file where the folder would be")
    session._record_resolved(c, f"file://{tmp_path}/ivy/jars/x.jar")
    assert session.resolved_jars(c) == []


def test_the_users_resolution_keys_turn_the_record_off(tmp_path):
    resolve_once(tmp_path, creds(tmp_path))
    for key in ("spark.jars.excludes", "spark.jars.repositories", "spark.jars.ivy"):
        c = creds(tmp_path, **{key: "x"})
        assert session.launch_conf(c)["spark.jars.packages"] == c.delta_package, key


def test_the_users_packages_are_resolved_and_their_jars_kept(tmp_path):
    c = creds(
        tmp_path,
        **{
            "spark.jars.packages": "io.delta:delta-spark_4.1_2.13:4.4.0,org.x:y:1",
            "spark.jars": "/u.jar",
        },
    )
    resolve_once(tmp_path, c)
    conf = session.launch_conf(c)
    assert conf["spark.jars.packages"] == "io.delta:delta-spark_4.1_2.13:4.4.0,org.x:y:1"
    assert conf["spark.jars"] == "/u.jar"


def test_the_users_jars_come_first(tmp_path):
    c = creds(tmp_path, **{"spark.jars": "/u.jar"})
    jars = resolve_once(tmp_path, c)
    assert session.launch_conf(c)["spark.jars"] == ",".join(["/u.jar", *jars])


def test_the_jvm_starts_early_only_for_commands_that_run_sql(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(session, "root_session", lambda c, early=False: started.append(c))
    # In the whole suite the functional tests' JVM is already up: a started JVM is not started
    # again, so this test pretends none is.
    monkeypatch.setattr(session, "_root", object())
    session.start_early(creds(tmp_path), "build")
    assert started == []
    monkeypatch.setattr(session, "_root", None)
    c = creds(tmp_path)
    for command in ("parse", "ls", "deps", None):
        session.start_early(c, command)
    assert started == []
    session.start_early(c, "build")
    for thread in threading.enumerate():
        if thread.name == "fenced-spark-start":
            thread.join(5)
    assert started == [c]
