"""A Spark standalone cluster on this machine: a master and a worker, each its own JVM, started
from pyspark's own classes with `spark-class`. A server started with its `master_url` runs its
executors in JVMs the worker launches: the data files are written in other processes than the
driver that commits to the Delta log."""

import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass

from tests.harness.servers import free_port, spark_env, spark_home, stop_process

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass
class Cluster:
    folder: str
    port: int
    ui_port: int
    master: subprocess.Popen
    worker: subprocess.Popen

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def state(self) -> dict:
        """The master's own view: its workers and applications (its UI's JSON)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)

    def pids(self) -> set[int]:
        return {self.master.pid, self.worker.pid}

    def stop(self) -> None:
        stop_process(self.worker)
        stop_process(self.master)


def start(folder: str, cores: int = 8, memory: str = "4g", timeout: float = 120) -> Cluster:
    """`cores` are task slots the worker offers, not the machine's cores: each server takes its
    share with spark.cores.max, and a race parks tasks in Thread.sleep."""
    logs = os.path.join(folder, "logs")
    os.makedirs(logs, exist_ok=True)
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    env = dict(spark_env(), SPARK_WORKER_DIR=os.path.join(folder, "work"))
    port, ui_port, worker_ui = free_port(), free_port(), free_port()
    master = _spawn(
        [spark_class, MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port)]
        + ["--webui-port", str(ui_port)],
        env,
        os.path.join(logs, "master.log"),
    )
    url = f"spark://127.0.0.1:{port}"
    worker = _spawn(
        [spark_class, WORKER_CLASS, "--host", "127.0.0.1", "--cores", str(cores)]
        + ["--memory", memory, "--webui-port", str(worker_ui), url],
        env,
        os.path.join(logs, "worker.log"),
    )
    cluster = Cluster(folder, port, ui_port, master, worker)
    deadline = time.monotonic() + timeout
    while True:
        for name, process in (("master", master), ("worker", worker)):
            if process.poll() is not None:
                cluster.stop()
                raise RuntimeError(f"the standalone {name} exited; see {logs}/{name}.log")
        try:
            if any(w.get("state") == "ALIVE" for w in cluster.state().get("workers", [])):
                return cluster
        except OSError:
            pass  # the master's UI is not up yet
        if time.monotonic() > deadline:
            cluster.stop()
            raise TimeoutError(f"no worker registered with {url} within {timeout}s; see {logs}")
        time.sleep(1)


def _spawn(command: list[str], env: dict[str, str], log_path: str) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
