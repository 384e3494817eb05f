"""Kill a driver: one `dbt run` process (A, its own JVM) of a fenced model is SIGKILLed, with
its JVM, at a chosen fence step, while another driver (B, a lone "notebook" driver) commits to
the same table on HDFS. Then a fresh `dbt run` of the model (the next run) says what stands.

A is tests/functional/crash_child.py on the profile's own session: it stops at a gate (a fence
step) until B's commit has landed, read back from B's own DESCRIBE HISTORY, then goes on and
dies in the step the scenario names. Every table is created at v0 and touched by its scenario
alone, so vB is 0 and B's commit lands at v1 (before A's write) or v2 (right after it).

What the next run found is read from the history (by the tags), and its report must be true of
it: nothing of A's in the table, or A's commit holding, or A's own RESTORE having taken its
write back -> the next run builds on the head and its line says so (`read vN -> ...`); A's
stale write standing -> the next run refuses (E213), naming that commit, B's commit below it
and the RESTORE that undoes it; the test runs that RESTORE, as the message says, and the run
after it converges. In every case B's change is in the final table and every row is there
exactly once.

Cost: each scenario starts 4 driver JVMs (A, B, the next run, a reader), 6 when the next run
refuses (a RESTORE's driver, one more run); at most 2 are alive at once (A waits while B runs).
Measured on this 2-core machine under a load of 7-14 (other test runs): 2-5 minutes per
scenario where A wrote nothing or its write holds, 7-9 minutes where the next run refuses, plus
1.5-3 minutes for the lakehouse and the tables; all 7 scenarios about 47 minutes. `-k` picks a few.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass

import pytest

from tests.harness.hdfs import REPO, child_env
from tests.twodrivers.drivers import DbtProject, DbtRun, HistoryEntry, history

# A counter that reads {{ this }}: batch b adds b to id 1 once (last_batch says which batches
# are in) and inserts id 100 + b. B adds 1000 to id 1: a write computed from v0 that stood
# over B's commit would lose it.
MERGE = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
{% set batch = var('batch') | int %}
select id, amount + {{ batch }} as amount, {{ batch }} as last_batch
from {{ this }} where id = 1 and last_batch < {{ batch }}
union all
select cast({{ 100 + batch }} as bigint), cast({{ batch }} as bigint), cast({{ batch }} as bigint)
"""
MERGE_SEED = "select * from values (1L, 0L, 0L), (2L, 0L, 0L) as t(id, amount, last_batch)"
MERGE_B = "update {t} set amount = amount + 1000 where id = 1"
MERGE_FINAL = [(1, 1001, 1), (2, 0, 0), (101, 1, 1)]

# The watermark append (strict): batches above max(amount) are appended. B appends a late row
# (amount 0, under the watermark): a data change, which append_if_unchanged refuses to build on.
APPEND = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged') }}
select cast(b * 10 + k as bigint) as id, cast(b as bigint) as amount, 'a' as writer
from (select explode(sequence(1, {{ var('batch') }})) as b)
cross join (select explode(array(1, 2)) as k)
where b > (select coalesce(max(amount), 0) from {{ this }})
"""
APPEND_SEED = "select * from values (1L, 0L, 'seed') as t(id, amount, writer)"
APPEND_B = "insert into {t} values (9001, 0, 'b')"
APPEND_FINAL = [(1, 0, "seed"), (11, 1, "a"), (12, 1, "a"), (9001, 0, "b")]

KIND = {
    "merge": (MERGE, MERGE_SEED, MERGE_B, "UPDATE", MERGE_FINAL),
    "append": (APPEND, APPEND_SEED, APPEND_B, "WRITE", APPEND_FINAL),
}

# What the next run can find of the killed run, read from the history.
NOTHING = "nothing of A's"  # A died before its write committed
STALE = "A's stale write stands"  # committed over B's commit, never checked: E213
REVERTED = "A's write reverted by A"  # A's RESTORE landed before the kill
HOLDS = "A's write holds"  # committed right on vB, B's commit after it


@dataclass(frozen=True)
class Scenario:
    id: str
    kind: str
    gate: str  # the step at which A waits for B's commit
    kill: str  # the step A dies in
    kill_ms: int  # after entering it; -1: at once, the step never runs
    found: tuple[str, ...]  # what the next run may find: more than one where timing decides


SCENARIOS = [
    # Captured vB, nothing written: B's commit is simply the new head.
    Scenario("merge-after-capture", "merge", "stage", "stage", -1, (NOTHING,)),
    # Pre-checked clean at v0, then B commits; A dies before its MERGE is sent.
    Scenario("merge-before-write", "merge", "prechecked", "prechecked", -1, (NOTHING,)),
    # The MERGE (which reads B's v1, not vB) runs; whether it commits before the kill is
    # timing. 300 ms: well inside a MERGE on HDFS here (seconds), so the kill lands in it.
    Scenario("merge-during-write", "merge", "prechecked", "write", 300, (NOTHING, STALE)),
    # The MERGE committed over B's commit; A dies before verifying it.
    Scenario("merge-after-write", "merge", "prechecked", "verify", -1, (STALE,)),
    # Verification refused it and A's RESTORE is under way when A dies.
    Scenario("merge-during-revert", "merge", "prechecked", "revert", 200, (STALE, REVERTED)),
    # The strict append: committed at v2 after B's v1 (its snapshot read v1), never checked.
    Scenario("append-after-write", "append", "prechecked", "verify", -1, (STALE,)),
    # The strict append committed at v1 = vB + 1; B commits after it; A dies unverified.
    Scenario("append-holds", "append", "verify", "verify", -1, (HOLDS,)),
]

LINE = re.compile(r"fenced (\S+) into (.+?): read v(\d+)(?:, no change| -> committed v(\d+))")


class KilledRun(DbtRun):
    """A's `dbt run` of one model in crash_child (its own process and JVM, in a session of its
    own), gated at `gate` until `gate_file` exists and SIGKILLed, process group and all, in
    `kill` after `kill_ms`."""

    def __init__(self, project: DbtProject, name: str, scenario: Scenario, batch: int) -> None:
        self.project = project
        self.name = name
        self.folder = project.root / "runs" / f"{name}-{uuid.uuid4().hex[:6]}"
        self.folder.mkdir(parents=True)
        self.gate_file = self.folder / "gate"
        dbt_args = [
            *("run", "--select", scenario.id.replace("-", "_")),
            *("--target", name, "--vars", json.dumps({"batch": batch})),
            *("--target-path", str(self.folder / "target")),
            *("--log-path", str(self.folder / "logs")),
        ]
        command = [
            *(sys.executable, "-m", "tests.functional.crash_child", str(project.root), "-"),
            *("-", "-", f"gate:{scenario.gate}:{self.gate_file}"),
            *(scenario.kill, str(scenario.kill_ms), json.dumps(dbt_args)),
        ]
        env = child_env(PYTHONUNBUFFERED="1")
        with open(self.folder / "output.txt", "w") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=env,
                start_new_session=True,
            )

    def steps(self) -> list[str]:
        return [line.split()[1] for line in self.output.splitlines() if line.startswith("STEP ")]

    def wait_at_gate(self, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while "gated" not in self.steps():
            assert self.process.poll() is None, f"A ended before its gate:\n{self.output[-4000:]}"
            assert time.monotonic() < deadline, f"A not at its gate:\n{self.output[-4000:]}"
            time.sleep(0.5)

    def kill(self) -> None:
        # Its process group (this process and its JVM): it was started in a session of its own.
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@pytest.fixture(scope="module")
def kills(tmp_path_factory, shared_lakehouse):
    """One project with a model per scenario, each on a table of its own created at v0 (one
    lone driver for all of them)."""
    models = {f"{s.id.replace('-', '_')}.sql": KIND[s.kind][0] for s in SCENARIOS}
    project = DbtProject(tmp_path_factory.mktemp("kills"), shared_lakehouse, models)
    project.target("killed")
    project.target("next")
    shared_lakehouse.sql(
        [f"create schema {project.schema}"]
        + [
            f"create table {project.table(s.id.replace('-', '_'))} using delta as "
            + KIND[s.kind][1]
            for s in SCENARIOS
        ],
        name="setup",
    )
    return project


def report_line(run: DbtRun) -> tuple[int, int | None]:
    """(read version, committed version or None) of the run's fence line."""
    [found] = LINE.findall(run.output)
    return int(found[2]), int(found[3]) if found[3] else None


def tagged(entries: list[HistoryEntry], invocation: str) -> list[HistoryEntry]:
    return [e for e in entries if e.tag and e.tag.get("invocation_id") == invocation]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_kill_while_another_driver_commits(kills: DbtProject, scenario: Scenario):
    project, lakehouse = kills, kills.lakehouse
    model = scenario.id.replace("-", "_")
    table = project.table(model)
    _, _, b_sql, b_operation, final = KIND[scenario.kind]

    a = KilledRun(project, "killed", scenario, batch=1)
    try:
        a.wait_at_gate()
        # B, a lone notebook driver, commits while A waits at its gate, and reads it back.
        _, b_history = lakehouse.sql(
            [b_sql.format(t=table), f"describe history {table}"], name="notebook"
        )
        a.gate_file.touch()
        code = a.process.wait(timeout=900)
    finally:
        a.kill()
    # The gate's own line is not a step: A dies in the step it entered (gated there or later).
    steps = [s for s in a.steps() if s != "gated"]
    assert code == -signal.SIGKILL, f"A was not killed ({code}):\n{a.output[-4000:]}"
    # It died inside the step the scenario names, not before it nor after it ended.
    assert steps[-1] == scenario.kill, steps

    # B's commit landed where intended: right after vB (v0) while A had not written, or right
    # after A's write.
    b_entries = history(b_history)
    b_commit = b_entries[-1]
    assert b_commit.operation == b_operation and b_commit.tag is None, b_entries
    if scenario.gate == "verify":
        assert [e.version for e in b_entries] == [0, 1, 2], b_entries
        assert b_entries[1].tag and b_entries[1].tag["step"] == "write", b_entries
        assert b_entries[1].tag["read_version"] == 0, b_entries
    else:
        assert [e.version for e in b_entries] == [0, 1], b_entries

    node = f"model.twodrivers.{model}"
    runs = [project.start("next", {"batch": 1}, "--select", model)]
    runs[0].wait()
    if runs[0].process.returncode != 0:
        # The next run refused: its message names A's commit and the RESTORE that undoes it.
        message = runs[0].message(model)
        restore = re.search(r"`(RESTORE TABLE \S+ TO VERSION AS OF \d+)`", message)
        assert restore and "an earlier run of this model left a commit" in message, runs[0].output[
            -4000:
        ]
        [before_restore] = lakehouse.sql(
            [f"describe history {table}", restore[1]], name="restorer"
        )[:1]
        before_restore = history(before_restore)
        runs.append(project.run("next", {"batch": 1}, "--select", model))
    else:
        message, before_restore = "", None

    entries, contents = lakehouse.sql(
        [f"describe history {table}", f"select * from {table} order by id"], name="reader"
    )
    entries = history(entries)
    # Nobody else wrote: every commit is the CTAS, B's, the killed run's, the next runs' or
    # the RESTORE the refusal asked for.
    next_ids = {run.invocation_id for run in runs}
    a_commits = [
        e
        for e in entries
        if e.tag and e.tag.get("node") == node and e.tag["invocation_id"] not in next_ids
    ]
    assert b_commit.version in [e.version for e in entries if e.tag is None], entries
    a_writes = [e for e in a_commits if e.tag["step"] == "write"]
    a_reverts = [e for e in a_commits if e.tag["step"] == "revert"]
    found = (
        NOTHING
        if not a_writes
        else REVERTED
        if a_reverts
        else HOLDS
        if a_writes[-1].version == 1
        else STALE
    )
    assert found in scenario.found, (found, entries)

    if found == STALE:
        # The refusal is true of the history: A's commit, what it read, B's commit below it.
        [write] = a_writes
        assert before_restore is not None, f"the next run built on a stale write:\n{entries}"
        assert f"its commit: v{write.version} " in message, message
        # A merge "read" a version; a strict write "followed" it (it had to follow vB directly).
        read_words = ("it read", "it followed")
        assert any(f"{w} v{write.read_version}" in message for w in read_words), message
        assert write.read_version == b_commit.version == 1, entries
        assert f"- v{b_commit.version} {b_operation} " in message, message
        assert restore[1].endswith(f"TO VERSION AS OF {write.version - 1}"), message
        assert [e.version for e in before_restore][-1] == write.version, before_restore
        # The user's RESTORE landed right after A's write, before the next run's write.
        [user_restore] = [e for e in entries if e.operation == "RESTORE" and e.tag is None]
        assert user_restore.version == write.version + 1, entries
    else:
        assert len(runs) == 1, message

    # The last run's line is true of the history: it read the head as it stood, and its write
    # (if any) is the commit right after it, tagged with its run.
    last = runs[-1]
    read, committed = report_line(last)
    mine = tagged(entries, last.invocation_id)
    head_before = max(e.version for e in entries if e not in mine)
    assert read == head_before, (read, entries)
    if committed is None:
        assert mine == [], entries
    else:
        assert [e.version for e in mine] == [committed] == [read + 1], entries
        assert mine[0].tag["read_version"] == read, mine
    if found == HOLDS:
        # A's commit stands under B's: the next run read above both (its batch is in: the rows
        # check below says it added nothing).
        assert read == 2, last.output[-3000:]
    if found == REVERTED:
        [revert] = a_reverts
        assert revert.version == a_writes[-1].version + 1 == read, entries

    # Nothing lost (B's change is there), nothing doubled (every row once, A's batch once).
    assert [tuple(r.values()) for r in contents] == final, contents
