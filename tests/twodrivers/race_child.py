"""One raced `dbt` command in a process of its own (its own Spark driver), stopping where the
race needs it, for stock dbt-spark and dbt-fenced-spark alike.

crash_child.py instruments the fence's own steps, which stock dbt-spark has none of. The two
moments here are ones both adapters pass through: the scorecard's race window (the demo
pre-hook's statement, after the run read its table, vB captured, and before it writes), and the
write's slowed row (race_slowdown: the write statement's tasks run, its Delta transaction has
read its snapshot).

    python -m tests.twodrivers.race_child <signals> <before|between|during> <dbt args as JSON>

`<signals>/window` is written when the race window opens; at `between` the run then waits for
`<signals>/go`. At `during`, `<signals>/write` is written once the write's slowed row sleeps.
`<signals>/result.json` says how it ended, with the write statement's start and end (epoch s).
"""

import json
import os
import re
import sys
import threading
import time
from typing import Any

from dbt.adapters.sql.connections import SQLConnectionManager

# The parent may die; a run waiting for it must not keep a driver alive.
GO_TIMEOUT_SECONDS = 600
WRITE_VERBS = ("MERGE", "INSERT")
SIGNALS = {"dir": "", "timing": ""}
STATE: dict[str, Any] = {"window": None, "write_start": None, "write_end": None, "slept": None}


def verb(sql: str) -> str:
    # dbt prefixes its query comment (/* ... */) and dbt-core's merge a `--` line.
    rest = re.sub(r"^(\s*(--[^\n]*\n|/\*.*?\*/))*\s*", "", sql, flags=re.S)
    return (rest.split(None, 1) or [""])[0].upper()


def touch(name: str) -> None:
    path = os.path.join(SIGNALS["dir"], name)
    with open(path + ".tmp", "w") as f:
        f.write(str(time.time()))
    os.replace(path + ".tmp", path)  # the parent never reads a half-written file


def open_window() -> None:
    STATE["window"] = time.time()
    touch("window")
    if SIGNALS["timing"] == "between":
        go = os.path.join(SIGNALS["dir"], "go")
        deadline = time.monotonic() + GO_TIMEOUT_SECONDS
        while not os.path.exists(go):
            if time.monotonic() > deadline:
                os._exit(3)
            time.sleep(0.1)


def watch_slowdown() -> None:
    """race_slowdown sets the JVM property dbt.race_slowdown.<invocation id> as the first row
    of the write starts its sleep: from then on the write's transaction is open."""
    from dbt_common.invocation import get_invocation_id
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    key = f"dbt.race_slowdown.{get_invocation_id()}"
    system = spark.sparkContext._jvm.java.lang.System
    while STATE["write_end"] is None:
        if system.getProperty(key) is not None:
            STATE["slept"] = time.time()
            touch("write")
            return
        time.sleep(0.1)


def instrument() -> None:
    add_query = SQLConnectionManager.add_query

    # Every statement of both adapters (dbt-spark's execute, the fence's FenceSql) goes here.
    def on_add_query(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        first_write = (
            STATE["window"] is not None
            and STATE["write_start"] is None
            and verb(sql) in WRITE_VERBS
        )
        if not first_write:
            return add_query(self, sql, *args, **kwargs)
        STATE["write_start"] = time.time()
        if SIGNALS["timing"] == "during":
            threading.Thread(target=watch_slowdown, daemon=True).start()
        try:
            return add_query(self, sql, *args, **kwargs)
        finally:
            STATE["write_end"] = time.time()

    SQLConnectionManager.add_query = on_add_query  # type: ignore[method-assign]


def main() -> int:
    SIGNALS["dir"], SIGNALS["timing"], args = sys.argv[1:4]
    sys.path.insert(0, os.path.join(os.getcwd(), "integration_projects", "lakehouse_orders"))
    from dbt.cli.main import dbtRunner
    from dbt_common.invocation import get_invocation_id
    from scorecard import race_window

    instrument()
    errors: list[str] = []

    def collect(event) -> None:
        if event.info.level == "error":
            errors.append(event.info.msg)

    with race_window(open_window):
        result = dbtRunner(callbacks=[collect]).invoke(json.loads(args))
    nodes = result.result.results if result.result is not None else []
    outcome = {
        "success": result.success,
        "exception": None if result.exception is None else str(result.exception),
        "status": str(nodes[0].status) if nodes else "error",
        "message": nodes[0].message or "" if nodes else "",
        "errors": errors,
        "invocation_id": get_invocation_id(),
        **STATE,
    }
    with open(os.path.join(SIGNALS["dir"], "result.json"), "w") as f:
        json.dump(outcome, f)
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
