"""A seeded, randomized race soak, checked against a ledger.

Each trial runs one fenced model (merge, append_if_unchanged or replace_where, each on its
own table) while a foreign writer, another session of this JVM, runs one random operation
(UPDATE, DELETE, blind INSERT, MERGE, OPTIMIZE, ALTER TABLE ADD COLUMNS) before the run or at
a random delay after the run captured vB. Every operation goes into a ledger with its
outcome; foreign commits carry their ledger number in `userMetadata`, fenced ones the
fence's tag.

Afterwards each table's Delta history is replayed, version by version, in Python: every
commit must belong to a ledger entry (none appears from nowhere), a fenced write is
recomputed from the version it read, a RESTORE returns to its version. The replayed table
must equal the real one row for row; each successful operation has exactly its commit, and
each failed one left nothing (or, for a fence that could not revert, said so).

Every fenced run's own claim is checked against that history too: committed (its one write
stands), no change, never written, written and reverted (by the RESTORE it names), written and
NOT reverted (its write stands). A run that failed for any other reason fails the soak, and so
does a foreign commit that a RESTORE of ours took out of the table. A foreign commit counts as
raced only if it landed after the run's vB and before dbt returned, and at least one must.

Each fenced run is also judged as a serial result: a write that stands must equal what it
would have written had it read the version right below its own commit (else it was decided on
stale data: a lost update), and the table holds no key twice. Each foreign commit that raced a
run gets a timing (before the pre-check, between the pre-check and the write's snapshot, during
the write, after it), so every RESTORE and every "NOT reverted" is counted with the timing that
produced it.

Fenced against fenced (`test_fenced_writers_match_the_ledger`): K = 2, 4, 8 fenced writers at
once on one table, tests/harness/contention.py's workload (`counter`, a merge that reads the
counter at vB and writes it + 1; `batches`, an append_if_unchanged of the run's own batch),
fence_retries K, each K on tables of its own; no unfenced writer. On the embedded session they
are `contention.fenced_runs` threads, over a server `dbt run` processes. The same ledger replay
checks them, and more is required: every run green, no RESTORE (Delta refuses a fenced write
that another overtook inside its commit), the counter equal to the green runs, every batch once.

SOAK_TRIALS (default 12), SOAK_FENCED_TRIALS (default 1; K cycles 2, 4, 8) and SOAK_SEED
(default 11); `make reliability` runs the long soak. Figures go to soak.json and
soak_fenced.json (over Thrift soak_thrift.json, soak_fenced_thrift.json) in the records folder
(RELIABILITY_RECORDS: `make reliability` sets .cache/reliability, for docs/reliability.md; a
plain pytest run writes under its temp folder).
"""

import json
import os
import random
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest
import yaml
from dbt.tests.util import run_dbt

from tests.functional.lakehouse import ForeignAt, dbt_process, process_output
from tests.harness import contention

TRIALS = int(os.environ.get("SOAK_TRIALS", "12"))
SEED = int(os.environ.get("SOAK_SEED", "11"))
# Fenced against fenced: trial i races FENCED_K[i % 3] writers, each K on tables of its own.
FENCED_TRIALS = int(os.environ.get("SOAK_FENCED_TRIALS", "1"))
FENCED_K = (2, 4, 8)
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
FOREIGN_GROUP = 99

EXTRA = "{% for c in var('extra', []) %}, cast(null as string) as {{ c }}{% endfor %}"
COUNT_AT_VB = "{% if is_incremental() %}(select count(*) from {{ this }}){% else %}0{% endif %}"

MODELS = {
    "soak_merge": f"""
{{{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
            fence_retries=var('retries', 0)) }}}}
select cast(id as bigint) as id, 0 as grp,
       cast({{{{ var('k', 0) }}}} * 1000 + {COUNT_AT_VB} as bigint) as val, 'dbt' as src {EXTRA}
from (select explode(array({{{{ var('ids', '0, 1, 2') }}}})) as id)
""",
    "soak_append": f"""
{{{{ config(materialized='incremental', incremental_strategy='append_if_unchanged',
            fence_retries=var('retries', 0)) }}}}
select cast(id as bigint) as id, 0 as grp,
       cast({{{{ var('k', 0) }}}} * 1000 + {COUNT_AT_VB} as bigint) as val, 'dbt' as src {EXTRA}
from (select explode(sequence(0, {{{{ var('hi', 2) }}}})) as id)
{{% if is_incremental() %}}
where id > (select coalesce(max(id), -1) from {{{{ this }}}} where src = 'dbt')
{{% endif %}}
""",
    "soak_replace": f"""
{{{{ config(materialized='incremental', incremental_strategy='replace_where',
            incremental_predicates=['grp = ' ~ var('grp', 1)],
            fence_retries=var('retries', 0)) }}}}
select cast({{{{ var('grp', 1) }}}} * 1000 + k as bigint) as id, {{{{ var('grp', 1) }}}} as grp,
       cast({{{{ var('k', 0) }}}} * 1000 + {COUNT_AT_VB} as bigint) as val, 'dbt' as src {EXTRA}
from (select explode(sequence(0, 2)) as k)
""",
}
STRATEGY = {
    "soak_merge": "merge",
    "soak_append": "append_if_unchanged",
    "soak_replace": "replace_where",
}
FOREIGN_KINDS = ("UPDATE", "DELETE", "INSERT", "MERGE", "OPTIMIZE", "ALTER")

Row = dict[str, Any]
# Rows by key: the id, or for `batches` (run, id).
State = dict[Any, Row]
# The columns a table's rows are told apart by, where it is not `id`.
KEYS = {"batches": ("run", "id")}


@dataclass
class Entry:
    """One operation of the ledger: what it meant to do, and what became of it."""

    number: int
    who: str
    table: str
    kind: str
    params: dict[str, Any]
    moment: str = ""
    ok: bool = False
    outcome: str = ""
    error: str = ""
    versions: list[int] = field(default_factory=list)


# The replay: each operation's effect on a table state ----------------------------------------


def foreign_sql(entry: Entry, table: str) -> str:
    p = entry.params
    if entry.kind == "UPDATE":
        return f"update {table} set val = val + 1 where id % 3 = {p['r']}"
    if entry.kind == "DELETE":
        return f"delete from {table} where id % 7 = {p['r']}"
    if entry.kind == "INSERT":
        values = ", ".join(f"({i}, {FOREIGN_GROUP}, {entry.number}, 'foreign')" for i in p["ids"])
        return f"insert into {table} (id, grp, val, src) values {values}"
    if entry.kind == "MERGE":
        values = ", ".join(f"({i}, {FOREIGN_GROUP}, {entry.number}, 'foreign')" for i in p["ids"])
        return (
            f"merge into {table} t using (select * from values {values} as s(id, grp, val, src)) s"
            " on t.id = s.id when matched then update set t.val = s.val"
            " when not matched then insert (id, grp, val, src) values (s.id, s.grp, s.val, s.src)"
        )
    if entry.kind == "OPTIMIZE":
        return f"optimize {table}"
    return f"alter table {table} add columns ({p['column']} string)"


def replay_foreign(entry: Entry, state: State, columns: list[str]) -> State:
    p = entry.params
    new = {i: dict(r) for i, r in state.items()}
    if entry.kind == "UPDATE":
        for i, r in new.items():
            if i % 3 == p["r"]:
                r["val"] += 1
    elif entry.kind == "DELETE":
        new = {i: r for i, r in new.items() if i % 7 != p["r"]}
    elif entry.kind in ("INSERT", "MERGE"):
        for i in p["ids"]:
            if i in new and entry.kind == "MERGE":
                new[i]["val"] = entry.number
            else:
                new[i] = blank(columns) | {
                    "id": i,
                    "grp": FOREIGN_GROUP,
                    "val": entry.number,
                    "src": "foreign",
                }
    elif entry.kind == "ALTER":
        columns.append(p["column"])
        for r in new.values():
            r[p["column"]] = None
    return new


def blank(columns: list[str]) -> Row:
    return dict.fromkeys(columns)


def replay_fenced(entry: Entry, read: State, before: State, columns: list[str]) -> State:
    """A fenced write recomputed from the state it read (vB), applied where it committed."""
    p = entry.params
    val = p["k"] * 1000 + len(read)
    new = {i: dict(r) for i, r in before.items()}

    def row(i: int, grp: int) -> Row:
        return blank(columns) | {"id": i, "grp": grp, "val": val, "src": "dbt"}

    if entry.table == "soak_merge":
        for i in p["ids"]:
            new[i] = row(i, 0)
    elif entry.table == "soak_append":
        high = max((i for i, r in read.items() if r["src"] == "dbt"), default=-1)
        # An id already there would be in the table twice: counted from the table itself
        # (check's duplicates), which holds both rows where this state holds one.
        for i in range(high + 1, p["hi"] + 1):
            new[i] = row(i, 0)
    elif entry.table == "counter":
        # contention's counter: the n it read, plus one.
        new[0] = {"id": 0, "n": read[0]["n"] + 1}
    elif entry.table == "batches":
        # contention's batches: the run's batch, unless what it read holds it already.
        if not any(r["run"] == p["run"] for r in read.values()):
            for i in range(contention.BATCH_ROWS):
                new[(p["run"], i)] = {"run": p["run"], "id": i}
    else:
        new = {i: r for i, r in new.items() if r["grp"] != p["grp"]}
        for k in range(3):
            new[p["grp"] * 1000 + k] = row(p["grp"] * 1000 + k, p["grp"])
    return new


# The soak ---------------------------------------------------------------------------------

# What a failed run claims, from its message (the outcome is not in run_results for a failure).
CHANGED = re.compile(r"refused: the table changed after this run read it at version (\d+)")
UNRESOLVED = "refused: an earlier run of this"
WRITE = re.compile(
    r"this run's write: (?:(?P<never>never written)"
    r"|written as v(?P<reverted>\d+), then reverted by RESTORE \(v(?P<restore>\d+)\)"
    r"|written as v(?P<kept>\d+) and NOT reverted)"
)
ATTEMPTS = re.compile(r"attempts: (\d+) \(fence_retries")
READ = re.compile(r"read v(\d+);")
# Which check refused the last attempt: the pre-check, verification, or Delta itself.
DETECTED = re.compile(
    r"detected by: (pre-check|post-write verification|Delta's conflict detection"
    r"|Delta, inside its commit)"
)


# The model's SQL lists the columns foreign ALTERs added before the run started; one that
# lands during the run leaves the target with a column the model does not produce, and
# Delta's MERGE refuses that before it commits. Allowed only where that ALTER raced the run.
# With fence_retries, the attempt that read the new column is the last, after the refused ones.
# Over Thrift Delta's words follow the server's `HiveSQLException: Error running query: ` and
# come twice, the second time after the Java exception's name.
# "Nothing written", said of a run without retries or of the last of its attempts.
NOTHING_WRITTEN = (
    r"failed; (?:nothing was written|the write of its last attempt was never written, and "
    r"nothing of the earlier attempts stands)\."
)
NEW_COLUMN = re.compile(
    NOTHING_WRITTEN + r"[\s\S]*?(?:Delta|Spark) said:\s+"
    r"(?:\S+: Error running query: )?\[[A-Z_.]+\] (?:\S+: \[[A-Z_.]+\] )?Cannot resolve (x\d+)"
)
# The same raced ALTER landing between the MERGE's analysis and its commit: Delta refuses the
# statement (nothing written) with DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS, which the fence does not
# count among Delta's conflicts (fence/state.py): it says "failed; nothing was written" with
# Delta's words, does not retry and names no landed commit. Counted apart (`via`).
SCHEMA_CHANGED = re.compile(
    NOTHING_WRITTEN + r"[\s\S]*?\[DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS\][\s\S]*?"
    r"Latest schema has additional field\(s\): (x\d+)"
)
# A strict INSERT whose target gained the raced column after the fence's last check (or
# before a retry, which recomputes the model's columns as they were): Delta refuses it before it
# commits; the message names no column (check_claim takes the trial's).
ARITY = re.compile(
    NOTHING_WRITTEN + r"[\s\S]*?\[DELTA_INSERT_COLUMN_ARITY_MISMATCH\][\s\S]*?"
    r"not enough data columns"
)


def claim(message: str) -> dict[str, Any]:
    """The outcome a failed run reports, and the versions it names."""
    if UNRESOLVED in message:
        return {"outcome": "unresolved"}
    attempts = ATTEMPTS.search(message)
    tried = int(attempts.group(1)) if attempts else 1
    column = NEW_COLUMN.search(message)
    if column:
        return {"outcome": "new_column_raced", "column": column.group(1), "attempts": tried}
    column = SCHEMA_CHANGED.search(message)
    if column:
        return {
            "outcome": "new_column_raced",
            "column": column.group(1),
            "via": "DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS",
            "attempts": tried,
        }
    if ARITY.search(message):
        return {
            "outcome": "new_column_raced",
            "column": None,
            "via": "DELTA_INSERT_COLUMN_ARITY_MISMATCH",
            "attempts": tried,
        }
    changed, write = CHANGED.search(message), WRITE.search(message)
    if not changed or not write:
        return {"outcome": "error"}
    detected = DETECTED.search(message)
    found: dict[str, Any] = {
        "attempts": tried,
        "detected": detected.group(1) if detected else "other",
        # The first attempt's vB: a foreign commit after it raced this run.
        "read_version": min(int(v) for v in [changed.group(1), *READ.findall(message)]),
    }
    if write.group("never"):
        return found | {"outcome": "never_written"}
    if write.group("reverted"):
        return found | {
            "outcome": "written_and_reverted",
            "write": int(write.group("reverted")),
            "restore": int(write.group("restore")),
        }
    return found | {"outcome": "written_not_reverted", "write": int(write.group("kept"))}


def engine_error(exc: BaseException) -> str:
    """The error's condition (DELTA_CONCURRENT_...) and its first words: PySpark's first line
    is only `An error occurred while calling o611.sql.`"""
    condition = getattr(exc, "getCondition", lambda: None)() or type(exc).__name__
    words = " ".join(str(exc).split())
    return f"{condition}: {words}"[:500]


def as_dict(row: Any) -> Row:
    """A row as column name to value: a pyspark Row, or a Thrift client's namedtuple."""
    return row.asDict() if hasattr(row, "asDict") else row._asdict()


def restored_version(row: Any) -> int:
    """The version a RESTORE went back to (a Thrift client hands the parameters as JSON)."""
    parameters = row.operationParameters
    if isinstance(parameters, str):
        parameters = json.loads(parameters)
    return int(parameters["version"])


def key_of(row: Row, key: tuple[str, ...]) -> Any:
    return row[key[0]] if len(key) == 1 else tuple(row[k] for k in key)


REFUSED = ("never_written", "written_and_reverted", "written_not_reverted")


def kind_counts(entries: list[Entry], checks: list[dict[str, Any]]) -> dict[str, Any]:
    """One trial kind's figures: its runs (a run that writes two tables is one run), what
    became of them, and what the ledger check of its tables found."""
    runs: dict[Any, list[Entry]] = {}
    for e in entries:
        if e.who == "dbt":
            runs.setdefault(e.params.get("run", e.number), []).append(e)
    writes = [e for group in runs.values() for e in group]
    return {
        "runs": len(runs),
        "green": sum(all(e.ok for e in group) for group in runs.values()),
        "refused": sum(any(e.outcome in REFUSED for e in group) for group in runs.values()),
        "red_otherwise": sum(
            any(not e.ok and e.outcome not in REFUSED for e in group) for group in runs.values()
        ),
        "retried": sum(e.params.get("attempts", 1) - 1 for e in writes),
        "max_attempts": max((e.params.get("attempts", 1) for e in writes), default=0),
        "restores": sum(len(e.params.get("restores", [])) for e in writes),
        "not_reverted": sum(e.outcome == "written_not_reverted" for e in writes),
        "lost": sum(c.get("lost", 0) for c in checks),
        "duplicated": sum(c.get("duplicated", 0) for c in checks),
    }


@pytest.mark.skip_profile(
    "connect",
    reason="not run over Connect: the server profile the soak runs on is Thrift (make "
    "reliability); test_server_races.py and test_contention.py race over Connect",
)
class Soak:
    """The ledger check, shared by both kinds of trial."""

    def check(self, spark, table, name, start, initial, ledger) -> dict[str, Any]:
        """Replay `table`'s history from the ledger and compare; the figures it found (lost,
        duplicated, phantom rows, stale writes), `ledger_check` "ok" or what differs, and
        `claims` "ok" or the first claim of a run that its history contradicts."""
        key = KEYS.get(name, ("id",))
        history = spark.sql(f"describe history {table}").collect()
        history = sorted((r for r in history if r.version > start[name]), key=lambda r: r.version)
        columns = ["id", "grp", "val", "src"]
        states = {start[name]: initial[name]}
        # The commits whose change is in the table at each version: a RESTORE to v brings back
        # exactly v's, so a foreign commit a RESTORE of ours took out shows here.
        holds: dict[int, frozenset[int]] = {start[name]: frozenset()}
        by_number = {e.number: e for e in ledger}
        invocations = self.invocations(ledger)
        commits: dict[int, list[int]] = {}
        tags: dict[int, dict[str, Any]] = {}
        # Each commit's readVersion: the snapshot the write's transaction started from.
        snapshots: dict[int, int | None] = {}
        # Fenced writes whose result differs from what they would have written had they read
        # the version right below their own commit: decided on stale data.
        stale: set[int] = set()
        for row in history:
            tag = json.loads(row.userMetadata) if row.userMetadata else {}
            tags[row.version] = tag
            snapshots[row.version] = row.readVersion
            before = states[row.version - 1]
            holds[row.version] = holds[row.version - 1] | {row.version}
            if "soak_op" in tag:
                entry = by_number[tag["soak_op"]]
                states[row.version] = replay_foreign(entry, before, columns)
            elif row.operation == "RESTORE":
                assert tag.get("step") in ("revert", "revert_undo"), (
                    f"{table} v{row.version}: a foreign RESTORE"
                )
                entry = invocations[(tag["invocation_id"], name)]
                restored = restored_version(row)
                states[row.version] = states[restored]
                holds[row.version] = holds[restored]
            elif tag.get("step") == "write":
                entry = invocations[(tag["invocation_id"], name)]
                entry.params["attempts"] = max(entry.params.get("attempts", 1), tag["attempt"])
                read = states[int(tag["read_version"])]
                states[row.version] = replay_fenced(entry, read, before, columns)
                if replay_fenced(entry, before, before, columns) != states[row.version]:
                    stale.add(row.version)
            else:
                raise AssertionError(f"{table} v{row.version} {row.operation}: in no ledger entry")
            assert entry.table == name
            commits.setdefault(entry.number, []).append(row.version)
            entry.versions = commits[entry.number]
        final = holds[max(holds)]

        counted = spark.sql(
            f"select count(*) as n, count(distinct {', '.join(key)}) as d from {table}"
        ).collect()[0]
        actual = self.read(spark, table, key)
        expected = states[max(states)]
        stale_standing = sorted(stale & final)
        found: dict[str, Any] = {
            "commits": len(history),
            "rows": len(actual),
            # A row the replay holds that the table lacks or holds otherwise, and a write left
            # standing that was decided on stale data (a lost update).
            "lost": sum(actual.get(k) != r for k, r in expected.items()) + len(stale_standing),
            "duplicated": counted.n - counted.d,
            "phantom": sum(k not in expected for k in actual),
            "stale_writes": stale_standing,
            "restores": sum(r.operation == "RESTORE" for r in history),
        }
        differs = [k for k in set(expected) | set(actual) if actual.get(k) != expected.get(k)]
        found["ledger_check"] = (
            "ok"
            if not (differs or found["duplicated"] or stale_standing)
            else f"differs at {sorted(map(str, differs))[:5]}, {found['duplicated']} duplicated, "
            f"stale writes {stale_standing}"
        )

        inside = 0
        left_standing = False
        try:
            for entry in ledger:
                if entry.table != name:
                    continue
                mine = commits.get(entry.number, [])
                if entry.who == "foreign":
                    assert len(mine) <= 1, f"{entry}: committed more than once"
                    if entry.ok and not mine and entry.kind != "OPTIMIZE":
                        # Delta commits nothing for a statement that matched no row: then it
                        # must have been a no-op on some version it could have read.
                        low, high = entry.params["window"]
                        assert any(
                            replay_foreign(entry, states[v], list(columns)) == states[v]
                            for v in range(low, high + 1)
                        ), f"{entry}: succeeded and would change rows, yet made no commit"
                    if not entry.ok:
                        assert mine == [], f"{entry}: failed, yet committed"
                    # Never undoing somebody else's commit: each stands in the final table.
                    assert all(v in final for v in mine), f"{entry}: rolled back by a RESTORE"
                    if mine:
                        run = by_number[entry.number - 1]
                        entry.params["raced"] = self.raced(run, mine[0], tags)
                        inside += entry.params["raced"]
                else:
                    entry.params["restores"] = [
                        v for v in mine if self.operation(history, v) == "RESTORE"
                    ]
                    if entry.outcome == "unresolved":
                        assert left_standing, f"{entry}: refused an earlier run that left nothing"
                    self.check_claim(
                        entry, by_number.get(entry.number + 1), mine, tags, history, final
                    )
                    left_standing |= entry.outcome == "written_not_reverted"
            for entry in ledger:
                foreign = by_number.get(entry.number + 1)
                if entry.table == name and entry.who == "dbt" and foreign and foreign.who != "dbt":
                    entry.params["timing"] = self.timing(entry, foreign, tags, snapshots)
            found["claims"] = "ok"
        except AssertionError as failed:
            found["claims"] = str(failed)[:2000]
        found["foreign_inside_fenced_window"] = inside
        return found

    @staticmethod
    def timing(run: Entry, foreign: Entry, tags, snapshots) -> str:
        """Where the trial's foreign commit landed in the fenced run, from the versions: the
        attempt it raced is the one whose commit came after it."""
        if not foreign.versions:
            return "no foreign commit" if foreign.ok else "no foreign commit (Delta refused it)"
        version = foreign.versions[0]
        reads = [tags[v]["read_version"] for v in run.versions if "read_version" in tags[v]]
        if run.params.get("read_version") is not None:
            reads.append(run.params["read_version"])
        if version <= min(reads, default=run.params["window"][0]):
            return "before vB"
        if version > run.params["window"][1]:
            return "after the run returned"
        writes = sorted(v for v in run.versions if tags[v].get("step") == "write")
        later = [w for w in writes if w > version]
        if not later:
            if writes:
                return "after the run's write committed"
            return "after vB; the run committed nothing after it"
        write = later[0]
        if version <= tags[write]["read_version"]:
            return "after vB; an earlier attempt refused, the retry committed"
        if version in tags[write].get("tolerated", []):
            return "before the write's pre-check (tolerated)"
        snapshot = snapshots[write]
        if snapshot is not None and version <= snapshot:
            return "between the pre-check and the write's snapshot"
        return "during the write (Delta committed the write over it)"

    @staticmethod
    def raced(run: Entry, version: int, tags: dict[int, dict[str, Any]]) -> bool:
        """A foreign commit raced the run if it landed after the run's (first) vB and before
        dbt returned."""
        reads = [tags[v]["read_version"] for v in run.versions if "read_version" in tags[v]]
        if run.params.get("read_version") is not None:
            reads.append(run.params["read_version"])
        low = min(reads, default=run.params["window"][0])
        return low < version <= run.params["window"][1]

    def check_claim(self, entry: Entry, alter: Entry | None, mine, tags, history, final) -> None:
        """What the run said of its write, checked against the history."""
        writes = [v for v in mine if tags[v].get("step") == "write"]
        standing = [v for v in writes if v in final]
        outcome, p = entry.outcome, entry.params
        if outcome == "committed" and p.get("commit_version") is None:
            # A thread of contention.fenced_runs reports no version: its one write stands.
            assert len(standing) == 1, f"{entry}: committed, yet {standing} stand"
        elif outcome == "committed":
            assert standing == [p["commit_version"]], f"{entry}: committed, yet {standing} stand"
        elif outcome == "no_change":
            assert standing == [], f"{entry}: no change, yet {standing} stand"
        elif outcome == "never_written":
            last = [v for v in writes if tags[v]["attempt"] == p["attempts"]]
            assert standing == [] and last == [], f"{entry}: never written, yet wrote {last}"
        elif outcome == "written_and_reverted":
            write, restore = p["write"], p["restore"]
            assert write in writes, f"{entry}: v{write} is no write of this run"
            assert restore in mine and self.operation(history, restore) == "RESTORE", entry
            assert tags[restore]["step"] == "revert", f"{entry}: v{restore} is no revert"
            assert standing == [], f"{entry}: reverted, yet {standing} stand"
        elif outcome == "written_not_reverted":
            assert p["write"] in writes, f"{entry}: v{p['write']} is no write of this run"
            assert standing == [p["write"]], f"{entry}: NOT reverted, yet {standing} stand"
        elif outcome == "new_column_raced":
            # "Nothing of the earlier attempts stands": a retried run's earlier attempt may
            # have written and been reverted (soak trial 226, SOAK_SEED=11); its last wrote
            # nothing, and every write of the run is undone by a RESTORE of its own after it.
            restores = [
                v
                for v in mine
                if tags[v].get("step") == "revert" and self.operation(history, v) == "RESTORE"
            ]
            last = [v for v in writes if tags[v]["attempt"] == p.get("attempts", 1)]
            assert standing == [] and last == [], f"{entry}: failed on a new column, wrote {last}"
            assert sorted(mine) == sorted(writes + restores), f"{entry}: committed {mine}"
            assert all(any(r > w for r in restores) for w in writes), (
                f"{entry}: failed on a new column, yet {writes} not all reverted by {restores}"
            )
            assert alter is not None and alter.kind == "ALTER", entry
            # Delta's arity error names no column: the trial's ALTER is the one.
            assert p["column"] in (None, alter.params["column"]), entry
            low, high = p["window"]
            assert alter.versions and low < alter.versions[0] <= high, (
                f"{entry}: failed on column {p['column']}, whose ALTER did not race it"
            )
        elif outcome in ("unresolved", "not_run"):
            assert mine == [], f"{entry}: {outcome}, yet committed {mine}"
        else:
            assert outcome == "error", entry

    @staticmethod
    def operation(history, version: int) -> str:
        return next(r.operation for r in history if r.version == version)

    @staticmethod
    def invocations(ledger: list[Entry]) -> dict[tuple[str, str], Entry]:
        found = {}
        for entry in ledger:
            if entry.who == "dbt" and entry.params.get("invocation_id"):
                found[(entry.params["invocation_id"], entry.table)] = entry
        return found

    @staticmethod
    def latest(spark, table: str) -> int:
        return spark.sql(f"describe history {table} limit 1").collect()[0].version

    @staticmethod
    def read(spark, table: str, key: tuple[str, ...] = ("id",)) -> State:
        rows = [as_dict(r) for r in spark.sql(f"select * from {table}").collect()]
        return {key_of(r, key): r for r in rows}

    @staticmethod
    def record(folder: str, name: str, profile: str, summary: dict, ledger: list[Entry]) -> None:
        """`<name>.json` (over a server `<name>_<profile>.json`) for docs/reliability.md."""
        suffix = "" if profile == "session" else f"_{profile}"
        content = {"summary": summary, "ledger": [asdict(e) for e in ledger]}
        with open(os.path.join(folder, f"{name}{suffix}.json"), "w") as f:
            json.dump(content, f, indent=1, default=str)
        print(json.dumps(summary, indent=1, default=str))


class TestSoak(Soak):
    @pytest.fixture(scope="class")
    def models(self):
        return {f"{name}.sql": sql for name, sql in MODELS.items()}

    def test_randomized_races_match_the_ledger(
        self, project, spark, reliability_records, monkeypatch, dbt_profile_name
    ):
        schema = project.test_schema
        run_dbt(["run"])
        start = {t: self.latest(spark, f"{schema}.{t}") for t in MODELS}
        initial = {t: self.read(spark, f"{schema}.{t}") for t in MODELS}
        rng = random.Random(SEED)
        ledger: list[Entry] = []
        extra: dict[str, list[str]] = {t: [] for t in MODELS}
        hi = 2
        started = time.monotonic()
        for trial in range(TRIALS):
            table = rng.choice(list(MODELS))
            hi += rng.randint(1, 3)
            fenced = Entry(
                len(ledger),
                "dbt",
                table,
                STRATEGY[table],
                {
                    "k": trial + 1,
                    "ids": sorted(rng.sample(range(0, 12), 3)),
                    "hi": hi,
                    "grp": rng.randint(1, 3),
                    "retries": rng.choice([0, 0, 2]),
                },
            )
            kind = rng.choice(FOREIGN_KINDS)
            foreign = Entry(
                len(ledger) + 1,
                "foreign",
                table,
                kind,
                {
                    "r": rng.randint(0, 2 if kind == "UPDATE" else 6),
                    # A blind INSERT takes new ids (an existing one would be the foreign
                    # writer's own duplicate); MERGE upserts one that may exist.
                    "ids": [1_000_000 + trial * 10, 1_000_001 + trial * 10]
                    if kind == "INSERT"
                    else [1_000_000 + trial * 10, rng.choice([1, 2, 1_000_000])],
                    "column": f"x{trial}",
                },
                moment=rng.choice(["before", "during", "during", "during"]),
            )
            ledger += [fenced, foreign]
            # A fenced run here takes ~1 s from vB to its return: most land inside it.
            delay = rng.uniform(0, 1.0)
            foreign.params["delay"] = round(delay, 3)
            self.trial(project, spark, fenced, foreign, delay, extra, monkeypatch)
        seconds = time.monotonic() - started

        summary: dict[str, Any] = {
            "seed": SEED,
            "trials": TRIALS,
            "seconds": round(seconds),
            "profile": dbt_profile_name,
        }
        landed_inside = 0
        checks = []
        for table in MODELS:
            check = self.check(spark, f"{schema}.{table}", table, start, initial, ledger)
            landed_inside += check["foreign_inside_fenced_window"]
            summary[table] = check
            checks.append(check)
        summary |= self.counts(ledger)
        summary["foreign_inside_fenced_window"] = landed_inside
        summary["kinds"] = {"against an unfenced writer": kind_counts(ledger, checks)}
        summary["timings"] = self.timings(ledger)
        summary["explained"] = self.explained(ledger)
        self.record(reliability_records, "soak", dbt_profile_name, summary, ledger)
        for table in MODELS:
            assert summary[table]["ledger_check"] == "ok", (table, summary[table])
            assert summary[table]["claims"] == "ok", (table, summary[table]["claims"])
        # Every fenced run either did its job or was refused by the fence: a crash, a Delta
        # error let through or a run that never wrote is a failure of the soak, not a count.
        errors = [e for e in ledger if e.who == "dbt" and e.outcome == "error"]
        assert not errors, f"fenced runs that failed for another reason: {errors}"
        # A foreign statement fails only on Delta's own conflict; anything else is a broken
        # test (a bad statement races nothing).
        odd = [e for e in ledger if e.who == "foreign" and not e.ok and not self.conflict(e)]
        assert not odd, f"foreign operations that failed for another reason: {odd}"
        # The soak raced for real: foreign commits landed after a fenced run's vB and before
        # that dbt run returned.
        assert landed_inside > 0

    def trial(self, project, spark, fenced, foreign, delay, extra, monkeypatch) -> None:
        table = f"{project.test_schema}.{fenced.table}"

        def run_foreign() -> None:
            session = spark.newSession()
            foreign.error = ""
            try:
                # SQL, not session.conf: a Thrift client has only SQL.
                session.sql(f"set {USER_METADATA}={json.dumps({'soak_op': foreign.number})}")
                session.sql(foreign_sql(foreign, table)).collect()
                foreign.ok = True
                if foreign.kind == "ALTER":
                    extra[fenced.table].append(foreign.params["column"])
            except Exception as exc:
                foreign.error = engine_error(exc)
            finally:
                if hasattr(session, "close"):  # a Thrift connection of its own
                    session.close()

        foreign.params["window"] = [self.latest(spark, table)]
        if foreign.moment == "before":
            run_foreign()
        else:
            # `delay` after the run captured vB, while it goes on to stage and write.
            writer = ForeignAt(monkeypatch, spark, "vb", [run_foreign], delay=delay)
            foreign.error = "never fired: the run did not reach vB"
        try:
            first = self.latest(spark, table)
            dbt_vars = {
                **fenced.params,
                "ids": ", ".join(map(str, fenced.params["ids"])),
                "extra": list(extra[fenced.table]),
            }
            results = run_dbt(
                ["run", "--select", fenced.table, "--vars", json.dumps(dbt_vars)], expect_pass=None
            )
            # The run's window closes when dbt returns: a commit after this did not race it.
            returned = self.latest(spark, table)
        except BaseException:
            if foreign.moment == "during":
                writer.cancel()  # never left armed to commit into a later trial or test
            raise
        finally:
            if foreign.moment == "during":
                writer.join()  # one that fires after dbt returned still lands, unraced
                monkeypatch.undo()
        fenced.params["window"] = [first, returned]
        foreign.params["window"].append(self.latest(spark, table))
        with open(f"{project.project_root}/target/run_results.json") as f:
            fenced.params["invocation_id"] = json.load(f)["metadata"]["invocation_id"]
        result = results.results[0]
        fenced.ok = result.status == "success"
        if fenced.ok:
            response = result.adapter_response or {}
            fenced.outcome = response.get("fence_outcome") or "error"
            fenced.params["read_version"] = response.get("read_version")
            fenced.params["commit_version"] = response.get("commit_version")
        else:
            fenced.error = (result.message or "")[:2000]
            said = claim(result.message or "")
            fenced.outcome = said.pop("outcome")
            fenced.params |= said

    @staticmethod
    def conflict(entry: Entry) -> bool:
        return "DELTA_CONCURRENT" in entry.error or "Concurrent" in entry.error

    def counts(self, ledger: list[Entry]) -> dict[str, Any]:
        fenced = [e for e in ledger if e.who == "dbt"]
        foreign = [e for e in ledger if e.who == "foreign"]
        return {
            "fenced_runs": len(fenced),
            "fenced_committed": sum(e.outcome == "committed" for e in fenced),
            "fenced_no_change": sum(e.outcome == "no_change" for e in fenced),
            "fence_failures": sum(e.outcome in REFUSED for e in fenced),
            "reverted": sum(e.outcome == "written_and_reverted" for e in fenced),
            "not_reverted": sum(e.outcome == "written_not_reverted" for e in fenced),
            "unresolved": sum(e.outcome == "unresolved" for e in fenced),
            "new_column_raced": sum(e.outcome == "new_column_raced" for e in fenced),
            "new_column_raced_via": {
                via: sum(e.params.get("via") == via for e in fenced)
                for via in (
                    "DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS",
                    "DELTA_INSERT_COLUMN_ARITY_MISMATCH",
                )
            },
            "other_failures": sum(e.outcome == "error" for e in fenced),
            "retries": sum(e.params.get("attempts", 1) - 1 for e in fenced),
            "restores": sum(len(e.params.get("restores", [])) for e in fenced),
            "refused_by": {
                d: sum(e.outcome in REFUSED and e.params.get("detected") == d for e in fenced)
                for d in sorted({e.params.get("detected", "") for e in fenced} - {""})
            },
            "foreign_ops": len(foreign),
            "foreign_committed": sum(e.ok for e in foreign),
            "foreign_failed_on_delta_conflict": sum(not e.ok and self.conflict(e) for e in foreign),
            "foreign_failed_other": sum(not e.ok and not self.conflict(e) for e in foreign),
            "foreign_by_kind": {k: sum(e.kind == k for e in foreign) for k in FOREIGN_KINDS},
        }

    @staticmethod
    def timings(ledger: list[Entry]) -> dict[str, dict[str, int]]:
        """Per timing of the trial's foreign commit: trials, and those whose run needed a
        RESTORE, ended "NOT reverted", was refused, ended green."""
        found: dict[str, dict[str, int]] = {}
        for e in ledger:
            if e.who != "dbt" or "timing" not in e.params:
                continue
            t = found.setdefault(
                e.params["timing"],
                {"trials": 0, "restore": 0, "not_reverted": 0, "refused": 0, "green": 0},
            )
            t["trials"] += 1
            t["restore"] += bool(e.params.get("restores"))
            t["not_reverted"] += e.outcome == "written_not_reverted"
            t["refused"] += e.outcome in REFUSED
            t["green"] += e.ok
        return found

    @staticmethod
    def explained(ledger: list[Entry]) -> list[dict[str, Any]]:
        """Every run that needed a RESTORE or ended "NOT reverted", with the foreign commit of
        its trial and that commit's timing."""
        by_number = {e.number: e for e in ledger}
        found = []
        for e in ledger:
            if e.who != "dbt" or not (e.params.get("restores") or e.outcome == REFUSED[2]):
                continue
            foreign = by_number[e.number + 1]
            found.append(
                {
                    "entry": e.number,
                    "table": e.table,
                    "strategy": e.kind,
                    "outcome": e.outcome,
                    "detected": e.params.get("detected"),
                    "vB": e.params.get("read_version"),
                    "writes": [v for v in e.versions if v not in e.params["restores"]],
                    "restores": e.params["restores"],
                    "foreign": f"{foreign.kind} v{foreign.versions[0]}"
                    if foreign.versions
                    else f"{foreign.kind} (no commit)",
                    "moment": foreign.moment,
                    "delay": foreign.params.get("delay"),
                    "timing": e.params.get("timing"),
                }
            )
        return found


class TestFencedSoak(Soak):
    """K fenced writers at once on one table, checked by the same ledger replay."""

    @pytest.fixture(scope="class")
    def models(self, dbt_profile_name):
        # Over a server the writers are `dbt run` processes of contention's models (re-written
        # with fence_retries K for each trial); on the session, threads drive the fence.
        return contention.models(max(FENCED_K)) if dbt_profile_name != "session" else {}

    def test_fenced_writers_match_the_ledger(
        self, project, spark, reliability_records, dbt_profile_name
    ):
        schemas = {k: f"{project.test_schema}_k{k}" for k in FENCED_K}
        tables = ("counter", "batches")
        start: dict[int, dict[str, int]] = {}
        initial: dict[int, dict[str, State]] = {}
        for k, schema in schemas.items():
            self.contention_tables(spark, schema)
            start[k] = {t: self.latest(spark, f"{schema}.{t}") for t in tables}
            initial[k] = {
                t: self.read(spark, f"{schema}.{t}", KEYS.get(t, ("id",))) for t in tables
            }
        ledger: list[Entry] = []
        codes: dict[int, dict[str, int]] = {k: {} for k in FENCED_K}
        started = time.monotonic()
        seconds_per_k: dict[int, float] = dict.fromkeys(FENCED_K, 0.0)
        try:
            for trial in range(FENCED_TRIALS):
                k = FENCED_K[trial % len(FENCED_K)]
                schema = schemas[k]
                names = contention.run_names(trial, k)
                runs: dict[str, dict[str, Entry]] = {}
                for name in names:
                    runs[name] = {}
                    for table in tables:
                        runs[name][table] = Entry(
                            len(ledger),
                            "dbt",
                            table,
                            "merge" if table == "counter" else "append_if_unchanged",
                            {"run": name, "k": k, "trial": trial, "retries": k},
                        )
                        ledger.append(runs[name][table])
                first = {t: self.latest(spark, f"{schema}.{t}") for t in tables}
                began = time.monotonic()
                if dbt_profile_name == "session":
                    found = self.fenced_threads(spark, schema, runs, k)
                else:
                    found = self.fenced_processes(project, schema, runs, k)
                seconds_per_k[k] += time.monotonic() - began
                codes[k].update(found)
                for table in tables:
                    returned = self.latest(spark, f"{schema}.{table}")
                    for name in names:
                        runs[name][table].params["window"] = [first[table], returned]
        finally:
            seconds = time.monotonic() - started

            summary: dict[str, Any] = {
                "trials": FENCED_TRIALS,
                "trials_per_k": {
                    k: sum(FENCED_K[t % 3] == k for t in range(FENCED_TRIALS)) for k in FENCED_K
                },
                "seconds": round(seconds),
                "seconds_per_k": {k: round(v) for k, v in seconds_per_k.items()},
                "profile": dbt_profile_name,
                "retries": "K (each writer's fence_retries is the number of writers)",
                "kinds": {},
                "tables": {},
                "tallies": {},
            }
            for k, schema in schemas.items():
                mine = [e for e in ledger if e.params["k"] == k]
                checks = []
                for table in tables:
                    check = self.check(
                        spark, f"{schema}.{table}", table, start[k], initial[k], mine
                    )
                    summary["tables"][f"K={k} {table}"] = check
                    checks.append(check)
                summary["kinds"][f"fenced against fenced, K={k}"] = kind_counts(mine, checks)
                tally = contention.tally(contention.dict_rows(spark), schema, codes[k])
                summary["tallies"][f"K={k}"] = {
                    "runs": len(tally.runs),
                    "green": tally.green,
                    "counter": tally.counter,
                    "batches_once": sum(
                        tally.batches.get(n) == contention.BATCH_ROWS for n in tally.runs
                    ),
                    "restores": tally.restores,
                    "problems": tally.problems(),
                }
            self.record(reliability_records, "soak_fenced", dbt_profile_name, summary, ledger)
            for schema in schemas.values():
                spark.sql(f"drop schema if exists {schema} cascade")
        for name, check in summary["tables"].items():
            assert check["ledger_check"] == "ok", (name, check)
            assert check["claims"] == "ok", (name, check["claims"])
        red = [e for e in ledger if not e.ok]
        assert not red, f"fenced runs that did not commit within fence_retries K: {red}"
        # No compensating RESTORE between fenced writers: Delta refused each overtaken write
        # inside its commit. And the table is a serial result: the counter counts every run.
        for k, tally in summary["tallies"].items():
            assert tally["problems"] == [], (k, tally)
        # They raced: some write was refused and retried, which only another writer's commit
        # after its vB can cause.
        assert any(e.params.get("attempts", 1) > 1 for e in ledger)

    @staticmethod
    def contention_tables(spark, schema: str) -> None:
        """contention's two tables as their first `dbt run` leaves them: the counter at 0, the
        batch 'first'."""
        spark.sql(f"create schema if not exists {schema}")
        spark.sql(f"create table {schema}.counter using delta as select 0 as id, 0 as n")
        spark.sql(
            f"create table {schema}.batches using delta as "
            f"select 'first' as run, id from range({contention.BATCH_ROWS})"
        )

    @staticmethod
    def fenced_threads(spark, schema: str, runs: dict[str, dict[str, Entry]], k: int):
        """The runs as contention.fenced_runs threads (counter, then batches), each with a
        session of its own; each run's claim from its exception."""
        codes = contention.fenced_runs(spark, schema, list(runs), k)
        for name, code in codes.items():
            entries = runs[name]
            for entry in entries.values():
                entry.params["invocation_id"] = contention.invocations[name]
            if code == 0:
                for entry in entries.values():
                    entry.ok, entry.outcome = True, "committed"
                continue
            message = str(contention.errors[name])
            failed = "counter" if f"{schema}.counter" in message else "batches"
            said = claim(message)
            entries[failed].outcome = said.pop("outcome")
            entries[failed].params |= said
            entries[failed].error = message[:2000]
            if failed == "counter":
                entries["batches"].outcome = "not_run"  # a thread writes batches after counter
            else:
                entries["counter"].ok, entries["counter"].outcome = True, "committed"
        return codes

    @staticmethod
    def fenced_processes(project, schema: str, runs: dict[str, dict[str, Entry]], k: int):
        """The runs as `dbt run` processes at once (a server's clients), writing `schema`
        through a profile of their own, with fence_retries K; each node's claim from its run
        results."""
        for name, sql in contention.models(k).items():
            with open(os.path.join(project.project_root, "models", name), "w") as f:
                f.write(sql)
        with open(os.path.join(project.profiles_dir, "profiles.yml")) as f:
            profiles = yaml.safe_load(f)
        for profile in profiles.values():
            for output in profile["outputs"].values():
                output["schema"] = schema
        folder = os.path.join(project.project_root, f"profiles_{schema}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "profiles.yml"), "w") as f:
            yaml.safe_dump(profiles, f)
        # The last --profiles-dir is the one dbt reads.
        args = ("--select", "counter", "batches", "--profiles-dir", folder)
        started = {name: dbt_process(project, name, {"run": name}, *args) for name in runs}
        codes = {name: process.wait(timeout=1800) for name, process in started.items()}
        for name, entries in runs.items():
            path = os.path.join(project.project_root, f"target_{name}", "run_results.json")
            if not os.path.exists(path):
                for entry in entries.values():
                    entry.outcome, entry.error = "error", process_output(project, name)[-2000:]
                continue
            with open(path) as f:
                results = json.load(f)
            for result in results["results"]:
                entry = entries[result["unique_id"].rsplit(".", 1)[-1]]
                entry.params["invocation_id"] = results["metadata"]["invocation_id"]
                entry.ok = result["status"] == "success"
                if entry.ok:
                    response = result["adapter_response"] or {}
                    entry.outcome = response.get("fence_outcome") or "error"
                    entry.params["read_version"] = response.get("read_version")
                    entry.params["commit_version"] = response.get("commit_version")
                else:
                    entry.error = (result["message"] or "")[:2000]
                    said = claim(result["message"] or "")
                    entry.outcome = said.pop("outcome")
                    entry.params |= said
        return codes
