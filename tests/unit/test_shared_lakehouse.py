"""The shared-lakehouse profile keys (`warehouse`, `metastore`, `folder_wait`) and the folder's
one-process lock, without Spark: what they put in the launch conf, what they refuse and warn."""

import getpass
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
        ({"url": DERBY, "password": 123}, r"`metastore.password` takes text, not int: quote it"),
        ({"uris": ["thrift://a:9083", "b:9083"]}, r"`metastore.uris` lists thrift://.*'b:9083'"),
        ({}, "takes one of `url`"),
        ({"url": DERBY, "uris": "thrift://h:9083"}, "takes one of `url`"),
        ({"url": DERBY, "dirver": "x"}, r"`metastore.dirver` is not known"),
        ({"url": "derby://h/db"}, r"`metastore.url` is a JDBC URL"),
        ({"url": "jdbc:derby:/tmp/db;create=true"}, "embedded Derby database"),
        ({"url": "jdbc:sqlserver://h;db=x"}, r"`metastore.driver`: name the JDBC driver"),
        ({"url": "jdbc:postgresql://db/hive"}, r"`metastore.jars`: give the jdbc:postgresql"),
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
    shown = dict(shared.connection_info())
    assert shown["metastore_at"] == DERBY + ";user=app;password=***"
    assert shown["warehouse"] == "hdfs://nn/w"
    assert "secret" not in repr(shown)
    assert dict(creds(tmp_path).connection_info())["folder"] == str(tmp_path / "lake")


def test_connects_url_is_shown_without_its_token():
    connect = FencedSparkCredentials.from_dict(
        {"method": "connect", "host": "sc://h:15002/;token=tok", "schema": "s"}
    )
    assert dict(connect.connection_info())["url"] == "sc://h:15002/;token=***"


@pytest.mark.parametrize(
    "url, shown",
    [
        ("jdbc:mysql://root:s3cret@h/hive", "jdbc:mysql://root:***@h/hive"),
        (
            "jdbc:derby://h:1527/db;user=a;password=pw;create=true",
            "jdbc:derby://h:1527/db;user=a;password=***;create=true",
        ),
        ("jdbc:postgresql://h/db?user=a&password=pw", "jdbc:postgresql://h/db?user=a&password=***"),
    ],
)
def test_passwords_in_urls_are_masked(url, shown):
    assert lakehouse.mask(url) == shown


def test_the_metastores_connection_stays_off_the_jvms_command_line(tmp_path, derbyclient):
    conf = session.launch_conf(
        creds(tmp_path, metastore={"url": DERBY, "user": "u", "password": "pw"})
    )
    shown = session.on_command_line(conf)
    assert not [key for key in shown if "javax.jdo" in key]
    assert "pw" not in " ".join(shown.values())
    assert shown["spark.driver.extraClassPath"] == conf["spark.driver.extraClassPath"]


def test_a_warehouse_path_resolves_as_the_folder_does(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert creds(tmp_path, warehouse="~/wh").warehouse == str(tmp_path / "wh")
    assert creds(tmp_path, warehouse="rel/wh").warehouse == str(tmp_path / "rel" / "wh")
    assert creds(tmp_path, warehouse="hdfs://nn/w").warehouse == "hdfs://nn/w"


@pytest.mark.parametrize(
    "key, value, conf",
    [
        ("warehouse", "hdfs://nn/w", "spark.sql.warehouse.dir"),
        ("metastore", {"uris": "thrift://h:9083"}, "spark.hadoop.hive.metastore.uris"),
        ("metastore", {"url": DERBY}, "spark.hadoop.javax.jdo.option.ConnectionURL"),
    ],
)
def test_a_setting_given_both_ways_is_refused(tmp_path, key, value, conf):
    with pytest.raises(DbtRuntimeError, match=rf"`{key}` and server_side_parameters' {conf}"):
        creds(tmp_path, params={conf: "x"}, **{key: value})


@pytest.mark.parametrize(
    "params, embedded",
    [
        ({}, True),
        ({"spark.hadoop.hive.metastore.uris": "thrift://h:9083"}, False),
        ({"spark.hadoop.javax.jdo.option.ConnectionURL": DERBY}, False),
        ({"spark.sql.catalogImplementation": "in-memory"}, False),
    ],
)
def test_only_the_folders_own_derby_takes_the_folder(tmp_path, params, embedded):
    """Users who shared a metastore through server_side_parameters before `metastore:` existed
    are not held to one process per folder."""
    shared = creds(tmp_path, params=params)
    assert lakehouse.is_embedded(session.launch_conf(shared), shared.folder) is embedded


DYNAMO = "io.delta.storage.S3DynamoDBLogStore"
SINGLE = "io.delta.storage.S3SingleDriverLogStore"


@pytest.mark.parametrize(
    "warehouse, conf, warned",
    [
        ("/data/warehouse", {}, "on the local file system"),
        ("file:///data/warehouse", {}, "on the local file system"),
        ("s3a://bucket/warehouse", {}, "S3DynamoDBLogStore"),
        ("s3a://bucket/w", {"spark.delta.logStore.s3a.impl": DYNAMO}, None),
        ("s3a://bucket/w", {"spark.delta.logStore.s3a.impl": SINGLE}, "S3DynamoDBLogStore"),
        ("s3a://bucket/w", {"spark.delta.logStore.gs.impl": DYNAMO}, "S3DynamoDBLogStore"),
        ("oss://bucket/w", {}, "not known to admit one commit N"),
        ("hdfs://nn:8020/warehouse", {}, None),
        ("abfss://c@acct.dfs.core.windows.net/w", {}, None),
        ("gs://bucket/w", {}, None),
    ],
)
def test_a_shared_metastore_on_a_one_jvm_log_store_is_warned(monkeypatch, warehouse, conf, warned):
    said = []
    monkeypatch.setattr(lakehouse.logger, "warning", said.append)
    lakehouse.check_warehouse(warehouse, conf)
    if warned is None:
        assert said == []
    else:
        assert len(said) == 1 and warned in said[0] and lakehouse.CLUSTER_DOC in said[0]


HOLDER = """
import sys, time
from dbt.adapters.fenced_spark import lakehouse
lakehouse.hold_folder(sys.argv[1], 0)
print("held", flush=True)
time.sleep(60)
"""


def test_the_holder_is_named_by_its_command_not_its_arguments(monkeypatch, tmp_path):
    # --vars may hold secrets and newlines; bytes that are not UTF-8 must not stop the start.
    argv = ["/venv/bin/dbt", "run", "--vars", "{pw: hunter2,\n x: 1}", "--project-dir=caf\udce9"]
    monkeypatch.setattr(lakehouse.sys, "argv", argv)
    monkeypatch.setattr(lakehouse, "_folder_lock", None)
    lakehouse.hold_folder(str(tmp_path), 0)
    text = (tmp_path / "session.lock").read_text()
    lakehouse._folder_lock.close()
    assert text.startswith(f"pid {os.getpid()} on ") and "): dbt run (since " in text
    assert "hunter2" not in text and text.count("\n") == 1


def test_a_file_system_without_locks_starts_without_one(monkeypatch, tmp_path):
    def no_locks(*args):
        raise OSError(37, "No locks available")

    monkeypatch.setattr(lakehouse.fcntl, "flock", no_locks)
    monkeypatch.setattr(lakehouse, "_folder_lock", None)
    lakehouse.hold_folder(str(tmp_path), 0)
    assert lakehouse._folder_lock is None


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
    assert f"The embedded lakehouse in {folder} is in use by pid {holder.pid} on " in message
    assert f"(user {getpass.getuser()}): " in message and " (since " in message
    assert "`folder_wait: <seconds>`" in message and "`metastore:`" in message
    assert "docs/cluster.md in the dbt-fenced-spark repository" in message  # not a path of ours


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
        assert lock.read().startswith(f"pid {os.getpid()} on ")
    lakehouse._folder_lock.close()


def test_folder_wait_gives_up_with_the_same_message(held_folder, monkeypatch):
    folder, holder = held_folder
    monkeypatch.setattr(lakehouse, "_folder_lock", None)
    monkeypatch.setattr(lakehouse.logger, "warning", lambda message: None)
    with pytest.raises(DbtRuntimeError, match=rf"in use by pid {holder.pid} .* after waiting 2 s"):
        lakehouse.hold_folder(folder, 2)


def test_the_early_start_does_not_wait_the_connections_start_does(tmp_path, monkeypatch):
    waits = []

    def start(creds, wait_seconds):
        waits.append(wait_seconds)
        raise DbtRuntimeError("held")

    monkeypatch.setattr(session, "_start", start)
    monkeypatch.setattr(session, "_root", None)
    shared = creds(tmp_path, folder_wait=30)
    for early in (True, False):
        with pytest.raises(DbtRuntimeError, match="held"):
            session.root_session(shared, early=early)
    assert waits == [0, 30]
