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

SOAK_TRIALS (default 12) and SOAK_SEED (default 11); `make reliability` runs the long soak.
Figures go to soak.json in the records folder (RELIABILITY_RECORDS: `make reliability` sets
.cache/reliability, for docs/reliability.md; a plain pytest run writes under its temp folder).
"""

import json
import os
import random
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest
from dbt.tests.util import run_dbt

from tests.functional.lakehouse import ForeignAt

TRIALS = int(os.environ.get("SOAK_TRIALS", "12"))
SEED = int(os.environ.get("SOAK_SEED", "11"))
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
State = dict[int, Row]


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
        for i in range(high + 1, p["hi"] + 1):
            assert i not in new, f"{entry}: the append would duplicate id {i}"
            new[i] = row(i, 0)
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


# The model's SQL lists the columns foreign ALTERs added before the run started; one that
# lands during the run leaves the target with a column the model does not produce, and
# Delta's MERGE refuses that before it commits. Allowed only where that ALTER raced the run.
# With fence_retries, the attempt that read the new column is the last, after the refused ones.
NEW_COLUMN = re.compile(
    r"failed; (?:nothing was written|the write of its last attempt was never written, and "
    r"nothing of the earlier attempts stands)\.[\s\S]*?(?:Delta|Spark) said:\s+\[[A-Z_.]+\] "
    r"Cannot resolve (x\d+)"
)


def claim(message: str) -> dict[str, Any]:
    """The outcome a failed run reports, and the versions it names."""
    if UNRESOLVED in message:
        return {"outcome": "unresolved"}
    column = NEW_COLUMN.search(message)
    if column:
        return {"outcome": "new_column_raced", "column": column.group(1)}
    changed, write = CHANGED.search(message), WRITE.search(message)
    if not changed or not write:
        return {"outcome": "error"}
    attempts = ATTEMPTS.search(message)
    found: dict[str, Any] = {
        "attempts": int(attempts.group(1)) if attempts else 1,
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


@pytest.mark.skip_profile("thrift", reason="the foreign writers are sessions of the test's JVM")
class TestSoak:
    @pytest.fixture(scope="class")
    def models(self):
        return {f"{name}.sql": sql for name, sql in MODELS.items()}

    def test_randomized_races_match_the_ledger(
        self, project, spark, reliability_records, monkeypatch
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
            self.trial(project, spark, fenced, foreign, rng.uniform(0, 1.0), extra, monkeypatch)
        seconds = time.monotonic() - started

        summary: dict[str, Any] = {"seed": SEED, "trials": TRIALS, "seconds": round(seconds)}
        landed_inside = 0
        for table in MODELS:
            check = self.check(spark, f"{schema}.{table}", table, start, initial, ledger)
            landed_inside += check["foreign_inside_fenced_window"]
            summary[table] = check
        summary |= self.counts(ledger)
        summary["foreign_inside_fenced_window"] = landed_inside
        with open(os.path.join(reliability_records, "soak.json"), "w") as f:
            json.dump({"summary": summary, "ledger": [asdict(e) for e in ledger]}, f, indent=1)
        print(json.dumps(summary, indent=1))
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
            session.conf.set(USER_METADATA, json.dumps({"soak_op": foreign.number}))
            foreign.error = ""
            try:
                session.sql(foreign_sql(foreign, table))
                foreign.ok = True
                if foreign.kind == "ALTER":
                    extra[fenced.table].append(foreign.params["column"])
            except Exception as exc:
                foreign.error = engine_error(exc)

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

    # The check --------------------------------------------------------------------------

    def check(self, spark, table, name, start, initial, ledger) -> dict[str, Any]:
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
        for row in history:
            tag = json.loads(row.userMetadata) if row.userMetadata else {}
            tags[row.version] = tag
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
                restored = int(row.operationParameters["version"])
                states[row.version] = states[restored]
                holds[row.version] = holds[restored]
            elif tag.get("step") == "write":
                entry = invocations[(tag["invocation_id"], name)]
                entry.params["attempts"] = max(entry.params.get("attempts", 1), tag["attempt"])
                read = states[int(tag["read_version"])]
                states[row.version] = replay_fenced(entry, read, before, columns)
            else:
                raise AssertionError(f"{table} v{row.version} {row.operation}: in no ledger entry")
            assert entry.table == name
            commits.setdefault(entry.number, []).append(row.version)
            entry.versions = commits[entry.number]
        final = holds[max(holds)]

        ids = spark.sql(f"select count(*) as n, count(distinct id) as d from {table}").first()
        assert ids.n == ids.d, f"{table}: duplicate ids"
        actual = self.read(spark, table)
        expected = states[max(states)]
        assert sorted(actual) == sorted(expected), f"{table}: rows differ from the ledger's replay"
        for i, r in expected.items():
            assert actual[i] == r, f"{table} id {i}: {actual[i]} != ledger's {r}"

        inside = 0
        left_standing = False
        for entry in ledger:
            if entry.table != name:
                continue
            mine = commits.get(entry.number, [])
            if entry.who == "foreign":
                assert len(mine) <= 1, f"{entry}: committed more than once"
                if entry.ok and not mine and entry.kind != "OPTIMIZE":
                    # Delta commits nothing for a statement that matched no row: then it must
                    # have been a no-op on some version it could have read.
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
                if entry.outcome == "unresolved":
                    assert left_standing, f"{entry}: refused an earlier run that left nothing"
                self.check_claim(entry, by_number[entry.number + 1], mine, tags, history, final)
                left_standing |= entry.outcome == "written_not_reverted"
        return {
            "commits": len(history),
            "rows": len(actual),
            "ledger_check": "ok",
            "foreign_inside_fenced_window": inside,
        }

    @staticmethod
    def raced(run: Entry, version: int, tags: dict[int, dict[str, Any]]) -> bool:
        """A foreign commit raced the run if it landed after the run's (first) vB and before
        dbt returned."""
        reads = [tags[v]["read_version"] for v in run.versions if "read_version" in tags[v]]
        if run.params.get("read_version") is not None:
            reads.append(run.params["read_version"])
        low = min(reads, default=run.params["window"][0])
        return low < version <= run.params["window"][1]

    def check_claim(self, entry: Entry, alter: Entry, mine, tags, history, final) -> None:
        """What the run said of its write, checked against the history."""
        writes = [v for v in mine if tags[v].get("step") == "write"]
        standing = [v for v in writes if v in final]
        outcome, p = entry.outcome, entry.params
        if outcome == "committed":
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
            assert mine == [], f"{entry}: failed on a new column, yet committed {mine}"
            assert alter.kind == "ALTER" and alter.params["column"] == p["column"], entry
            low, high = p["window"]
            assert alter.versions and low < alter.versions[0] <= high, (
                f"{entry}: failed on column {p['column']}, whose ALTER did not race it"
            )
        elif outcome == "unresolved":
            assert mine == [], f"{entry}: refused an unresolved run, yet committed {mine}"
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
    def conflict(entry: Entry) -> bool:
        return "DELTA_CONCURRENT" in entry.error or "Concurrent" in entry.error

    def counts(self, ledger: list[Entry]) -> dict[str, Any]:
        fenced = [e for e in ledger if e.who == "dbt"]
        foreign = [e for e in ledger if e.who == "foreign"]
        refused = ("never_written", "written_and_reverted", "written_not_reverted")
        return {
            "fenced_runs": len(fenced),
            "fenced_committed": sum(e.outcome == "committed" for e in fenced),
            "fenced_no_change": sum(e.outcome == "no_change" for e in fenced),
            "fence_failures": sum(e.outcome in refused for e in fenced),
            "reverted": sum(e.outcome == "written_and_reverted" for e in fenced),
            "not_reverted": sum(e.outcome == "written_not_reverted" for e in fenced),
            "unresolved": sum(e.outcome == "unresolved" for e in fenced),
            "other_failures": sum(e.outcome == "error" for e in fenced),
            "retries": sum(e.params.get("attempts", 1) - 1 for e in fenced),
            "foreign_ops": len(foreign),
            "foreign_committed": sum(e.ok for e in foreign),
            "foreign_failed_on_delta_conflict": sum(not e.ok and self.conflict(e) for e in foreign),
            "foreign_failed_other": sum(not e.ok and not self.conflict(e) for e in foreign),
            "foreign_by_kind": {k: sum(e.kind == k for e in foreign) for k in FOREIGN_KINDS},
        }

    @staticmethod
    def latest(spark, table: str) -> int:
        return spark.sql(f"describe history {table} limit 1").first().version

    @staticmethod
    def read(spark, table: str) -> State:
        return {r["id"]: r.asDict() for r in spark.sql(f"select * from {table}").collect()}
