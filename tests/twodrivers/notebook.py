"""A notebook on another cluster: one long-lived Spark driver (its own JVM, kept warm) on the
shared lakehouse, next to the `dbt run` processes it races. It commits the foreign changes
(tagged like the scorecard's foreign writer), reads history and contents back, and runs dbt
itself in-process when the other writer is a second model's `dbt run` (and for the races' day-1
set-up, which no race times).

A race needs its foreign commit to land within seconds of a signal; a lone driver per statement
(SharedLakehouse.sql) takes 10-60 s to start on this machine, so this one starts once.

Requests are JSON lines on stdin, each answered by one `@@ ` line of JSON on stdout.
"""

import json
import os
import subprocess
import sys
import time
from typing import Any

from tests.harness.hdfs import REPO, SharedLakehouse, _jsonable, child_env
from tests.harness.servers import stop_process


class Notebook:
    def __init__(self, lakehouse: SharedLakehouse, folder: str, foreign_tag: str) -> None:
        os.makedirs(folder, exist_ok=True)
        target = lakehouse.profile_target("notebook", "default")
        self.log_path = os.path.join(folder, "notebook.log")
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.twodrivers.notebook"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=REPO,
                env=child_env(),
                start_new_session=True,
            )
        self._ask({"target": target, "foreign_tag": foreign_tag})
        self.startup = round(time.monotonic() - started, 1)

    def _ask(self, request: dict) -> Any:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith("@@ "):
                answer = json.loads(line[3:])
                if "error" in answer:
                    raise RuntimeError(f"notebook: {answer['error']}")
                return answer["result"]
        raise RuntimeError(f"the notebook driver exited; see {self.log_path}")

    def sql(self, statements: list[str]) -> list[list[dict]]:
        """Reads (and untagged set-up statements) on the notebook's own session."""
        return self._ask({"op": "sql", "statements": statements})

    def commit(self, statement: str) -> None:
        """The foreign change, tagged as the foreign writer's."""
        self._ask({"op": "foreign", "statement": statement})

    def dbt(self, args: list[str]) -> dict:
        """dbt in the notebook's process and JVM: status, message, errors, invocation_id."""
        return self._ask({"op": "dbt", "args": args})

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self._ask({"op": "stop"})
                self.process.wait(timeout=60)
            except (OSError, RuntimeError, subprocess.TimeoutExpired):
                pass
        stop_process(self.process)


def _dbt(args: list[str]) -> dict:
    from dbt.cli.main import dbtRunner

    errors: list[str] = []

    def collect(event) -> None:
        if event.info.level == "error":
            errors.append(event.info.msg)

    result = dbtRunner(callbacks=[collect]).invoke(["--log-level", "none", *args])
    if result.exception is not None:
        raise result.exception
    nodes = result.result.results if result.result is not None else []
    from dbt_common.invocation import get_invocation_id

    return {
        "success": result.success,
        "statuses": [str(n.status) for n in nodes],
        "message": nodes[0].message if nodes else "",
        "errors": errors,
        "invocation_id": get_invocation_id(),
    }


def main() -> None:
    from dbt.adapters.fenced_spark import session
    from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials
    from tests.harness.writer import ForeignWriter

    first = json.loads(sys.stdin.readline())
    target = {k: v for k, v in first["target"].items() if k not in ("type", "threads")}
    spark = session.root_session(FencedSparkCredentials(**target))
    writer = ForeignWriter(spark, tag=first["foreign_tag"])
    reader = spark.newSession()
    print("@@ " + json.dumps({"result": "ready"}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "stop":
            print("@@ " + json.dumps({"result": "bye"}), flush=True)
            break
        try:
            if op == "sql":
                result: Any = [
                    [_jsonable(r.asDict(recursive=True)) for r in reader.sql(s).collect()]
                    for s in request["statements"]
                ]
            elif op == "foreign":
                writer.sql(request["statement"])
                result = "committed"
            else:
                result = _dbt(request["args"])
            answer = {"result": result}
        except Exception as exc:  # the parent raises it with the request's context
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print("@@ " + json.dumps(answer), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
