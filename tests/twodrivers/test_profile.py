"""docs/connections.md's shared-lakehouse profile against a real HDFS and Derby's network
server: `dbt debug` shows where the tables and the catalog are, the metastore's credentials stay
off the driver's command line, and an unreachable metastore is named with its cause."""

import os
import subprocess
import sys
import time

from tests.harness.hdfs import child_env
from tests.harness.servers import free_port
from tests.twodrivers.drivers import DbtProject

SECRET = "sekret-4242"


def dbt_debug(project: DbtProject, target: str, watch: str = "") -> tuple[int, str, list[str]]:
    """`dbt debug` in its own process; with `watch`, the command lines of the JVMs it starts
    (those whose command line holds `watch`, its folder) while it runs."""
    dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
    env = child_env()
    args = ["debug", "--project-dir", str(project.root), "--profiles-dir", str(project.root)]
    process = subprocess.Popen(
        [dbt, *args, "--target", target],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    seen: list[str] = []
    while watch and process.poll() is None:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                        line = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if "java" in line and watch in line and line not in seen:
                    seen.append(line)
        time.sleep(0.2)
    output, _ = process.communicate(timeout=600)
    return process.returncode, output, seen


def test_debug_shows_the_shared_lakehouse_and_the_password_stays_in_memory(
    tmp_path, shared_lakehouse
):
    project = DbtProject(tmp_path, shared_lakehouse, {"m.sql": "select 1 as id"})
    target = project.target("debugged")
    # Derby's network server here checks no credentials; the URL carries them as a user's would.
    project.targets[target]["metastore"]["url"] += f";user=app;password={SECRET}"
    project.save()
    folder = project.targets[target]["folder"]
    code, output, jvms = dbt_debug(project, target, watch=folder)
    assert code == 0, output[-3000:]
    assert f"warehouse: {shared_lakehouse.warehouse}" in output
    assert "metastore_at: jdbc:derby://127.0.0.1:" in output and "password=***" in output
    assert SECRET not in output
    assert jvms, "no JVM of this dbt debug was seen"
    for line in jvms:
        assert SECRET not in line and "javax.jdo.option" not in line, line


def test_an_unreachable_metastore_is_named_with_its_cause(tmp_path, shared_lakehouse):
    project = DbtProject(tmp_path, shared_lakehouse, {"m.sql": "select 1 as id"})
    target = project.target("nowhere")
    closed = free_port()  # nothing listens there
    url = f"jdbc:derby://127.0.0.1:{closed}/metastore_db;create=true"
    project.targets[target]["metastore"]["url"] = url
    project.save()
    code, output, _ = dbt_debug(project, target)
    assert code != 0
    assert f"The shared metastore at {url} did not answer: " in output, output[-3000:]
    assert "Connection refused" in output or "ConnectException" in output, output[-3000:]
