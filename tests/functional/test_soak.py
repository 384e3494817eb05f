"""A seeded, randomized race soak, checked against a ledger.

Each trial runs one fenced model (merge, append_if_unchanged or replace_where, each on its
own table) while a foreign writer, another session of this JVM, runs one random operation
(UPDATE, DELETE, blind INSERT, MERGE, OPTIMIZE, ALTER TABLE ADD COLUMNS) before the run or at
a random moment during it. Every operation goes into a ledger with its outcome; foreign
commits carry their ledger number in `userMetadata`, fenced ones the fence's tag.

Afterwards each table's Delta history is replayed, version by version, in Python: every
commit must belong to a ledger entry (none appears from nowhere), a fenced write is
recomputed from the version it read, a RESTORE returns to its version. The replayed table
must equal the real one row for row; each successful operation has exactly its commit, and
each failed one left nothing (or, for a fence that could not revert, said so).

SOAK_TRIALS (default 12) and SOAK_SEED (default 11); `make reliability` runs the long soak.
Figures go to .cache/reliability/soak.json for docs/reliability.md.
"""

import json
import os
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest
from dbt.tests.util import run_dbt

from tests.conftest import REPO

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


@pytest.mark.skip_profile("thrift", reason="the foreign writers are sessions of the test's JVM")
class TestSoak:
    @pytest.fixture(scope="class")
    def models(self):
        return {f"{name}.sql": sql for name, sql in MODELS.items()}

    def test_randomized_races_match_the_ledger(self, project, spark):
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
            self.trial(project, spark, fenced, foreign, rng.uniform(0, 4.0), extra)
        seconds = time.monotonic() - started

        summary: dict[str, Any] = {"seed": SEED, "trials": TRIALS, "seconds": round(seconds)}
        landed_inside = 0
        for table in MODELS:
            check = self.check(spark, f"{schema}.{table}", table, start, initial, ledger)
            landed_inside += check["foreign_inside_fenced_window"]
            summary[table] = check
        summary |= self.counts(ledger)
        summary["foreign_inside_fenced_window"] = landed_inside
        os.makedirs(f"{REPO}/.cache/reliability", exist_ok=True)
        with open(f"{REPO}/.cache/reliability/soak.json", "w") as f:
            json.dump({"summary": summary, "ledger": [asdict(e) for e in ledger]}, f, indent=1)
        print(json.dumps(summary, indent=1))
        # The soak raced for real: foreign commits landed while a fenced run was under way.
        assert landed_inside > 0

    def trial(self, project, spark, fenced: Entry, foreign: Entry, delay: float, extra) -> None:
        table = f"{project.test_schema}.{fenced.table}"

        def run_foreign() -> None:
            session = spark.newSession()
            session.conf.set(USER_METADATA, json.dumps({"soak_op": foreign.number}))
            try:
                session.sql(foreign_sql(foreign, table))
                foreign.ok = True
                if foreign.kind == "ALTER":
                    extra[fenced.table].append(foreign.params["column"])
            except Exception as exc:
                foreign.error = str(exc).strip().splitlines()[0][:300]

        writer = threading.Timer(delay if foreign.moment == "during" else 0, run_foreign)
        foreign.params["window"] = [self.latest(spark, table)]
        writer.start()
        if foreign.moment == "before":
            writer.join()
        first = self.latest(spark, table)
        dbt_vars = {
            **fenced.params,
            "ids": ", ".join(map(str, fenced.params["ids"])),
            "extra": list(extra[fenced.table]),
        }
        results = run_dbt(
            ["run", "--select", fenced.table, "--vars", json.dumps(dbt_vars)], expect_pass=None
        )
        writer.join(300)
        fenced.params["window"] = [first, self.latest(spark, table)]
        foreign.params["window"].append(fenced.params["window"][1])
        with open(f"{project.project_root}/target/run_results.json") as f:
            fenced.params["invocation_id"] = json.load(f)["metadata"]["invocation_id"]
        result = results.results[0]
        fenced.ok = result.status == "success"
        fenced.outcome = (result.adapter_response or {}).get("fence_outcome") or ""
        if not fenced.ok:
            message = result.message or ""
            fenced.error = message[:2000]
            if "NOT reverted" in message:
                fenced.outcome = "written_not_reverted"
            else:
                fenced.outcome = "fence violation" if "refused" in message else "error"

    # The check --------------------------------------------------------------------------

    def check(self, spark, table, name, start, initial, ledger) -> dict[str, Any]:
        history = spark.sql(f"describe history {table}").collect()
        history = sorted((r for r in history if r.version > start[name]), key=lambda r: r.version)
        columns = ["id", "grp", "val", "src"]
        states = {start[name]: initial[name]}
        by_number = {e.number: e for e in ledger}
        invocations = self.invocations(ledger)
        commits: dict[int, list[int]] = {}
        inside = 0
        for row in history:
            tag = json.loads(row.userMetadata) if row.userMetadata else {}
            before = states[row.version - 1]
            if "soak_op" in tag:
                entry = by_number[tag["soak_op"]]
                states[row.version] = replay_foreign(entry, before, columns)
            elif row.operation == "RESTORE":
                assert tag.get("step") == "revert", f"{table} v{row.version}: a foreign RESTORE"
                entry = invocations[(tag["invocation_id"], name)]
                states[row.version] = states[int(row.operationParameters["version"])]
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

        for entry in ledger:
            if entry.table == name and entry.who == "foreign" and entry.versions:
                run = by_number[entry.number - 1]
                inside += run.params["window"][0] < entry.versions[0] <= run.params["window"][1]
        ids = spark.sql(f"select count(*) as n, count(distinct id) as d from {table}").first()
        assert ids.n == ids.d, f"{table}: duplicate ids"
        actual = self.read(spark, table)
        expected = states[max(states)]
        assert sorted(actual) == sorted(expected), f"{table}: rows differ from the ledger's replay"
        for i, r in expected.items():
            assert actual[i] == r, f"{table} id {i}: {actual[i]} != ledger's {r}"

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
            else:
                restores = [v for v in mine if self.operation(history, v) == "RESTORE"]
                net = len(mine) - 2 * len(restores)
                if entry.ok:
                    assert net == (0 if entry.outcome == "no_change" else 1), entry
                elif entry.outcome != "written_not_reverted":
                    # Failed: nothing, or each write followed by its own RESTORE.
                    assert net == 0, f"{entry}: failed and left {mine}"
        return {
            "commits": len(history),
            "rows": len(actual),
            "ledger_check": "ok",
            "foreign_inside_fenced_window": inside,
        }

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
    def counts(ledger: list[Entry]) -> dict[str, Any]:
        fenced = [e for e in ledger if e.who == "dbt"]
        foreign = [e for e in ledger if e.who == "foreign"]

        def conflict(entry: Entry) -> bool:
            return "Concurrent" in entry.error or "DELTA_CONCURRENT" in entry.error

        return {
            "fenced_runs": len(fenced),
            "fenced_committed": sum(e.outcome == "committed" for e in fenced),
            "fenced_no_change": sum(e.outcome == "no_change" for e in fenced),
            "fence_failures": sum(e.outcome == "fence violation" for e in fenced),
            "not_reverted": sum(e.outcome == "written_not_reverted" for e in fenced),
            "other_failures": sum(e.outcome == "error" for e in fenced),
            "retries": sum(e.params.get("attempts", 1) - 1 for e in fenced),
            "foreign_ops": len(foreign),
            "foreign_committed": sum(e.ok for e in foreign),
            "foreign_failed_on_delta_conflict": sum(not e.ok and conflict(e) for e in foreign),
            "foreign_failed_other": sum(not e.ok and not conflict(e) for e in foreign),
            "foreign_by_kind": {k: sum(e.kind == k for e in foreign) for k in FOREIGN_KINDS},
        }

    @staticmethod
    def latest(spark, table: str) -> int:
        return spark.sql(f"describe history {table} limit 1").first().version

    @staticmethod
    def read(spark, table: str) -> State:
        return {r["id"]: r.asDict() for r in spark.sql(f"select * from {table}").collect()}
