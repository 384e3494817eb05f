"""A real Spark Thrift Server or Spark Connect server with Delta, started from the venv's pyspark.

Each server gets the embedded session's Spark + Delta configuration (one `launch_conf`), its own
metastore and warehouse under `folder`, free loopback ports, and either `local[N]` or a
standalone cluster's master (`cluster.py`) to run its executors on.
"""

import contextlib
import datetime
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
from dataclasses import dataclass, field
from typing import Any

from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials
from dbt.adapters.fenced_spark.session import launch_conf, resolving

KINDS = ("thrift", "connect")
SERVER_CLASS = {
    "thrift": "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2",
    "connect": "org.apache.spark.sql.connect.service.SparkConnectServer",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def spark_env() -> dict[str, str]:
    return dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1")


class SqlResult:
    def __init__(self, columns: list[str], rows: list[Any]) -> None:
        self.columns = columns
        self._rows = rows

    def collect(self) -> list[Any]:
        return self._rows


class ServerClient:
    """What both servers' clients share: another client of the same server, its running jobs."""

    server: "SparkServer"

    def newSession(self) -> "ServerClient":  # noqa: N802 - SparkSession's name
        return self.server.client()

    def active_job_ids(self) -> set[int]:
        return self.server.active_job_ids()


class ThriftClient(ServerClient):
    """A plain SQL client of a Thrift server (PyHive), like a notebook next to the pipeline,
    shaped like the SparkSession the tests read with: `sql(...).collect()` gives rows with
    attribute access, `newSession()` another client."""

    def __init__(self, server: "SparkServer") -> None:
        from pyhive import hive

        self.server = server
        self._connection = hive.connect(host=server.host, port=server.port, username="foreign")

    def sql(self, statement: str) -> SqlResult:
        cursor = self._connection.cursor()
        try:
            cursor.execute(statement)
            if cursor.description is None:
                return SqlResult([], [])
            names = [column[0] for column in cursor.description]
            row = namedtuple("Row", names, rename=True)  # type: ignore[misc]
            # PyHive parses timestamps but hands dates back as text; a Connect or embedded
            # session gives datetime.date, and the scorecard compares their rows.
            dates = [column[1] == "DATE_TYPE" for column in cursor.description]
            return SqlResult(
                names,
                [
                    row(*(_date(v) if d else v for v, d in zip(values, dates, strict=True)))
                    for values in cursor.fetchall()
                ],
            )
        finally:
            cursor.close()

    def close(self) -> None:
        self._connection.close()


def _date(value: Any) -> Any:
    return datetime.date.fromisoformat(value) if isinstance(value, str) else value


class ConnectClient(ServerClient):
    """A Spark Connect session of its own (pyspark's Connect client); `newSession()` opens
    another session on the server, as a second notebook would."""

    def __init__(self, server: "SparkServer") -> None:
        # Connect's own class: pyspark's generic builder would switch the whole process to
        # Connect mode, and the bench runs the embedded session next to it.
        from pyspark.sql.connect.session import SparkSession

        from dbt.adapters.fenced_spark import connect

        connect.quiet_client()
        self.server = server
        self.session = SparkSession.builder.remote(server.url).create()

    def sql(self, statement: str) -> Any:
        # SQL commands run eagerly over Connect; a query runs at collect().
        return self.session.sql(statement)

    def close(self) -> None:
        self.session.stop()


@dataclass
class SparkServer:
    kind: str
    folder: str
    port: int
    ui_port: int
    process: subprocess.Popen
    log_path: str
    master: str
    clients: list[Any] = field(default_factory=list)
    # How it was launched, so that it can be killed and launched again on the same port.
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def url(self) -> str:
        """How a client names the server: Spark Connect's URL, or host:port for Thrift."""
        if self.kind == "connect":
            return f"sc://{self.host}:{self.port}"
        return f"{self.host}:{self.port}"

    def client(self) -> ServerClient:
        client = ThriftClient(self) if self.kind == "thrift" else ConnectClient(self)
        self.clients.append(client)
        return client

    def profile(self, adapter: str = "fenced_spark", schema: str = "analytics", **extra) -> dict:
        """A dbt target on this server; `adapter="spark"` is stock dbt-spark (Thrift only:
        dbt-spark has no Connect method)."""
        target: dict[str, Any] = {"type": adapter, "method": self.kind, "schema": schema}
        if self.kind == "thrift":
            # Stock dbt-spark sleeps poll_interval (5 s by default) whenever a statement is
            # still running when first polled (fenced_spark backs off from 10 ms up to it):
            # 1 s keeps stock's runs in the tests short.
            target.update(host=self.host, port=self.port, user="dbt", poll_interval=1)
        else:
            target.update(host=self.url)
        target.update({"connect_retries": 3, "connect_timeout": 5, "threads": 1, **extra})
        return target

    def active_job_ids(self) -> set[int]:
        """Running Spark jobs, from the server's REST API (what a status tracker would say)."""
        return {job["jobId"] for job in self.rest("jobs?status=running")}

    def executors(self) -> list[dict]:
        """The application's executors as the REST API lists them (the driver included)."""
        return self.rest("executors")

    def rest(self, path: str) -> Any:
        """The server's one application's REST API at `path`."""
        base = f"http://127.0.0.1:{self.ui_port}/api/v1/applications"
        with urllib.request.urlopen(base, timeout=10) as response:
            app = json.load(response)[0]["id"]
        with urllib.request.urlopen(f"{base}/{app}/{path}", timeout=10) as response:
            return json.load(response)

    def stop(self) -> None:
        for client in self.clients:
            # the server may already be gone; stopping it is what matters
            with contextlib.suppress(Exception):
                client.close()
        stop_process(self.process)

    def kill_and_restart(self, timeout: float = 300) -> None:
        """A crash (SIGKILL) and a start on the same port with the same metastore and
        warehouse: every session the server had is gone, as after a driver restart."""
        self.process.kill()
        self.process.wait()
        self.process = _launch(self.command, self.env, self.folder, self.log_path)
        _wait_until_serving(self, timeout)


def _launch(command: list[str], env: dict[str, str], folder: str, log_path: str):
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder)


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start(
    kind: str,
    folder: str,
    jars_cache: str | None,
    cores: int = 6,
    timeout: float = 300,
    extra_conf: dict[str, str] | None = None,
    master: str | None = None,
) -> SparkServer:
    """A `kind` server on `local[cores]`, or on the standalone cluster at `master` with `cores`
    executor cores."""
    if kind not in KINDS:
        raise ValueError(f"unknown server kind {kind!r}; choose from {KINDS}")
    os.makedirs(os.path.join(folder, "logs"), exist_ok=True)
    port, ui_port = free_port(), free_port()
    creds = FencedSparkCredentials(schema="default", folder=folder, jars_cache=jars_cache)
    conf = launch_conf(creds, share_classes=False)
    conf["spark.app.name"] = f"dbt-fenced-spark-{kind}"
    # Spare task slots, not cores: a race parks our write in Thread.sleep while the foreign
    # client's job must still run.
    conf["spark.master"] = master or f"local[{cores}]"
    # The UI's REST API tells race tests which jobs run (there is no status tracker to ask).
    conf["spark.ui.enabled"] = "true"
    conf["spark.ui.port"] = str(ui_port)
    if kind == "connect":
        conf["spark.connect.grpc.binding.address"] = "127.0.0.1"
        conf["spark.connect.grpc.binding.port"] = str(port)
    env = spark_env()
    submit = os.path.join(spark_home(), "bin", "spark-submit")
    log_path = os.path.join(folder, "logs", f"{kind}-server.log")
    # The server's session class loader does not see `--packages` jars (Delta's analyzer
    # rules then fail with NoClassDefFoundError); Delta's own jars go on the class path.
    delta_jars = ":".join(resolve_delta_jars(conf, env, log_path))
    if master:
        # Executors in other JVMs write Delta's data files and statistics: they need its jars.
        conf["spark.executor.extraClassPath"] = delta_jars
        conf["spark.cores.max"] = str(cores)
        conf["spark.executor.memory"] = "1g"
    conf.update(extra_conf or {})
    command = [submit, "--class", SERVER_CLASS[kind], "--driver-class-path", delta_jars]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command.append("spark-internal")
    if kind == "thrift":
        command += [
            "--hiveconf",
            f"hive.server2.thrift.port={port}",
            "--hiveconf",
            "hive.server2.thrift.bind.host=127.0.0.1",
        ]
    process = _launch(command, env, folder, log_path)
    server = SparkServer(
        kind, folder, port, ui_port, process, log_path, conf["spark.master"], [], command, env
    )
    _wait_until_serving(server, timeout)
    return server


def resolve_delta_jars(conf: dict[str, str], env: dict[str, str], log_path: str) -> list[str]:
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

    with resolving(conf):  # not while another process's Ivy fills the cache
        if not found():
            _resolve(conf, env, log_path)
    jars = found()
    if not jars:
        raise RuntimeError(f"Delta's jars were not resolved into {jars_dir}; see {log_path}")
    return jars


def _resolve(conf: dict[str, str], env: dict[str, str], log_path: str) -> None:
    """Ivy fills the cache with Delta's package, through a no-op app."""
    submit = os.path.join(spark_home(), "bin", "spark-submit")
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


def _wait_until_serving(server: SparkServer, timeout: float) -> None:
    # Refused connections are expected while the server starts; thrift logs each as an error.
    socket_log = logging.getLogger("thrift.transport.TSocket")
    level = socket_log.level
    socket_log.setLevel(logging.CRITICAL)
    try:
        _poll(server, timeout)
    finally:
        socket_log.setLevel(level)


def _poll(server: SparkServer, timeout: float) -> None:
    name = {"thrift": "Spark Thrift Server", "connect": "Spark Connect server"}[server.kind]
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"The {name} exited with {server.process.returncode}; see {server.log_path}"
            )
        try:
            _probe(server)
        except Exception:
            if time.monotonic() > deadline:
                server.stop()
                raise TimeoutError(
                    f"The {name} did not serve within {timeout}s; see {server.log_path}"
                ) from None
            time.sleep(1)
            continue
        return


def _probe(server: SparkServer) -> None:
    if server.kind == "thrift":
        from pyhive import hive

        hive.connect(host=server.host, port=server.port, username="probe").close()
        return
    # A bare TCP connect: a Connect client would retry on its own for minutes.
    with socket.create_connection((server.host, server.port), timeout=2):
        pass
