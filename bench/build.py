"""Part 6: a small project's `dbt build` on the embedded session, from a cold start.

`bench/build_project` (3 seeds of 100 rows, 3 views, 2 tables, 20 data tests: 28 nodes, 2
threads), built by `dbt build` in its own process on a fresh folder (a new JVM, an empty
warehouse and metastore; jars already cached), the way a user's first `dbt build` of the day
runs. Three targets, in rotating order per round: fenced_spark's session as it starts by
default; stock dbt-spark's session with Delta configured through `server_side_parameters`; and
fenced_spark's session with Spark's and Delta's defaults put back (`spark_defaults`: what the
session used before it sized itself), so the table shows what the sizing is worth.
"""

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from bench.lakehouse import HERE, project_args
from bench.pairs import median_interval

PROJECT = os.path.join(HERE, "build_project")
TARGETS = ("fenced", "stock", "spark_defaults")
NODES = 28

# A statement as dbt logs it: `On <node>: <sql>`; the node's kind is the id's first part.
_STATEMENT = re.compile(r"\]: On (\S+?): (?!ROLLBACK|Close)")


@dataclass
class Build:
    target: str
    round: int
    seconds: float
    ok: bool
    # Statements dbt sent, by node kind (seed, model, test; `other` for the run's own).
    statements: dict[str, int] = field(default_factory=dict)


def statements_by_kind(log_text: str) -> dict[str, int]:
    kinds: Counter[str] = Counter()
    for match in _STATEMENT.finditer(log_text):
        node = match.group(1)
        kind = node.split(".")[0]
        kinds[kind if kind in ("seed", "model", "test") else "other"] += 1
    return dict(kinds)


def build_once(workdir: str, target: str, round_: int, jars_cache: str) -> Build:
    folder = os.path.join(workdir, "build", f"{target}-{round_}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    env = {
        **os.environ,
        "BENCH_LAKEHOUSE": folder,
        "BENCH_IVY": jars_cache,
        "DBT_FENCED_SPARK_JARS_CACHE": jars_cache,
    }
    logs = os.path.join(folder, "logs")
    target_path = os.path.join(folder, "target")
    command = [
        *(sys.executable, "-m", "dbt.cli.main", "build"),
        *project_args(PROJECT, target, target_path, logs),
    ]
    started = time.monotonic()
    with open(os.path.join(folder, "console.txt"), "w") as console:
        done = subprocess.run(command, env=env, stdout=console, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    with open(os.path.join(logs, "dbt.log"), errors="replace") as log:
        statements = statements_by_kind(log.read())
    return Build(target, round_, seconds, done.returncode == 0, statements)


def run(workdir: str, rounds: int, jars_cache: str) -> list[Build]:
    builds = []
    for round_ in range(rounds):
        # Each target takes each place in the order: no target always follows a busy one.
        order = TARGETS[round_ % 3 :] + TARGETS[: round_ % 3]
        for target in order:
            build = build_once(workdir, target, round_, jars_cache)
            print(
                f"  round {round_} {target}: {build.seconds:.1f} s "
                f"{'ok' if build.ok else 'FAILED'}",
                flush=True,
            )
            builds.append(build)
    return builds


def ratios(builds: list[Build], target: str, against: str = "stock") -> list[float]:
    by = {(b.target, b.round): b.seconds for b in builds if b.ok}
    rounds = sorted({b.round for b in builds})
    return [
        by[(target, n)] / by[(against, n)]
        for n in rounds
        if (target, n) in by and (against, n) in by
    ]


def summary(builds: list[Build], target: str) -> tuple[float, float, float]:
    values = ratios(builds, target)
    low, high = median_interval(values) if values else (0.0, 0.0)
    return (statistics.median(values) if values else 0.0), low, high
