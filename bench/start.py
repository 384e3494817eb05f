"""Part 9: how long a `dbt run` of one model takes to its first node's result, each run in its
own process (a new JVM) on a fresh folder, fenced_spark's session against stock dbt-spark's
session with Delta through `server_side_parameters` (bench/build_project's profile), taking
turns. Three kinds of start:
- *warm*: Delta's jars cached and, for fenced_spark, its class archive written by an earlier
  start (a warm-up run of each, not counted);
- *cold*: a jars cache of its own, empty: Ivy downloads Delta's jars, on both sides;
- *second venv*: a second virtualenv, made here, sharing the warm jars cache as the README
  recommends: fenced_spark's first start there writes that venv's own archive (its class path
  differs, so the first venv's archive is not its), later starts map it.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime

from bench.build import PROJECT as BUILD_PROJECT
from bench.lakehouse import HERE, REPO
from bench.pairs import median_interval

PROJECT = os.path.join(HERE, "start_project")
STARTS = ("warm", "cold", "second venv")
MODES = ("stock", "fenced")
TARGET = 0.5  # fenced/stock, time to the first node, warm (issue 61)
# What the adapter's debug log says of the class archive (dbt/adapters/fenced_spark/
# class_archive.py), in the order they are looked for.
ARCHIVE_LINES = (
    ("did not map", "refused"),
    ("mapped the class archive", "mapped"),
    ("this JVM writes one when it exits", "written"),
    ("another JVM is writing", "none"),
)
# A JVM writes its class archive after dbt has returned (about 15 s): the next run waits.
JVM_EXIT_SECONDS = 180


@dataclass
class Start:
    start: str  # one of STARTS
    mode: str  # one of MODES
    round: int
    first_node: float  # from the process's start to its first node's result
    seconds: float  # the whole process
    ok: bool
    archive: str = ""  # fenced: mapped | written | refused | none (one of ARCHIVE_LINES)


def archive_of(log_text: str) -> str:
    return next((kind for line, kind in ARCHIVE_LINES if line in log_text), "none")


def jvms_with(folder: str) -> list[int]:
    """The processes whose command line names `folder` (the run's JVM: its Derby home)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if folder.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


def wait_for_exit(folder: str) -> None:
    deadline = time.monotonic() + JVM_EXIT_SECONDS
    while jvms_with(folder) and time.monotonic() < deadline:
        time.sleep(0.5)


def run_once(workdir: str, python: str, start: str, mode: str, round_: int, jars: str) -> Start:
    folder = os.path.join(workdir, "start", f"{start.replace(' ', '-')}-{mode}-{round_}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    env = {**os.environ, "BENCH_LAKEHOUSE": folder, "BENCH_IVY": jars}
    env["DBT_FENCED_SPARK_JARS_CACHE"] = jars
    target = "fenced" if mode == "fenced" else "stock"
    command = [
        *(python, "-m", "dbt.cli.main", "run", "--project-dir", PROJECT),
        *("--profiles-dir", BUILD_PROJECT, "--target", target),
        *("--target-path", os.path.join(folder, "target")),
        *("--log-path", os.path.join(folder, "logs")),
    ]
    began = time.time()
    with open(os.path.join(folder, "console.txt"), "w") as console:
        done = subprocess.run(command, env=env, stdout=console, stderr=subprocess.STDOUT)
    seconds = time.time() - began
    first = seconds
    try:
        with open(os.path.join(folder, "target", "run_results.json")) as f:
            timing = json.load(f)["results"][0]["timing"]
        ended = datetime.fromisoformat(timing[-1]["completed_at"].replace("Z", "+00:00"))
        first = ended.timestamp() - began
    except (OSError, KeyError, IndexError, ValueError):
        pass
    archive = ""
    if mode == "fenced":
        with open(os.path.join(folder, "logs", "dbt.log"), errors="replace") as log:
            archive = archive_of(log.read())
    wait_for_exit(folder)
    return Start(start, mode, round_, first, seconds, done.returncode == 0, archive)


def second_venv(workdir: str) -> str:
    """A virtualenv of its own with the package installed as the README says (pip's cache
    makes it quick): its pyspark, so its own class path."""
    venv = os.path.join(workdir, "start", "venv2")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    import dbt.version

    minor = ".".join(dbt.version.__version__.split(".")[:2])
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "-e", REPO, f"dbt-core~={minor}.0"],
        check=True,
    )
    return python


def series(
    workdir: str, python: str, start: str, rounds: int, jars: str, warmup: bool
) -> list[Start]:
    out: list[Start] = []
    if warmup:
        for mode in MODES:
            run_once(workdir, python, start, mode, -1, jars)
    for round_ in range(rounds):
        order = MODES if round_ % 2 == 0 else MODES[::-1]
        for mode in order:
            cache = jars
            if start == "cold":
                cache = os.path.join(workdir, "start", f"ivy-{mode}-{round_}")
                shutil.rmtree(cache, ignore_errors=True)
            result = run_once(workdir, python, start, mode, round_, cache)
            if start == "cold":
                shutil.rmtree(cache, ignore_errors=True)
            print(
                f"  {start} {mode} {round_}: first node {result.first_node:.1f} s, "
                f"run {result.seconds:.1f} s{' ' + result.archive if result.archive else ''}"
                f"{'' if result.ok else ' FAILED'}",
                flush=True,
            )
            out.append(result)
    return out


def run(workdir: str, rounds: dict[str, int], jars: str) -> list[Start]:
    starts = series(workdir, sys.executable, "warm", rounds["warm"], jars, True)
    starts += series(workdir, sys.executable, "cold", rounds["cold"], jars, False)
    print("  making a second venv", flush=True)
    starts += series(
        workdir, second_venv(workdir), "second venv", rounds["second venv"], jars, False
    )
    return starts


def ratios(starts: list[Start], start: str) -> list[float]:
    """fenced/stock of the first node's time, per round of `start`."""
    by = {(s.mode, s.round): s.first_node for s in starts if s.start == start and s.ok}
    rounds = sorted({s.round for s in starts if s.start == start})
    return [
        by[("fenced", n)] / by[("stock", n)]
        for n in rounds
        if ("fenced", n) in by and ("stock", n) in by
    ]


def summary(starts: list[Start], start: str) -> tuple[float, float, float] | None:
    values = ratios(starts, start)
    if not values:
        return None
    low, high = median_interval(values) if len(values) > 1 else (values[0], values[0])
    return statistics.median(values), low, high


def target_row(starts: list[Start]) -> str | None:
    warm = summary(starts, "warm")
    if warm is None:
        return None
    mid, low, high = warm
    met = "yes" if high <= TARGET else ("**no**" if low > TARGET else "not shown")
    return (
        f"| time to the first node fenced/stock ≤ {TARGET}, warm, session | "
        f"{mid:.2f} ({low:.2f}–{high:.2f}) | {met} |"
    )


def section(starts: list[Start]) -> list[str]:
    out = [
        "## 9. Time to the first node",
        "",
        "One `dbt run` of one incremental merge (`bench/start_project`), each in its own process "
        "(a new JVM) on a fresh folder, fenced_spark's session against stock dbt-spark's session "
        "with Delta through `server_side_parameters` (`bench/build_project`'s profile), taking "
        "turns (`bench/start.py`). *warm*: Delta's jars cached and fenced_spark's class archive "
        "written by an earlier start (a warm-up run of each first, not counted). *cold*: a jars "
        "cache of its own, empty, so Ivy downloads Delta's jars on both sides. *second venv*: a "
        "virtualenv made for the run, sharing the warm jars cache as the README recommends; its "
        "class path differs, so fenced_spark's first start there writes that venv's own class "
        "archive and the later ones map it. *first node*: from the process's start to its first "
        "node's result (run_results.json's last `completed_at`); *run*: the whole process. "
        "*archive*: what fenced_spark's debug log says of the class archive at each start.",
        "",
        "| start | runs | stock first node s | fenced first node s | stock run s | "
        "fenced run s | fenced/stock, first node (median, 95% interval) | archive |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for start in STARTS:
        runs = [s for s in starts if s.start == start]
        if not runs:
            continue

        def median(mode: str, field: str, of: list[Start] = runs) -> str:
            values = [getattr(s, field) for s in of if s.mode == mode and s.ok]
            return f"{statistics.median(values):.1f}" if values else "–"

        ok = sum(s.ok for s in runs)
        found = summary(starts, start)
        ratio = f"{found[0]:.2f} ({found[1]:.2f}–{found[2]:.2f})" if found else "–"
        kinds: dict[str, int] = {}
        for s in runs:
            if s.mode == "fenced":
                kinds[s.archive] = kinds.get(s.archive, 0) + 1
        archive = ", ".join(f"{kind} {n}" for kind, n in kinds.items())
        out.append(
            f"| {start} | {ok}/{len(runs)} | {median('stock', 'first_node')} | "
            f"{median('fenced', 'first_node')} | {median('stock', 'seconds')} | "
            f"{median('fenced', 'seconds')} | {ratio} | {archive} |"
        )
    return out
