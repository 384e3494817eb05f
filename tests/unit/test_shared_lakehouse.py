"""The shared-lakehouse profile keys (`warehouse`, `metastore`, `folder_wait`) and the folder's
one-process lock, without Spark: what they put in the launch conf, what they refuse and warn."""

import os
import subprocess
import sys

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import lakehouse, session
from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials

DERBY = "jdbc:derby://127.0.0.1:1527/metastore_db;create=true"


def creds(tmp_path, **keys) -> FencedSparkCredentials:
    params = keys.pop("params", {})
    return FencedSparkCredentials(
        schema="s",
        folder=str(tmp_path / "lake"),
        jars_cache=str(tmp_path / "ivy"),
        server_side_parameters=params,
        **keys,
    )


@pytest.fixture
def derbyclient(tmp_path, monkeypatch):
    """Ivy's answer for derbyclient, without Ivy: the record it leaves in the cache."""
    jar = tmp_path / "derbyclient.jar"
    jar.write_text("")
    calls = []

    def classpath(coordinate, cache):
        calls.append(coordinate)
        return [str(jar)]

    monkeypatch.setattr(lakehouse.ivy, "classpath", classpath)
    return str(jar), calls


def test_a_network_derby_metastore_replaces_the_folders(tmp_path, derbyclient):
    jar, calls = derbyclient
    conf = session.launch_conf(
        creds(tmp_path, warehouse="hdfs://nn:8020/warehouse", metastore={"url": DERBY})
    )
    assert conf["spark.sql.warehouse.dir"] == "hdfs://nn:8020/warehouse"
    assert conf["spark.hadoop.javax.jdo.option.ConnectionURL"] == DERBY
    assert conf["spark.hadoop.javax.jdo.option.ConnectionDriverName"] == (
        "org.apache.derby.jdbc.ClientDriver"
    )
    assert calls == [f"org.apache.derby:derbyclient:{lakehouse.pyspark_derby_version()}"]
    assert conf["spark.driver.extraClassPath"] == jar
    # Spark creates a Derby metastore's schema itself; these are for other databases.
    assert "spark.hadoop.datanucleus.schema.autoCreateAll" not in conf


def test_the_users_class_path_is_kept_beside_the_drivers(tmp_path, derbyclient):
    jar, _ = derbyclient
    conf = session.launch_conf(
        creds(
            tmp_path,
            metastore={"url": DERBY},
            params={"spark.driver.extraClassPath": "/opt/mine.jar"},
        )
    )
    assert conf["spark.driver.extraClassPath"] == os.pathsep.join([jar, "/opt/mine.jar"])


def test_postgres_needs_its_jar_and_creates_its_schema(tmp_path, derbyclient):
    url = "jdbc:postgresql://db:5432/hive"
    with pytest.raises(DbtRuntimeError, match=r"`metastore.jars`: give org.postgresql.Driver"):
        creds(tmp_path, metastore={"url": url})
    conf = session.launch_conf(
        creds(
            tmp_path,
            metastore={
                "url": url,
                "user": "hive",
                "password": "pw",
                "jars": ["org.postgresql:postgresql:42.7.4"],
            },
        )
    )
    assert conf["spark.hadoop.javax.jdo.option.ConnectionDriverName"] == "org.postgresql.Driver"
    assert conf["spark.hadoop.javax.jdo.option.ConnectionUserName"] == "hive"
    assert conf["spark.hadoop.javax.jdo.option.ConnectionPassword"] == "pw"
    assert conf["spark.hadoop.datanucleus.schema.autoCreateAll"] == "true"


def test_a_metastore_service_is_named_by_its_uris(tmp_path):
    conf = session.launch_conf(creds(tmp_path, metastore={"uris": "thrift://hms:9083"}))
    assert conf["spark.hadoop.hive.metastore.uris"] == "thrift://hms:9083"
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in conf


@pytest.mark.parametrize(
    "spec, words",
    [
        ("jdbc:derby://h/db", "`metastore` takes a mapping"),
        ({}, "takes one of `url`"),
        ({"url": DERBY, "uris": "thrift://h:9083"}, "takes one of `url`"),
        ({"url": DERBY, "dirver": "x"}, r"`metastore.dirver` is not known"),
        ({"url": "derby://h/db"}, r"`metastore.url` is a JDBC URL"),
        ({"url": "jdbc:derby:/tmp/db;create=true"}, "embedded Derby database"),
        ({"url": "jdbc:sqlserver://h;db=x"}, r"`metastore.driver`: name the JDBC driver"),
        ({"url": DERBY, "jars": ["/no/such.jar"]}, r"`metastore.jars`: '/no/such.jar'"),
        ({"uris": "thrift://h:9083", "user": "u"}, r"`metastore.user` belongs to"),
    ],
)
def test_bad_metastore_keys_are_named(tmp_path, spec, words):
    with pytest.raises(DbtRuntimeError, match=words):
        creds(tmp_path, metastore=spec)


@pytest.mark.parametrize("key, value", [("warehouse", "hdfs://nn/w"), ("folder_wait", 5)])
def test_session_keys_are_refused_on_a_server(key, value):
    with pytest.raises(DbtRuntimeError, match=rf"`{key}` applies to method: session only"):
        FencedSparkCredentials(method="thrift", host="h", schema="s", **{key: value})


def test_debug_shows_where_the_metastore_is_without_its_password(tmp_path):
    shared = creds(
        tmp_path,
        warehouse="hdfs://nn/w",
        metastore={"url": DERBY + ";user=app;password=secret", "jars": []},
    )
    assert shared.metastore_at == DERBY + ";user=app;password=***"
    assert "warehouse" in shared._connection_keys()
    assert creds(tmp_path).metastore_at.startswith("Derby, embedded in ")


@pytest.mark.parametrize(
    "warehouse, conf, warned",
    [
        ("/data/warehouse", {}, "on the local file system"),
        ("file:///data/warehouse", {}, "on the local file system"),
        ("s3a://bucket/warehouse", {}, "S3DynamoDBLogStore"),
        ("s3a://bucket/w", {"spark.delta.logStore.s3a.impl": "x"}, None),
        ("hdfs://nn:8020/warehouse", {}, None),
        ("abfss://c@acct.dfs.core.windows.net/w", {}, None),
    ],
)
def test_a_shared_metastore_on_a_one_jvm_log_store_is_warned(monkeypatch, warehouse, conf, warned):
    said = []
    monkeypatch.setattr(lakehouse.logger, "warning", said.append)
    lakehouse.check_warehouse(warehouse, shared=True, spark_conf=conf)
    if warned is None:
        assert said == []
    else:
        assert len(said) == 1 and warned in said[0] and "docs/cluster.md" in said[0]


HOLDER = """
import sys, time
from dbt.adapters.fenced_spark import lakehouse
lakehouse.hold_folder(sys.argv[1], 0)
print("held", flush=True)
time.sleep(60)
"""


@pytest.fixture
def held_folder(tmp_path):
    folder = str(tmp_path / "lake")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, folder, "dbt", "run"], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    yield folder, holder
    holder.kill()
    holder.wait()


def test_a_second_process_is_told_at_once_who_holds_the_folder(held_folder, monkeypatch):
    folder, holder = held_folder
    monkeypatch.setattr(lakehouse, "_folder_lock", None)
    with pytest.raises(DbtRuntimeError) as raised:
        lakehouse.hold_folder(folder, 0)
    message = str(raised.value)
    assert f"The embedded lakehouse in {folder} is in use by pid {holder.pid}:" in message
    assert "dbt run" in message
    assert "`folder_wait: <seconds>`" in message and "`metastore:`" in message


def test_folder_wait_waits_for_the_holder_to_end(held_folder, monkeypatch):
    folder, holder = held_folder
    monkeypatch.setattr(lakehouse, "_folder_lock", None)
    said = []
    monkeypatch.setattr(lakehouse.logger, "warning", said.append)
    ender = subprocess.Popen(["sh", "-c", f"sleep 2; kill {holder.pid}"])
    lakehouse.hold_folder(folder, 60)
    ender.wait()
    assert holder.wait() != 0  # it ended by the signal, and only then did this process proceed
    assert len(said) == 1 and f"pid {holder.pid}" in said[0] and "up to 60 s" in said[0]
    with open(os.path.join(folder, "session.lock")) as lock:
        assert lock.read().startswith(f"pid {os.getpid()}:")
    lakehouse._folder_lock.close()


def test_folder_wait_gives_up_with_the_same_message_once(held_folder, monkeypatch):
    folder, holder = held_folder
    monkeypatch.setattr(lakehouse, "_folder_lock", None)
    monkeypatch.setattr(lakehouse, "_waited_out", None)
    said = []
    monkeypatch.setattr(lakehouse.logger, "warning", said.append)
    with pytest.raises(DbtRuntimeError, match=rf"in use by pid {holder.pid}.* after waiting 2 s"):
        lakehouse.hold_folder(folder, 2)
    # The early start (while dbt parses) waited; the connection's start does not wait again.
    with pytest.raises(DbtRuntimeError, match="after waiting 2 s"):
        lakehouse.hold_folder(folder, 2)
    assert len(said) == 1
