"""A shared lakehouse for separate Spark drivers: a real HDFS (a MiniDFSCluster, one NameNode
and one DataNode) and a shared Hive metastore database (Derby's network server), both on
127.0.0.1, their jars from Maven through the adapter's own Ivy (`ivy.classpath`).

Delta's local log store serialises commits only inside one JVM; on `hdfs://` Delta picks
HDFSLogStore by itself, and the NameNode refuses a rename onto an existing `_delta_log/N.json`,
so two drivers (two `dbt run` processes) commit to one table safely, as in production.
The facts behind each setting: docs/two-drivers-groundwork.md.

Every JVM here is started in a session of its own (no terminal signal reaches it) and stopped
by its PID. A driver is never kept alive by the harness: `sql()` starts one lone driver process
per call, so a race's two `dbt run` drivers are the only drivers while it runs.
"""

import datetime
import decimal
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import yaml

from dbt.adapters.fenced_spark import ivy
from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials
from dbt.adapters.fenced_spark.session import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    resolved_jars,
)
from tests.harness.servers import free_port, stop_process

# hadoop-client-minicluster matches the hadoop-client-api 3.4.2 that pyspark 4.1 bundles.
HADOOP = "org.apache.hadoop:hadoop-client-minicluster:3.4.2"
# The minicluster's classpath has slf4j-api and no binding: without one HDFS logs nothing
# (the NameNode's refused renames onto an existing commit file are worth seeing).
SLF4J_SIMPLE = "org.slf4j:slf4j-simple:1.7.36"
# The version pyspark bundles (derby, derbytools): its ClientDriver shim needs this client.
DERBY_SERVER = "org.apache.derby:derbynet:10.16.1.1"
DERBY_CLIENT = "org.apache.derby:derbyclient:10.16.1.1"

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a process this suite starts (a driver, a `dbt` run): this checkout's
    adapter and harness first, whatever the venv's editable install points at."""
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])),
        DBT_SEND_ANONYMOUS_USAGE_STATS="false",
        **extra,
    )


@dataclass
class SharedLakehouse:
    folder: str
    jars_cache: str
    hdfs: subprocess.Popen
    derby: subprocess.Popen
    namenode_port: int
    derby_port: int
    # Seconds each lone driver of sql() took, by name (start-up included): init, warm-up, ...
    driver_seconds: dict[str, float]

    @property
    def hdfs_url(self) -> str:
        # Not the written config's "localhost": the servers listen on 127.0.0.1 only.
        return f"hdfs://127.0.0.1:{self.namenode_port}"

    @property
    def warehouse(self) -> str:
        return f"{self.hdfs_url}/warehouse"

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:derby://127.0.0.1:{self.derby_port}/metastore_db;create=true"

    @property
    def hdfs_log(self) -> str:
        return os.path.join(self.folder, "logs", "hdfs.log")

    def pids(self) -> set[int]:
        return {self.hdfs.pid, self.derby.pid}

    def shared_conf(self) -> dict[str, str]:
        """The Spark confs a driver needs to share this warehouse and metastore, written by
        hand (stock dbt-spark's server_side_parameters); fenced_spark's profile says the same
        with `warehouse:` and `metastore:`."""
        return {
            "spark.sql.warehouse.dir": self.warehouse,
            "spark.hadoop.javax.jdo.option.ConnectionURL": self.jdbc_url,
            "spark.hadoop.javax.jdo.option.ConnectionDriverName": (
                "org.apache.derby.jdbc.ClientDriver"
            ),
            # Not spark.jars: pyspark's ClientDriver shim (system class loader) extends
            # derbyclient's ClientAutoloadedDriver, which the system class loader must see.
            "spark.driver.extraClassPath": os.pathsep.join(
                ivy.classpath(DERBY_CLIENT, self.jars_cache)
            ),
        }

    def profile_target(
        self,
        name: str,
        schema: str,
        adapter: str = "fenced_spark",
        conf: dict[str, str] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The dbt profile output of one `dbt run` process (driver) called `name`; each gets its
        own folder for its logs. `adapter="spark"` is stock dbt-spark's session with Delta and
        the lakehouse set up through server_side_parameters, as its users do. `conf` adds
        Spark confs."""
        parameters = {
            # Two drivers plus HDFS and Derby on 2 cores and a shared machine.
            "spark.driver.memory": "1g",
            "spark.master": "local[2]",
            # A fact of this one-DataNode cluster, not of the profile: the client's default of
            # 3 would leave every data file under-replicated.
            "spark.hadoop.dfs.replication": "1",
            **(conf or {}),
        }
        if adapter == "spark":
            target: dict[str, Any] = {
                "type": "spark",
                "method": "session",
                "host": "localhost",
                "server_side_parameters": {
                    **self.stock_delta_conf(),
                    **self.shared_conf(),
                    **parameters,
                },
            }
        else:
            target = {
                **self.readme_target(),
                "folder": os.path.join(self.folder, "drivers", name),
                "jars_cache": self.jars_cache,
                "server_side_parameters": parameters,
            }
        target.update(schema=schema, threads=1, **extra)
        return target

    def readme_target(self) -> dict[str, Any]:
        """docs/connections.md's shared-lakehouse profile (`<!-- example: shared/profiles.yml
        -->`), its placeholder NameNode and Derby server pointed at this lakehouse: the drivers
        run the profile users copy."""
        with open(os.path.join(REPO, "docs", "connections.md")) as readme:
            found = re.search(
                r"^<!-- example: shared/profiles.yml -->\n```yaml\n(.*?)^```",
                readme.read(),
                re.M | re.S,
            )
        assert found, "docs/connections.md lost its shared/profiles.yml example"
        text = found.group(1)
        for placeholder in ("hdfs://namenode:8020", "jdbc:derby://metastore-host:1527/"):
            assert placeholder in text, f"docs/connections.md's profile lost {placeholder}"
        text = text.replace("hdfs://namenode:8020", self.hdfs_url).replace(
            "jdbc:derby://metastore-host:1527/", f"jdbc:derby://127.0.0.1:{self.derby_port}/"
        )
        [profile] = yaml.safe_load(text).values()
        target = dict(profile["outputs"][profile["target"]])
        assert target["warehouse"] == self.warehouse and target["metastore"]["url"] == self.jdbc_url
        return target

    def stock_delta_conf(self) -> dict[str, str]:
        """Delta for stock dbt-spark's session: the jars fenced_spark's session already
        resolved (no Ivy at each start), else the package through Ivy into the same cache."""
        creds = FencedSparkCredentials(schema="default", jars_cache=self.jars_cache)
        jars = resolved_jars(creds)
        resolution = (
            {"spark.jars": ",".join(jars)}
            if jars
            else {"spark.jars.packages": creds.delta_package, "spark.jars.ivy": self.jars_cache}
        )
        return {
            **resolution,
            "spark.sql.extensions": DELTA_EXTENSION,
            "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
            "spark.sql.catalogImplementation": "hive",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
        }

    def sql(self, statements: list[str], name: str = "reader", timeout: float = 900) -> list[Any]:
        """Run `statements` in one lone driver process (fenced_spark's own session on this
        lakehouse, its own JVM), one after the other; each one's rows as dicts (timestamps as
        epoch seconds). Raises with the driver's output if one fails."""
        target = self.profile_target(name, "default")
        request = json.dumps({"target": target, "statements": statements})
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "tests.harness.hdfs"],
            input=request,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env=child_env(),
            start_new_session=True,
        )
        self.driver_seconds[name] = round(time.monotonic() - started, 1)
        lines = [line for line in done.stdout.splitlines() if line.startswith("@@ ")]
        if done.returncode != 0 or not lines:
            folder = target["folder"]
            raise RuntimeError(
                f"driver {name} failed ({done.returncode}); its Spark log is in {folder}/logs\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return json.loads(lines[-1][3:])

    def prepare(self) -> None:
        """The metastore's schema made by one lone driver, then one more lone driver start:
        two drivers starting at once on a fresh Derby metastore deadlock in Derby's catalogs
        while DataNucleus validates the schema (20 s each, retried), and so does the first
        concurrent pair after a single lone start; after two lone starts none did."""
        self.sql(["SHOW DATABASES"], name="init")
        self.sql(["SHOW DATABASES"], name="warm-up")

    def stop(self) -> None:
        for process in (self.derby, self.hdfs):
            stop_process(process)


def start(folder: str, jars_cache: str, timeout: float = 180) -> SharedLakehouse:
    """HDFS and Derby under `folder` (a fresh file system and metastore: the metastore keeps
    full hdfs:// locations, and a new NameNode gets a new port), then prepare()d."""
    logs = os.path.join(folder, "logs")
    os.makedirs(logs, exist_ok=True)
    hdfs, namenode_port = _start_hdfs(folder, jars_cache, timeout)
    try:
        derby, derby_port = _start_derby(folder, jars_cache, timeout)
    except BaseException:
        stop_process(hdfs)
        raise
    lakehouse = SharedLakehouse(folder, jars_cache, hdfs, derby, namenode_port, derby_port, {})
    try:
        lakehouse.prepare()
    except BaseException:
        lakehouse.stop()
        raise
    return lakehouse


def _spawn(command: list[str], log_path: str) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait(process: subprocess.Popen, ready, timeout: float, what: str, log_path: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = ready()
        if found is not None:
            return found
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}; see {log_path}")
        if time.monotonic() > deadline:
            stop_process(process)
            raise TimeoutError(f"{what} was not up within {timeout}s; see {log_path}")
        time.sleep(0.2)


def _start_hdfs(folder: str, jars_cache: str, timeout: float) -> tuple[subprocess.Popen, int]:
    details = os.path.join(folder, "hdfs-details.json")
    log_path = os.path.join(folder, "logs", "hdfs.log")
    classpath = ivy.classpath(HADOOP, jars_cache) + ivy.classpath(SLF4J_SIMPLE, jars_cache)
    command = [
        ivy._java(),
        "-Xmx512m",
        "-XX:+UseSerialGC",
        # MiniDFSCluster keeps its name and data directories under ${test.build.data}/dfs.
        f"-Dtest.build.data={os.path.join(folder, 'hdfs-data')}",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        os.pathsep.join(classpath),
        "org.apache.hadoop.test.MiniDFSClusterManager",
        *("-format", "-datanodes", "1", "-nnport", "0"),
        *("-writeDetails", details, "-writeConfig", os.path.join(folder, "hdfs-site.xml")),
    ]
    process = _spawn(command, log_path)

    def port() -> int | None:
        # Written after the cluster is active, by a plain FileWriter: wait until it parses.
        try:
            with open(details) as f:
                return int(json.load(f)["namenode_port"])
        except (OSError, ValueError, KeyError):
            return None

    return process, _wait(process, port, timeout, "MiniDFSCluster", log_path)


def _start_derby(folder: str, jars_cache: str, timeout: float) -> tuple[subprocess.Popen, int]:
    home = os.path.join(folder, "derby")
    os.makedirs(home, exist_ok=True)
    log_path = os.path.join(folder, "logs", "derby.log")
    port = free_port()
    command = [
        ivy._java(),
        "-Xmx256m",
        "-XX:+UseSerialGC",
        # The databases (metastore_db) and the server's own derby.log live here.
        f"-Dderby.system.home={home}",
        "-cp",
        os.pathsep.join(ivy.classpath(DERBY_SERVER, jars_cache)),
        "org.apache.derby.drda.NetworkServerControl",
        *("start", "-h", "127.0.0.1", "-p", str(port), "-noSecurityManager"),
    ]
    process = _spawn(command, log_path)

    def ready() -> int | None:
        with open(log_path, errors="replace") as log:
            return port if "ready to accept connections" in log.read() else None

    return process, _wait(process, ready, timeout, "Derby's network server", log_path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        # pyspark hands back local naive times: timestamp() reads them as local.
        return value.timestamp()
    if isinstance(value, datetime.date | decimal.Decimal):
        return str(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _driver_main() -> None:
    """One lone driver: fenced_spark's session from a profile target, the statements of the
    request on stdin, one `@@ ` line of JSON results on stdout."""
    from dbt.adapters.fenced_spark import session

    request = json.load(sys.stdin)
    target = dict(request["target"])
    for key in ("type", "threads"):
        target.pop(key, None)
    spark = session.root_session(FencedSparkCredentials(**target))
    results = []
    for statement in request["statements"]:
        results.append(
            [_jsonable(row.asDict(recursive=True)) for row in spark.sql(statement).collect()]
        )
    print("@@ " + json.dumps(results), flush=True)
    spark.stop()


if __name__ == "__main__":
    _driver_main()
