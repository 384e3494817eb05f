"""One `dbt run` of a fenced model in its own process, SIGKILLed inside a chosen fence step.

It prints a `STEP <name>` line, flushed, as each fence step starts. On entering the step
named by `kill_step`, a timer sends this process SIGKILL after `kill_ms` (a negative
`kill_ms` kills at once): the timer lives in
the dying process because a parent reading pipes on a busy machine misses steps that last
milliseconds (capture and verify read the log without a Spark job). `race` mode commits a
foreign UPDATE right after the pre-check (from another session of this JVM), which sends the
fence down its revert path. `gate:<step>:<file>` mode instead waits on entering `<step>` until
`<file>` exists (a `STEP gated` line says it waits), so that another driver can commit then;
step `prechecked` (right after the pre-check, the write not yet sent) is printed when a gate
or the kill names it.

A `folder` of `-` runs on the dbt profile's own session (a shared lakehouse: the table is in
the shared metastore, nothing is set up here), and the kill takes the process group, this
process and its JVM at once, as a driver dies: start it in a session of its own.

    python -m tests.functional.crash_child <project_dir> <folder> <table> <location>
        <plain|race|gate:step:file> <kill_step> <kill_ms> <dbt args as JSON>
"""

import json
import os
import signal
import sys
import threading
import time
from typing import Any

from dbt.adapters.fenced_spark import session
from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials
from dbt.adapters.fenced_spark.fence import protocol
from dbt.adapters.fenced_spark.fence_sql import FenceSql
from dbt.adapters.fenced_spark.impl import FencedSparkAdapter
from tests.functional.lakehouse import without_leading_comments

KILL = {"step": "", "seconds": 0.0, "group": False}
GATE = {"step": "", "file": ""}
# A gate nobody opens (the parent died) ends the process rather than leave a driver behind.
GATE_TIMEOUT_SECONDS = 900


def die() -> None:
    if KILL["group"]:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def step(name: str) -> None:
    print(f"STEP {name}", flush=True)
    if name == GATE["step"]:
        GATE["step"] = ""
        print("STEP gated", flush=True)
        deadline = time.monotonic() + GATE_TIMEOUT_SECONDS
        while not os.path.exists(GATE["file"]):
            if time.monotonic() > deadline:
                die()
            time.sleep(0.1)
    if name == KILL["step"]:
        KILL["step"] = ""
        if KILL["seconds"] < 0:  # at once: the step itself never runs
            die()
        timer = threading.Timer(KILL["seconds"], die)
        timer.daemon = True
        timer.start()


def instrument(race_sql: str | None) -> None:
    capture = protocol.Fence.capture
    commits_since = protocol.Fence.commits_since
    verify = protocol.Fence.verify
    precheck = protocol.Fence.precheck
    execute = FenceSql.execute
    fence_stage = FencedSparkAdapter.fence_stage
    seen = {"capture": False, "write": False, "race": False, "verify": False}

    def on_capture(self: protocol.Fence, table: str) -> Any:
        if not seen["capture"]:
            seen["capture"] = True
            step("capture")
        return capture(self, table)

    def verifying() -> None:
        if seen["write"] and not seen["verify"]:
            seen["verify"] = True
            step("verify")

    def on_commits(self: protocol.Fence, table: str, version: int) -> Any:
        verifying()
        return commits_since(self, table, version)

    # A write Delta says committed right above vB is verified without reading the log.
    def on_verify(self: protocol.Fence, state: Any, conflict: Any, *args: Any) -> Any:
        verifying()
        return verify(self, state, conflict, *args)

    def on_precheck(self: protocol.Fence, state: protocol.FenceState) -> protocol.FenceState:
        step("precheck")
        checked = precheck(self, state)
        if race_sql and not seen["race"]:
            seen["race"] = True
            root = session._root
            assert root is not None
            root.newSession().sql(race_sql)
            step("raced")
        if "prechecked" in (GATE["step"], KILL["step"]):
            step("prechecked")
        return checked

    def on_execute(self: FenceSql, sql: str) -> None:
        verb = (without_leading_comments(sql).split(None, 1) or [""])[0].upper()
        if verb in ("MERGE", "INSERT"):
            seen["write"] = True
            seen["verify"] = False
            step("write")
        elif verb == "RESTORE":
            step("revert")
        execute(self, sql)

    def on_stage(self: FencedSparkAdapter, *args: Any) -> str:
        step("stage")
        return fence_stage(self, *args)

    protocol.Fence.capture = on_capture  # type: ignore[method-assign]
    protocol.Fence.commits_since = on_commits  # type: ignore[method-assign]
    protocol.Fence.verify = on_verify  # type: ignore[method-assign]
    protocol.Fence.precheck = on_precheck  # type: ignore[method-assign]
    FenceSql.execute = on_execute  # type: ignore[method-assign]
    FencedSparkAdapter.fence_stage = on_stage  # type: ignore[method-assign]


def main() -> int:
    project_dir, folder, table, location, mode, kill_step, kill_ms, args = sys.argv[1:9]
    KILL.update(step=kill_step, seconds=int(kill_ms) / 1000, group=folder == "-")
    if mode.startswith("gate:"):
        _, GATE["step"], GATE["file"] = mode.split(":", 2)
    if folder != "-":
        from tests.conftest import JARS_CACHE, TEST_CONF

        creds = FencedSparkCredentials(
            schema="analytics",
            folder=folder,
            jars_cache=JARS_CACHE,
            server_side_parameters=TEST_CONF,
        )
        spark = session.root_session(creds)
        # This JVM's own catalog entry for the table the parent created at `location`.
        schema = table.split(".")[0]
        spark.sql(f"create schema if not exists {schema}")
        spark.sql(f"create table if not exists {table} using delta location '{location}'")
    instrument(f"update {table} set status = 'cancelled' where id = 1" if mode == "race" else None)
    step("dbt")

    from dbt.cli.main import dbtRunner

    result = dbtRunner().invoke(
        [*json.loads(args), "--project-dir", project_dir, "--profiles-dir", project_dir]
    )
    step("done" if result.success else "failed")
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
