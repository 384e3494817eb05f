"""One raced `dbt` command in a process of its own (its own Spark driver), stopping where each
node's race needs it, for stock dbt-spark and dbt-fenced-spark alike.

crash_child.py instruments the fence's own steps, which stock dbt-spark has none of, and fires
once per process. The moments here are ones both adapters pass through, once per node (several
raced nodes share one process, one JVM start): the scorecard's race window (the demo pre-hook's
statement, after the node read its table, vB captured, and before it writes), and the write's
slowed row (race_slowdown: the write statement's tasks run, its Delta transaction is open).

    python -m tests.twodrivers.race_child <signals> <before|between|during> <dbt args as JSON>

`<signals>/window-<model>` is written when a node's race window opens; at `between` the node then
waits for `<signals>/go-<model>`. At `during`, `<signals>/write-<model>` is written once its
write's slowed row sleeps. `<signals>/result.json` says how each node ended, with its write
statement's start and end (epoch seconds).
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
# Per node (its model's name): when its window opened, its write started and ended, and when
# the write's slowed row began to sleep (epoch seconds).
NODES: dict[str, dict[str, Any]] = {}


def verb(sql: str) -> str:
    # dbt prefixes its query comment (/* ... */) and dbt-core's merge a `--` line.
    rest = re.sub(r"^(\s*(--[^\n]*\n|/\*.*?\*/))*\s*", "", sql, flags=re.S)
    return (rest.split(None, 1) or [""])[0].upper()


def touch(name: str) -> None:
    path = os.path.join(SIGNALS["dir"], name)
    with open(path + ".tmp", "w") as f:
        f.write(str(time.time()))
    os.replace(path + ".tmp", path)  # the parent never reads a half-written file


def open_window(model: str) -> None:
    NODES[model] = {"window": time.time(), "write_start": None, "slept": None, "write_end": None}
    touch(f"window-{model}")
    if SIGNALS["timing"] == "between":
        go = os.path.join(SIGNALS["dir"], f"go-{model}")
        deadline = time.monotonic() + GO_TIMEOUT_SECONDS
        while not os.path.exists(go):
            if time.monotonic() > deadline:
                os._exit(3)
            time.sleep(0.1)


def slowdown_property() -> tuple[Any, str]:
    from dbt_common.invocation import get_invocation_id
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    return spark.sparkContext._jvm.java.lang.System, f"dbt.race_slowdown.{get_invocation_id()}"


def watch_slowdown(model: str) -> None:
    """race_slowdown sets the JVM property dbt.race_slowdown.<invocation id> as the first row
    of the write starts its sleep: from then on the write's transaction is open."""
    system, key = slowdown_property()
    node = NODES[model]
    while node["write_end"] is None:
        if system.getProperty(key) is not None:
            node["slept"] = time.time()
            touch(f"write-{model}")
            return
        time.sleep(0.1)


def instrument() -> None:
    add_query = SQLConnectionManager.add_query

    # Every statement of both adapters (dbt-spark's execute, the fence's FenceSql) goes here;
    # the connection is named after the node it runs (threads: 1, one node at a time).
    def on_add_query(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        model = self.get_thread_connection().name.rsplit(".", 1)[-1]
        if "'race window'" in sql and model not in NODES:
            open_window(model)
        node = NODES.get(model)
        if node is None or node["write_start"] is not None or verb(sql) not in WRITE_VERBS:
            return add_query(self, sql, *args, **kwargs)
        node["write_start"] = time.time()
        if SIGNALS["timing"] == "during":
            threading.Thread(target=watch_slowdown, args=(model,), daemon=True).start()
        try:
            return add_query(self, sql, *args, **kwargs)
        finally:
            node["write_end"] = time.time()
            if SIGNALS["timing"] == "during":
                # The slowdown sleeps once per invocation: the next node's write sleeps too.
                system, key = slowdown_property()
                system.clearProperty(key)

    SQLConnectionManager.add_query = on_add_query  # type: ignore[method-assign]


def main() -> int:
    SIGNALS["dir"], SIGNALS["timing"], args = sys.argv[1:4]
    from dbt.cli.main import dbtRunner
    from dbt_common.invocation import get_invocation_id

    instrument()
    errors: list[str] = []

    def collect(event) -> None:
        if event.info.level == "error":
            errors.append(event.info.msg)

    result = dbtRunner(callbacks=[collect]).invoke(json.loads(args))
    nodes = result.result.results if result.result is not None else []
    outcome = {
        "success": result.success,
        "exception": None if result.exception is None else str(result.exception),
        "errors": errors,
        "invocation_id": get_invocation_id(),
        "nodes": {
            n.node.name: {"status": str(n.status), "message": n.message or ""} for n in nodes
        },
        "signals": NODES,
    }
    with open(os.path.join(SIGNALS["dir"], "result.json"), "w") as f:
        json.dump(outcome, f)
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
