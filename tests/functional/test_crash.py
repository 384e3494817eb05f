"""Crash safety: `dbt run` of a fenced model, SIGKILLed at seeded points in every fence step.

Each trial runs the model in a child process (its own JVM, its own catalog entry for the
same Delta files) and kills it once it has entered the chosen step (capture, stage, write,
verify, revert), after a seeded delay. `race` trials commit a foreign UPDATE right after the
pre-check, so the fence takes its revert path. Then, in this process:
- the table reads at its latest version and holds either the state before the batch or the
  fully applied batch, never a part of it;
- the next `dbt run` of the same model succeeds, carries only its own tag, and converges;
  unless a raced write of ours committed and was not reverted before the kill: then the next
  run refuses, naming that commit and the RESTORE that undoes it, and once that RESTORE ran,
  the run after it converges.

Only one JVM writes at a time (the child is dead before we write): two JVMs committing at
once to a local-disk Delta table is unsafe in Delta itself.
Trials and seed: CRASH_TRIALS (default 5, one per step; `make reliability` runs 25) and
CRASH_SEED (default 7). Each trial is recorded in crash.json in the records folder
(RELIABILITY_RECORDS: `make reliability` sets .cache/reliability, for docs/reliability.md; a
plain pytest run writes under its temp folder).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import pytest
from dbt.tests.util import run_dbt

from tests.conftest import REPO
from tests.functional.lakehouse import history, ours, rows

TRIALS = int(os.environ.get("CRASH_TRIALS", "5"))
SEED = int(os.environ.get("CRASH_SEED", "7"))
PHASES = ("capture", "stage", "write", "verify", "revert")
# How long after entering a step the kill may come (seconds): within that step's usual length.
SPREAD = {"capture": 0.01, "stage": 0.05, "write": 0.2, "verify": 0.01, "revert": 0.5}

ORDERS = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
select id, status, amount from values
  (1, 'b{{ var("batch") }}', {{ var("batch") }}),
  ({{ 100 + var("batch") | int }}, 'b{{ var("batch") }}', {{ var("batch") }})
  as batch(id, status, amount)
"""

# The watermark: every batch up to var('batch') exists upstream; append the ones not yet in.
EVENTS = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged') }}
select cast(b * 10 + k as bigint) as id, concat('b', b) as status, cast(b as bigint) as amount
from (select explode(sequence(1, {{ var("batch") }})) as b)
cross join (select explode(array(1, 2)) as k)
{% if is_incremental() %}
where b > (select coalesce(max(amount), 0) from {{ this }})
{% endif %}
"""

SEED_ROWS = [(1, "open", 0), (2, "open", 0), (3, "open", 0)]
RACE_SQL_STATUS = "cancelled"

Row = tuple[int, str, int]


def apply_batch(model: str, state: list[Row], batch: int) -> list[Row]:
    by_id = {r[0]: r for r in state}
    if model == "orders":
        by_id[1] = (1, f"b{batch}", batch)
        by_id[100 + batch] = (100 + batch, f"b{batch}", batch)
    else:
        high = max((r[2] for r in state), default=0)
        for b in range(high + 1, batch + 1):
            for k in (1, 2):
                by_id[b * 10 + k] = (b * 10 + k, f"b{b}", b)
    return sorted(by_id.values())


def apply_race(state: list[Row]) -> list[Row]:
    return sorted((i, RACE_SQL_STATUS, a) if i == 1 else (i, s, a) for i, s, a in state)


@dataclass
class Trial:
    number: int
    model: str
    mode: str
    phase: str
    delay_ms: int
    last_step: str = ""
    killed: bool = False
    raced: bool = False
    state_after_kill: str = ""
    next_run: str = ""
    seconds: float = 0.0


def run_child(argv: list[str]) -> tuple[int, list[str], str]:
    """The child's exit code, the steps it entered, and its output."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DBT_SEND_ANONYMOUS_USAGE_STATS": "0"}
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    steps = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("STEP ")]
    return proc.returncode, steps, proc.stdout + proc.stderr


def write_child_project(root, folder, jars_cache: str, models: dict[str, str]) -> None:
    """The parent's models as a dbt project of the child's, with its own catalog folder."""
    os.makedirs(root / "models")
    for name, sql in models.items():
        (root / "models" / f"{name}.sql").write_text(sql)
    (root / "dbt_project.yml").write_text(
        # The parent's project name: the same node ids, so a run sees the child's commits
        # as an earlier run of its own node.
        "name: test\nversion: '1.0'\nconfig-version: 2\nprofile: crash\n"
    )
    (root / "profiles.yml").write_text(
        "crash:\n  target: dev\n  outputs:\n    dev:\n      type: fenced_spark\n"
        f"      method: session\n      schema: analytics\n      folder: {folder}\n"
        f"      jars_cache: {jars_cache}\n      threads: 1\n"
    )


@pytest.mark.skip_profile("thrift", reason="kills the process that runs the embedded JVM")
class TestCrash:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS, "events.sql": EVENTS}

    @pytest.fixture(scope="class")
    def child_project(self, tmp_path_factory, jars_cache):
        """The same models as a dbt project of the child's, with its own catalog folder."""
        root = tmp_path_factory.mktemp("crash")
        folder = root / "lakehouse"
        write_child_project(root, folder, jars_cache, {"orders": ORDERS, "events": EVENTS})
        return root, folder

    def test_sigkill_at_every_step_loses_nothing(
        self, project, spark, child_project, tmp_path, reliability_records
    ):
        root, folder = child_project
        schema = project.test_schema
        locations = {}
        for model in ("orders", "events"):
            location = str(tmp_path / f"{model}_delta")
            locations[model] = location
            spark.sql(
                f"create table {schema}.{model} (id bigint, status string, amount bigint) "
                f"using delta location '{location}'"
            )
            values = ", ".join(f"({i}, '{s}', {a})" for i, s, a in SEED_ROWS)
            spark.sql(f"insert into {schema}.{model} values {values}")

        rng = random.Random(SEED)
        trials: list[Trial] = []
        for number in range(TRIALS):
            phase = PHASES[number % len(PHASES)]
            model = ("orders", "events")[number % 2]
            mode = "race" if phase == "revert" else rng.choice(["plain", "race"])
            trial = Trial(number, model, mode, phase, int(rng.uniform(0, SPREAD[phase]) * 1000))
            trials.append(trial)
            self.crash_and_recover(project, spark, root, folder, locations, trial)
            print(json.dumps(asdict(trial)))

        with open(os.path.join(reliability_records, "crash.json"), "w") as f:
            json.dump({"seed": SEED, "trials": [asdict(t) for t in trials]}, f, indent=1)
        # The kills really landed in every step, not all before or after the fence.
        died_in = {t.last_step for t in trials if t.killed}
        assert set(PHASES) <= died_in, f"kills landed only in {sorted(died_in)}"

    def crash_and_recover(self, project, spark, root, folder, locations, trial: Trial) -> None:
        table = f"{project.test_schema}.{trial.model}"
        batch = trial.number + 1
        before = rows(spark, f"select * from {table} order by id")
        before_version = history(spark, table)[-1].version
        started = time.monotonic()

        dbt_args = ["run", "--select", trial.model, "--vars", json.dumps({"batch": batch})]
        code, steps, output = run_child(
            [
                sys.executable,
                "-m",
                "tests.functional.crash_child",
                str(root),
                str(folder),
                f"analytics.{trial.model}",
                locations[trial.model],
                trial.mode,
                trial.phase,
                str(trial.delay_ms),
                json.dumps(dbt_args),
            ]
        )
        trial.killed = code == -signal.SIGKILL
        trial.last_step = steps[-1] if steps else "(none)"
        trial.raced = "raced" in steps
        # Not killed: the step ended before the timer, and the run finished. A raced run then
        # ends with the fence's refusal (exit 1), its write reverted.
        refused = trial.raced and code == 1 and "refused" in output
        assert trial.killed or code == 0 or refused, output

        # The table reads at its latest version: what a reader sees is what the log says.
        latest = history(spark, table)[-1].version
        now = rows(spark, f"select * from {table} order by id")
        assert now == rows(spark, f"select * from {table} version as of {latest} order by id")
        base = apply_race(before) if trial.raced else before
        applied = apply_batch(trial.model, base, batch)
        assert now in (base, applied), f"trial {trial}: a partial batch\n{now}"
        trial.state_after_kill = "batch applied" if now == applied and now != base else "before"
        if trial.raced:
            foreign = [e for e in history(spark, table) if e.version > before_version]
            assert foreign and foreign[0].operation == "UPDATE" and foreign[0].tag is None

        # A raced write that committed and was not reverted before the kill is a lost update
        # unless someone looks: the next run refuses, naming it and the RESTORE that undoes it.
        # `events` may also go on: the race changes only a status and its watermark reads
        # only amounts, so its write over the race is a serial result, which blocks nobody
        # where the fence can tell (docs/errors.md E213); the batch must then be whole, once.
        dbt_args = ["run", "--select", trial.model, "--vars", json.dumps({"batch": batch})]
        since = [e for e in history(spark, table) if e.version > before_version]
        writes, reverts = ours(since), ours(since, "revert")
        went_on = None
        if trial.raced and writes and not reverts:
            serial = trial.model == "events"
            results = run_dbt(dbt_args, expect_pass=None if serial else False)
            [result] = results.results
            if serial and result.status == "success":
                trial.next_run, went_on = "over a serial result: ", results
            else:
                message = result.message
                restore = f"RESTORE TABLE {table} TO VERSION AS OF {writes[-1].version - 1}"
                assert f"its commit: v{writes[-1].version} " in message and restore in message
                spark.sql(restore)  # as the message says, the user undoes it
                latest = history(spark, table)[-1].version
                trial.next_run = "refused (unresolved), restored: "
        # The next run: ours alone, and it converges on the batch.
        results = went_on or run_dbt(dbt_args)
        response = results.results[0].adapter_response
        trial.next_run += response["fence_outcome"]
        assert rows(spark, f"select * from {table} order by id") == applied
        entries = [e for e in history(spark, table) if e.version > latest]
        tagged = [e for e in entries if e.tag]
        assert all(e.tag["invocation_id"] == self.invocation_id(project) for e in tagged)
        assert [e for e in entries if not e.tag] == []
        trial.seconds = round(time.monotonic() - started, 1)

    @staticmethod
    def invocation_id(project) -> str:
        with open(f"{project.project_root}/target/run_results.json") as f:
            return json.load(f)["metadata"]["invocation_id"]
