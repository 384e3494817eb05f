"""A real Spark Thrift Server with Delta, started from the pyspark installation.

The server gets the same Spark + Delta configuration as the embedded session (one
`launch_conf`), its own metastore and warehouse under `folder`, and a free loopback port.
"""

import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections import namedtuple
from dataclasses import dataclass
from typing import Any

from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials
from dbt.adapters.fenced_spark.session import launch_conf

SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SqlResult:
    def __init__(self, columns: list[str], rows: list[Any]) -> None:
        self.columns = columns
        self._rows = rows

    def collect(self) -> list[Any]:
        return self._rows


class ThriftClient:
    """A plain SQL client of the server, shaped like the SparkSession the tests read with:
    `sql(...).collect()` gives rows with attribute access, `newSession()` another client."""

    def __init__(self, server: "ThriftServer") -> None:
        self.server = server
        self._connection = server.connect()

    def sql(self, statement: str) -> SqlResult:
        cursor = self._connection.cursor()
        try:
            cursor.execute(statement)
            if cursor.description is None:
                return SqlResult([], [])
            names = [column[0] for column in cursor.description]
            row = namedtuple("Row", names, rename=True)  # type: ignore[misc]
            return SqlResult(names, [row(*values) for values in cursor.fetchall()])
        finally:
            cursor.close()

    def newSession(self) -> "ThriftClient":  # noqa: N802 - SparkSession's name
        return ThriftClient(self.server)

    def active_job_ids(self) -> set[int]:
        return self.server.active_job_ids()


@dataclass
class ThriftServer:
    folder: str
    port: int
    ui_port: int
    process: subprocess.Popen
    log_path: str

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def connect(self):
        """A plain SQL client of the server (PyHive), like a notebook next to the pipeline."""
        from pyhive import hive

        return hive.connect(host=self.host, port=self.port, username="foreign")

    def client(self) -> ThriftClient:
        return ThriftClient(self)

    def active_job_ids(self) -> set[int]:
        """Running Spark jobs, from the server's REST API (what a status tracker would say)."""
        base = f"http://127.0.0.1:{self.ui_port}/api/v1/applications"
        with urllib.request.urlopen(base, timeout=10) as response:
            app = json.load(response)[0]["id"]
        with urllib.request.urlopen(f"{base}/{app}/jobs?status=running", timeout=10) as response:
            return {job["jobId"] for job in json.load(response)}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(
    folder: str,
    jars_cache: str | None,
    cores: int = 6,
    timeout: float = 300,
    extra_conf: dict[str, str] | None = None,
) -> ThriftServer:
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    os.makedirs(os.path.join(folder, "logs"), exist_ok=True)
    port, ui_port = _free_port(), _free_port()
    creds = FencedSparkCredentials(schema="default", folder=folder, jars_cache=jars_cache)
    conf = launch_conf(creds)
    # Spare task slots, not cores: a race parks our write in Thread.sleep while the foreign
    # client's job must still run.
    conf["spark.master"] = f"local[{cores}]"
    conf["spark.app.name"] = "dbt-fenced-spark-thrift"
    # The UI's REST API tells race tests which jobs run (there is no status tracker to ask).
    conf["spark.ui.enabled"] = "true"
    conf["spark.ui.port"] = str(ui_port)
    conf.update(extra_conf or {})
    submit = os.path.join(spark_home, "bin", "spark-submit")
    env = dict(os.environ, SPARK_HOME=spark_home, SPARK_LOCAL_IP="127.0.0.1")
    log_path = os.path.join(folder, "logs", "thrift-server.log")
    # The server's session class loader does not see `--packages` jars (Delta's analyzer
    # rules then fail with NoClassDefFoundError); Delta's own jars go on the driver classpath.
    delta_jars = _delta_jars(submit, conf, env, log_path)
    command = [submit, "--class", SERVER_CLASS, "--driver-class-path", ":".join(delta_jars)]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += [
        "spark-internal",
        "--hiveconf",
        f"hive.server2.thrift.port={port}",
        "--hiveconf",
        "hive.server2.thrift.bind.host=127.0.0.1",
    ]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder
        )
    server = ThriftServer(folder, port, ui_port, process, log_path)
    _wait_until_serving(server, timeout)
    return server


def _delta_jars(submit: str, conf: dict[str, str], env: dict[str, str], log_path: str) -> list[str]:
    """Delta's jars in the Ivy cache, resolving them first (a no-op app) on a fresh cache."""
    jars_dir = os.path.join(conf["spark.jars.ivy"], "jars")

    def found() -> list[str]:
        if not os.path.isdir(jars_dir):
            return []
        return sorted(
            os.path.join(jars_dir, name)
            for name in os.listdir(jars_dir)
            if name.startswith("io.delta_delta-spark") or name.startswith("io.delta_delta-storage")
        )

    if not found():
        with tempfile.TemporaryDirectory() as scratch:
            noop = os.path.join(scratch, "resolve.py")
            with open(noop, "w") as f:
                f.write("")
            with open(log_path, "ab") as log:
                subprocess.run(
                    [
                        submit,
                        "--conf",
                        f"spark.jars.packages={conf['spark.jars.packages']}",
                        "--conf",
                        f"spark.jars.ivy={conf['spark.jars.ivy']}",
                        noop,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    check=True,
                )
    jars = found()
    if not jars:
        raise RuntimeError(f"Delta's jars were not resolved into {jars_dir}; see {log_path}")
    return jars


def _wait_until_serving(server: ThriftServer, timeout: float) -> None:
    # Refused connections are expected while the server starts; thrift logs each as an error.
    socket_log = logging.getLogger("thrift.transport.TSocket")
    level = socket_log.level
    socket_log.setLevel(logging.CRITICAL)
    try:
        _poll(server, timeout)
    finally:
        socket_log.setLevel(level)


def _poll(server: ThriftServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"The Spark Thrift Server exited with {server.process.returncode}; "
                f"see {server.log_path}"
            )
        try:
            connection = server.connect()
        except Exception:
            if time.monotonic() > deadline:
                server.stop()
                raise TimeoutError(
                    f"The Spark Thrift Server did not serve within {timeout}s; "
                    f"see {server.log_path}"
                ) from None
            time.sleep(1)
            continue
        connection.close()
        return
