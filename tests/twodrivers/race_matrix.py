"""The race scorecard across separate drivers: the scorecard's races (its models, foreign
changes, proofs and judging, imported from integration_projects/lakehouse_orders/scorecard.py),
with the raced `dbt` command in a process of its own (tests/twodrivers/race_child.py) and the
other writer in another (tests/twodrivers/notebook.py), on a real HDFS with a shared metastore.

What differs from the in-JVM scorecard, and only that, lives here: the profiles of the shared
lakehouse, the cross-process timing (files instead of a thread in the same JVM), a second
model's `dbt run` as the other writer of the append race, and the proof that a `during` commit
landed inside the write statement of another process.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import yaml

from tests.harness.hdfs import REPO, SharedLakehouse, child_env
from tests.harness.servers import stop_process
from tests.twodrivers.notebook import Notebook

PROJECT = os.path.join(REPO, "integration_projects", "lakehouse_orders")
sys.path.insert(0, PROJECT)
import scorecard  # noqa: E402

FOREIGN_TAG = scorecard.FOREIGN_TAG
# The write's first row sleeps this long (race_slowdown). The notebook commits once it sleeps;
# its warm UPDATE on HDFS took 2-6 s under load 10 here: the rest is margin.
SLOW_MS = 20000

# The scorecard's races for the four fenced write paths: merge, append_if_unchanged (the
# compile-time watermark, where stock duplicates), replace_where and a snapshot.
RACES = ["merge", "compile_time_watermark", "replace_where", "snapshot"]
TIMINGS = list(scorecard.TIMINGS)
# Stock dbt-spark as the control where it loses or duplicates rows in the in-JVM scorecard
# (docs/scorecard.md); elsewhere it loses nothing there, and each run here costs a JVM start.
STOCK_LOSES = {
    ("merge", "between"),
    ("compile_time_watermark", "between"),
    ("compile_time_watermark", "during"),
    ("replace_where", "between"),
}
CELLS = [
    (adapter, race, timing)
    for race in RACES
    for timing in TIMINGS
    for adapter in ("fenced", "stock")
    if adapter == "fenced" or (race, timing) in STOCK_LOSES
]

# A second model, in a second dbt project, writing the same table as the append race's model:
# a second pipeline loading day 2's events into it. Its commits carry the foreign writer's
# label (set by its pre-hook; fenced_spark keeps it inside its own tag).
SECOND_MODEL = """
{{ config(materialized='incremental', incremental_strategy='append',
          alias='order_events_export',
          pre_hook="set spark.databricks.delta.commitInfo.userMetadata=FOREIGN_TAG",
          post_hook="reset spark.databricks.delta.commitInfo.userMetadata") }}
select event_id, order_id, event_type, cast(event_ts as timestamp) as event_ts
from {{ target.schema }}.raw_events where day = 2
""".replace("FOREIGN_TAG", FOREIGN_TAG)
# Which races' other writer is the second model's run, and at which timings: its dbt run takes
# 10-30 s in the warm notebook process, longer than a `during` window can be held open.
SECOND_MODEL_RACES = {("compile_time_watermark", "before"), ("compile_time_watermark", "between")}


@dataclass
class Cell:
    adapter: str
    race: scorecard.Race
    timing: str
    outcome: scorecard.Outcome
    verdict: scorecard.Verdict
    other_writer: str
    seconds: float


class Matrix:
    """The notebook driver, the profiles (one schema per adapter and timing, so each race
    starts from its own day-1 tables) and the races' outcomes."""

    def __init__(self, lakehouse: SharedLakehouse, folder: str) -> None:
        self.lakehouse = lakehouse
        self.folder = folder
        self.run_id = uuid.uuid4().hex[:6]
        self.prepared: set[str] = set()
        self.batches: dict[tuple[str, str], dict[str, Cell] | None] = {}
        self.cells: list[Cell] = []
        self.started = time.monotonic()
        self.profiles = os.path.join(folder, "profiles")
        os.makedirs(self.profiles, exist_ok=True)
        self.targets: dict[str, dict] = {}
        for adapter, kind in (("fenced", "fenced_spark"), ("stock", "spark")):
            for timing in TIMINGS:
                name = f"{adapter}_{timing}"
                schema = f"m{self.run_id}_{name}"
                self.targets[name] = lakehouse.profile_target(name, schema, kind)
        profiles = {"lakehouse_orders": {"target": "fenced_before", "outputs": self.targets}}
        with open(os.path.join(self.profiles, "profiles.yml"), "w") as f:
            yaml.safe_dump(profiles, f)
        self.second = os.path.join(folder, "second_project")
        os.makedirs(os.path.join(self.second, "models"), exist_ok=True)
        with open(os.path.join(self.second, "dbt_project.yml"), "w") as f:
            yaml.safe_dump(
                {
                    "name": "second_pipeline",
                    "version": "1.0",
                    "config-version": 2,
                    "profile": "lakehouse_orders",
                    "models": {"+file_format": "delta"},
                },
                f,
            )
        with open(os.path.join(self.second, "models", "late_events_loader.sql"), "w") as f:
            f.write(SECOND_MODEL)
        self.notebook = Notebook(lakehouse, os.path.join(folder, "notebook"), FOREIGN_TAG)

    def close(self) -> None:
        self.notebook.stop()

    def _dbt_args(
        self, command: str, target: str, where: str, *args: str, project: str = PROJECT
    ) -> list[str]:
        return [
            command,
            *args,
            *("--project-dir", project, "--profiles-dir", self.profiles, "--target", target),
            *("--target-path", os.path.join(where, "target")),
            *("--log-path", os.path.join(where, "logs")),
        ]

    def _setup_dbt(self, target: str, *args: str) -> None:
        where = os.path.join(self.folder, "setup", target)
        done = self.notebook.dbt(self._dbt_args(args[0], target, where, *args[1:]))
        if not done["success"]:
            raise RuntimeError(f"set-up `dbt {' '.join(args)}` on {target} failed: {done}")

    def prepare(self, target: str) -> None:
        """Day 1 of every raced model in the target's schema (in the notebook's warm JVM: no
        race times these), and order_events at day 2, which replace_where reads."""
        if target in self.prepared:
            return
        day1 = ("--vars", json.dumps({"day": 1}))
        # Seeds, the models and the snapshot, in one invocation.
        nodes = "raw_orders raw_events orders order_events order_events_export"
        nodes += " daily_order_events orders_snapshot"
        self._setup_dbt(
            target, "build", "--select", *nodes.split(), "--exclude-resource-type", "test", *day1
        )
        self._setup_dbt(target, "run", "--select", "order_events", "--vars", '{"day": 2}')
        self.prepared.add(target)

    def history(self, table: str) -> list[Any]:
        [rows] = self.notebook.sql([f"describe history {table}"])
        return sorted((SimpleNamespace(**r) for r in rows), key=lambda r: r.version)

    def other_writer(self, race: scorecard.Race, timing: str, target: str, table: str) -> str:
        """Commits the race's foreign change; says who did."""
        if (race_name(race), timing) in SECOND_MODEL_RACES:
            where = os.path.join(self.folder, "second", f"{target}-{uuid.uuid4().hex[:4]}")
            done = self.notebook.dbt(self._dbt_args("run", target, where, project=self.second))
            if not done["success"]:
                raise RuntimeError(f"the second model's run failed: {done}")
            return "a second model's dbt run (another project, same table)"
        schema = table.split(".")[0]
        self.notebook.commit(race.foreign.format(t=table, s=schema))
        return "a notebook driver (SQL)"

    def cell(self, adapter: str, name: str, timing: str) -> Cell:
        """The outcome of one race; its whole batch runs on first asking (one raced process per
        adapter and timing: each node is its own race, on its own table)."""
        key = (adapter, timing)
        if key not in self.batches:
            self.batches[key] = None  # a batch that raised is not run again
            names = [r for a, r, t in CELLS if (a, t) == key]
            self.batches[key] = self.batch(adapter, timing, names)
        found = self.batches[key]
        if found is None:
            raise RuntimeError(f"the {adapter} {timing} batch failed; see its first test")
        return found[name]

    def batch(self, adapter: str, timing: str, names: list[str]) -> dict[str, Cell]:
        started = time.monotonic()
        races = {name: scorecard.RACES[name] for name in names}
        target = f"{adapter}_{timing}"
        self.prepare(target)
        schema = self.targets[target]["schema"]
        tables = {name: f"{schema}.{race.model}" for name, race in races.items()}
        starts = {name: self.history(tables[name])[-1].version for name in names}
        signals = os.path.join(self.folder, "races", target)
        os.makedirs(signals)
        day2: dict[str, Any] = {"day": 2, "race_window": timing != "before"}
        if timing == "during":
            day2["slow_ms"] = SLOW_MS
        windows: dict[str, int] = {}
        writers: dict[str, str] = {}
        if timing == "before":
            for name, race in races.items():
                writers[name] = self.other_writer(race, timing, target, tables[name])
        # One command for the batch: its models and its snapshot, without their tests.
        selected = " ".join(race.model for race in races.values())
        args = self._dbt_args(
            "build",
            target,
            signals,
            *("--select", *selected.split(), "--exclude-resource-type", "test"),
            *("--vars", json.dumps(day2)),
        )
        child = _start_child(signals, timing, args)
        by_model = {race.model: name for name, race in races.items()}
        try:
            while timing != "before" and len(windows) < len(races):
                model = _next_window(child, signals, set(windows_models(windows, races)))
                name = by_model[model]
                windows[name] = self.history(tables[name])[-1].version
                if timing == "during":
                    _wait_for(child, signals, f"write-{model}")
                writers[name] = self.other_writer(races[name], timing, target, tables[name])
                if timing == "between":
                    _touch(os.path.join(signals, f"go-{model}"))
            child.wait(timeout=900)
        finally:
            stop_process(child)
        result = _result(signals, child)
        seconds = round(time.monotonic() - started, 1)
        return {
            name: self.judged(
                adapter,
                race,
                timing,
                tables[name],
                starts[name],
                windows.get(name),
                writers[name],
                result,
                seconds,
            )
            for name, race in races.items()
        }

    def judged(
        self, adapter, race, timing, table, start, window_version, writer, result, seconds
    ) -> Cell:
        node = result["nodes"].get(race.model, {"status": "not run", "message": ""})
        outcome = scorecard.Outcome(
            adapter=adapter,
            status=node["status"],
            message=node["message"],
            start_version=start,
            foreign_version=None,
            window_version=window_version,
        )
        entries = [e for e in self.history(table) if e.version > start]
        for row in entries:
            commit = scorecard.Commit(
                row.version,
                row.operation,
                who(adapter, row),
                scorecard.changed_rows(row.operation, row.operationMetrics),
            )
            outcome.timeline.append(commit)
            if commit.writer == "foreign writer":
                outcome.foreign_version = row.version
        scorecard.prove_timing(race, timing, outcome)
        if timing == "during":
            prove_during(race, outcome, entries, result["signals"].get(race.model, {}))

        t = table
        keyed = f"select {race.key} as k from {t} {race.key_where}"
        at_foreign = f"{t} VERSION AS OF {outcome.foreign_version}"
        rows, before, effect, keys = self.notebook.sql(
            [
                race.contents.format(t=t),
                race.contents.format(t=at_foreign),
                race.effect.format(t=t),
                keyed,
            ]
        )
        outcome.rows = [tuple(r.values()) for r in rows]
        outcome.rows_at_foreign = [tuple(r.values()) for r in before]
        outcome.foreign_effect_present = list(effect[0].values())[0] > 0
        counts = Counter(r["k"] for r in keys)
        outcome.duplicated = sum(n - 1 for n in counts.values() if n > 1)
        cell = Cell(
            adapter, race, timing, outcome, scorecard.judge(timing, outcome), writer, seconds
        )
        self.cells.append(cell)
        return cell


def windows_models(windows: dict[str, int], races: dict) -> list[str]:
    return [races[name].model for name in windows]


def race_name(race: scorecard.Race) -> str:
    return next(name for name, r in scorecard.RACES.items() if r is race)


def who(adapter: str, row: Any) -> str:
    """The scorecard's names for the writers, and the second model's run (its fenced tag
    carries the foreign label as the user's own userMetadata) as the foreign writer."""
    try:
        tag = json.loads(row.userMetadata or "null")
    except ValueError:
        tag = None
    if isinstance(tag, dict) and tag.get("user_metadata") == FOREIGN_TAG:
        return "foreign writer"
    return scorecard.who(adapter, row)


def prove_during(race: scorecard.Race, outcome: scorecard.Outcome, entries, result) -> None:
    """The foreign commit landed inside the other process's write statement: after the write's
    first row began its sleep (its transaction open), before the statement returned, and, if
    the write committed, above the version it read."""
    where = f"{race.model} ({outcome.adapter}, during)"
    [foreign] = [e for e in entries if e.version == outcome.foreign_version]
    slept, ended = result.get("slept"), result.get("write_end")
    if slept is None or ended is None or not slept <= foreign.timestamp <= ended:
        raise RuntimeError(
            f"{where}: the foreign commit (at {foreign.timestamp}) is not inside the write "
            f"statement (its row slept at {slept}, it returned at {ended})"
        )
    for e in entries:
        ours = e.version > foreign.version and e.operation in ("MERGE", "WRITE")
        if ours and e.readVersion is not None and e.readVersion >= foreign.version:
            raise RuntimeError(f"{where}: v{e.version} read v{e.readVersion}, after it")


def _start_child(signals: str, timing: str, args: list[str]) -> subprocess.Popen:
    with open(os.path.join(signals, "output.txt"), "wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.twodrivers.race_child",
                signals,
                timing,
                json.dumps(["--log-level", "none", "--log-level-file", "debug", *args]),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=child_env(),
            start_new_session=True,
        )


def _wait_for(child: subprocess.Popen, signals: str, name: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(signals, name)):
        if child.poll() is not None:
            raise RuntimeError(
                f"the raced run ended ({child.returncode}) before `{name}`; see"
                f" {signals}/output.txt" + _tail(signals)
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"no `{name}` from the raced run within {timeout}s")
        time.sleep(0.1)


def _next_window(child: subprocess.Popen, signals: str, seen: set[str]) -> str:
    """The model whose race window opened next (dbt picks the order of independent nodes)."""
    deadline = time.monotonic() + 600
    while True:
        for entry in sorted(os.listdir(signals)):
            if entry.startswith("window-") and entry[len("window-") :] not in seen:
                return entry[len("window-") :]
        if child.poll() is not None:
            raise RuntimeError(
                f"the raced run ended ({child.returncode}) with races left; see"
                f" {signals}/output.txt" + _tail(signals)
            )
        if time.monotonic() > deadline:
            raise TimeoutError("no race window opened within 600 s")
        time.sleep(0.1)


def _touch(path: str) -> None:
    with open(path, "w") as f:
        f.write(str(time.time()))


def _tail(signals: str) -> str:
    try:
        with open(os.path.join(signals, "output.txt"), errors="replace") as f:
            return "\n" + f.read()[-3000:]
    except OSError:
        return ""


def _result(signals: str, child: subprocess.Popen) -> dict:
    try:
        with open(os.path.join(signals, "result.json")) as f:
            return json.load(f)
    except OSError as exc:
        message = f"the raced run left no result ({child.returncode})" + _tail(signals)
        raise RuntimeError(message) from exc


def write_docs(matrix: Matrix, command: str) -> list[str]:
    """docs/scorecard-twodrivers.md and .png, with the scorecard's own markdown and picture;
    only the introduction and the separate-driver facts are this scorecard's."""
    results = []
    for name in RACES:
        race = scorecard.RACES[name]
        for timing in TIMINGS:
            pair = {c.adapter: c for c in matrix.cells if c.race is race and c.timing == timing}
            if "fenced" not in pair:
                continue  # a race that failed to run has no outcome to show

            def cell(adapter: str, pair: dict = pair):
                if adapter in pair:
                    return pair[adapter].outcome, pair[adapter].verdict
                missing = scorecard.Outcome(adapter, scorecard.NOT_RUN, "", 0, None, None)
                text = "not raced here (loses nothing in the in-JVM scorecard)"
                return missing, scorecard.Verdict(text, 0, 0, False)

            results.append((race, timing, cell("stock"), cell("fenced")))
    seconds = time.monotonic() - matrix.started
    text = scorecard.markdown(results, command, seconds, "session")
    head, rest = text.split("\n## Summary\n", 1)
    generated = head.splitlines()[2]
    intro = [
        "# Race scorecard, separate drivers on HDFS: stock dbt-spark vs dbt-fenced-spark",
        "",
        generated,
        "",
        "The scorecard's races (docs/scorecard.md), each as it happens in production: the raced"
        " `dbt` command is a process of its own with its own Spark driver (JVM), and the other"
        " writer is another driver: a notebook (a long-lived PySpark driver) or, in the append"
        " race, a second model's `dbt run` from another dbt project writing the same table. The"
        " table lives on a real HDFS (a MiniDFSCluster; Delta's HDFSLogStore) with a shared Hive"
        " metastore (Derby's network server), as `make twodrivers` starts them"
        " (tests/harness/hdfs.py). The races: tests/twodrivers/test_race_matrix.py.",
        "",
        "Timings across processes: *before*, the other writer commits, then the dbt process"
        " starts; *between*, the dbt process stops in the race window (its pre-hook, after it"
        " read the table) until the other writer has committed; *during*, the other writer"
        " commits once the write statement's slowed row sleeps (its Delta transaction open)."
        " Each foreign commit is read back from `DESCRIBE HISTORY` where the timing says it must"
        " be (for *during*: inside the write statement's start and end, above what the write"
        " read) before the tables are judged. Stock dbt-spark runs as the control where it"
        " loses or duplicates rows in the in-JVM scorecard; the project's tests are not run"
        " after each race here (each is another JVM start); the judging is the table's.",
        "",
        "## Separate drivers",
        "",
        "| strategy | timing | adapter | other writer | seconds of its batch |",
        "|---|---|---|---|---|",
    ]
    for c in matrix.cells:
        intro.append(
            f"| {c.race.name} | {c.timing} | {c.adapter} | {c.other_writer} | {c.seconds:.0f} |"
        )
    intro.append(
        "\nA batch is one adapter and timing: its day-1 set-up and one raced `dbt build` process"
        " whose nodes are raced one after the other, each on its own table."
        f" The notebook driver started in {matrix.notebook.startup:.0f} s; day 1 of each"
        " schema's tables ran in its JVM, untimed by any race."
    )
    docs = os.path.join(REPO, "docs")
    with open(os.path.join(docs, "scorecard-twodrivers.md"), "w") as f:
        f.write(without_unraced_comparisons("\n".join(intro) + "\n\n## Summary\n" + rest))
    scorecard.picture(results, os.path.join(docs, "scorecard-twodrivers.png"))
    return ["docs/scorecard-twodrivers.md", "docs/scorecard-twodrivers.png"]


def without_unraced_comparisons(text: str) -> str:
    """A race stock dbt-spark did not run here has no final table to compare with fenced's."""
    sections = text.split("\n## ")
    for i, section in enumerate(sections):
        if f"- stock dbt-spark: run {scorecard.NOT_RUN};" in section:
            lines = section.split("\n")
            sections[i] = "\n".join(x for x in lines if not x.startswith("- final tables:"))
    return "\n## ".join(sections)
