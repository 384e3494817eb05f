"""How a foreign commit is judged from its actions; the row probes are faked here (real Spark +
Delta runs them in tests/functional/test_conflicts.py). Whatever cannot be decided conflicts."""

import dataclasses
import json

from dbt.adapters.fenced_spark.fence.conflicts import (
    ConflictCheck,
    Scope,
    parse_actions,
)
from dbt.adapters.fenced_spark.fence.footprint import ReadFilter
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState


def add(path: str, data_change: bool = True, **values: str) -> str:
    body = {"path": path, "dataChange": data_change, "partitionValues": values}
    return json.dumps({"add": body})


def remove(path: str, data_change: bool = True, **values: str) -> str:
    body = {"path": path, "dataChange": data_change, "partitionValues": values}
    return json.dumps({"remove": body})


class Log:
    def __init__(self, lines: dict[int, list[str]] | Exception) -> None:
        self.lines = lines

    def actions(self, table, versions):
        if isinstance(self.lines, Exception):
            raise self.lines
        return {v: self.lines[v] for v in versions if v in self.lines}


class Probe:
    """Answers a probe by whether its SQL holds one of `hits`; records what it was asked."""

    def __init__(
        self, *hits: str, fails: str | None = None, describe=(), props=(), plan="", confs=None
    ) -> None:
        confs = confs or {}
        self.hits, self.fails, self.asked = hits, fails, []
        self.answers = {
            "DESCRIBE": list(describe),
            "SHOW": list(props),
            "EXPLAIN": [(plan,)],
        }
        self.confs = confs

    def any_row(self, sql: str) -> bool:
        self.asked.append(sql)
        if self.fails and self.fails in sql:
            raise RuntimeError("[UNRESOLVED_COLUMN] no such column")
        return any(hit in sql for hit in self.hits)

    def fetch(self, sql: str):
        self.asked.append(sql)
        return self.answers[sql.split()[0]]

    def session_conf(self, key: str):
        return self.confs.get(key)


def judge(lines, scope, probe=None):
    check = ConflictCheck("`s`.`t`", Log(lines), probe or Probe(), "merge")
    return check.judge([Commit(5, "WRITE", 4, None)], scope)[0]


def test_parse_actions_keeps_data_changes_and_their_partitions():
    actions = parse_actions(
        [
            json.dumps({"commitInfo": {"operation": "WRITE"}}),
            add("p=a/part-1.parquet", p="a"),
            add("p=b/part-2.parquet", data_change=False, p="b"),
            remove("p=a/part%20old.parquet", p="a"),
        ]
    )
    assert actions.added == ["part-1.parquet"] and actions.removed == ["part old.parquet"]
    assert actions.partitions == {"p=a"} and not actions.table_changes


def test_no_data_change_is_no_conflict_and_probes_nothing():
    probe = Probe()
    lines = {5: [add("a", data_change=False), remove("b", data_change=False)]}
    verdict = judge(lines, Scope(any_change=True, why_any="x"), probe)
    assert not verdict.conflict and verdict.why == "no data change" and probe.asked == []


def test_a_change_to_the_table_itself_conflicts():
    lines = {5: [json.dumps({"metaData": {"id": "x"}})]}
    assert judge(lines, Scope()).conflict


def test_any_data_change_conflicts_for_a_scope_that_cannot_bound_it():
    verdict = judge({5: [add("f", p="a")]}, Scope(any_change=True, why_any="it must"))
    assert verdict.conflict and verdict.why == "changed data in partition p=a, and it must"


def test_rows_it_read_conflict_and_other_rows_do_not():
    scope = Scope(reads=(ReadFilter("(p = 'a')"),))
    # The first probe finds changed rows; the read's filter finds some of them, or none.
    assert judge({5: [add("f")]}, scope, Probe("LIMIT 1", "(p = 'a')")).conflict
    outside = judge(
        {5: [add("f")]}, Scope(reads=(ReadFilter("(p = 'z')"),)), Probe("AS changed LIMIT")
    )
    assert not outside.conflict and "outside what this model read or writes" in outside.why


def test_a_commit_that_changed_no_row_is_said_so():
    verdict = judge({5: [remove("f"), add("g")]}, Scope(reads=(ReadFilter(None),)), Probe())
    assert not verdict.conflict and verdict.why == "rewrote files without changing a row"


def test_what_cannot_be_decided_conflicts():
    scope = Scope(reads=(ReadFilter("(p = 'a')"),))
    # A log that cannot be read, a commit file that is missing, a probe that fails.
    assert judge(RuntimeError("no log"), scope).conflict
    assert judge({}, scope).conflict
    failing = Probe("AS changed LIMIT", fails="(p = 'a')")
    verdict = judge({5: [add("f")]}, scope, failing)
    assert verdict.conflict and verdict.why.startswith("could not be checked ([UNRESOLVED")


def test_the_exact_rows_fall_back_to_the_wider_union_and_are_probed_once():
    # EXCEPT ALL fails on a map column: the union of both sides is used, once probed.
    probe = Probe("UNION ALL", fails="EXCEPT ALL")
    verdict = judge({5: [add("f")]}, Scope(reads=(ReadFilter(None),)), probe)
    assert verdict.conflict
    # The exact form, which fails; then the union: any changed row? A whole-table read saw
    # them all, so no third probe.
    assert ["EXCEPT ALL" in sql for sql in probe.asked] == [True, False]


# DESCRIBE TABLE of a table partitioned by `P` (int), as Spark returns it.
PARTITIONED = [
    ("id", "bigint", None),
    ("P", "int", None),
    ("# Partition Information", "", ""),
    ("# col_name", "data_type", "comment"),
    ("P", "int", None),
]


def test_partition_values_alone_put_a_commit_outside_the_reads_and_the_replaced_range():
    probe = Probe(describe=PARTITIONED)
    scope = Scope(reads=(ReadFilter("(p = 0) AND (id > 3)"),), replaces=("P = 0 and id < 9",))
    verdict = judge({5: [add("P=1/f", P="1")]}, scope, probe)
    assert not verdict.conflict
    assert (
        verdict.why
        == "changed data in partition P=1, outside the partitions this model read or writes"
    )
    # DESCRIBE and its properties once (an int column needs no plan), then one query per
    # predicate on the commit's partition values: no data read.
    assert [q.split()[0] for q in probe.asked] == ["DESCRIBE", "SHOW", "SELECT", "SELECT"]
    assert all("VALUES (CAST('1' AS int))" in q for q in probe.asked[2:])
    assert "VERSION AS OF" not in " ".join(probe.asked)


def test_partition_values_that_may_pass_go_to_the_data_probe():
    # The VALUES query has a row (partition 0 passes `p = 0`): the changed rows are probed.
    probe = Probe("AS partitions", "VERSION AS OF", describe=PARTITIONED)
    verdict = judge({5: [add("P=0/f", P="0")]}, Scope(reads=(ReadFilter("p = 0"),)), probe)
    assert verdict.conflict and any("VERSION AS OF" in q for q in probe.asked)


def test_what_partition_values_cannot_decide_goes_to_the_data_probe():
    cases = [
        # a whole-table read, a merge's keys, a conjunct not about partition columns alone
        (Scope(reads=(ReadFilter(None),)), PARTITIONED),
        (Scope(keys=("id",), source="select 1 as id", replaces=("p = 0",)), PARTITIONED),
        (Scope(reads=(ReadFilter("id > 3 or p = 0"),)), PARTITIONED),
        # the log's partition names are not the table's (column mapping's physical names)
        (Scope(reads=(ReadFilter("p = 0"),)), [*PARTITIONED[:4], ("Q", "int", None)]),
        # an unpartitioned table
        (Scope(reads=(ReadFilter("p = 0"),)), PARTITIONED[:2]),
    ]
    for scope, describe in cases:
        probe = Probe("VERSION AS OF", describe=describe)
        verdict = judge({5: [add("P=1/f", P="1")]}, scope, probe)
        assert verdict.conflict, scope
        assert any("VERSION AS OF" in q for q in probe.asked), scope
    reads = Scope(reads=(ReadFilter("p = 0"),))
    # Column mapping (a rename can swap physical names), CHAR(n) read padded (Delta describes
    # a CHAR(3) column as `string`).
    texts = [(n, "string" if n == "P" else t, c) for n, t, c in PARTITIONED]
    for describe, table in (
        (PARTITIONED, {"props": [("delta.columnMapping.mode", "name")]}),
        (
            texts,
            {"plan": "Project [static_invoke(CharVarcharCodegenUtils.readSidePadding(P#1, 3))]"},
        ),
    ):
        probe = Probe("VERSION AS OF", describe=describe, **table)
        assert judge({5: [add("P=1/f", P="1")]}, reads, probe).conflict, table
    # A remove without partitionValues (optional in Delta's protocol): values unknown.
    probe = Probe("VERSION AS OF", describe=PARTITIONED)
    nameless = json.dumps({"remove": {"path": "P=0/old", "dataChange": True}})
    assert judge({5: [add("P=1/f", P="1"), nameless]}, reads, probe).conflict
    assert not any("AS partitions" in q for q in probe.asked)


def test_only_text_partition_columns_need_the_plan():
    reads = Scope(reads=(ReadFilter("p = 0"),))
    padded = "Project [static_invoke(CharVarcharCodegenUtils.readSidePadding(P#1, 3))]"
    # An int column is never read padded: no EXPLAIN, and the values decide.
    probe = Probe("VERSION AS OF", describe=PARTITIONED, plan=padded)
    assert not judge({5: [add("P=1/f", P="1")]}, reads, probe).conflict
    assert not any(q.startswith("EXPLAIN") for q in probe.asked)
    # A string column that is not padded: the plan is read, and the values decide.
    texts = [(n, "string" if n == "P" else t, c) for n, t, c in PARTITIONED]
    probe = Probe("VERSION AS OF", describe=texts)
    assert not judge({5: [add("P=1/f", P="1")]}, reads, probe).conflict
    assert any(q.startswith("EXPLAIN") for q in probe.asked)


def test_session_confs_that_change_literals_or_padding_go_to_the_data_probe():
    reads = Scope(reads=(ReadFilter("p = 0"),))
    texts = [(n, "string" if n == "P" else t, c) for n, t, c in PARTITIONED]
    for describe, confs in (
        # `'O\'Brien'` stays backslashed: the VALUES would test another value.
        (PARTITIONED, {"spark.sql.parser.escapedStringLiterals": "true"}),
        # CHAR(3) compares padded though the plan shows no padding.
        (texts, {"spark.sql.readSideCharPadding": "false"}),
    ):
        probe = Probe("VERSION AS OF", describe=describe, confs=confs)
        assert judge({5: [add("P=1/f", P="1")]}, reads, probe).conflict, confs
        assert not any("AS partitions" in q for q in probe.asked), confs
    # A text column without padding and the defaults: the values decide.
    probe = Probe("VERSION AS OF", describe=texts, confs={"spark.sql.readSideCharPadding": "true"})
    assert not judge({5: [add("P=1/f", P="1")]}, reads, probe).conflict


def test_a_partition_value_query_that_fails_goes_to_the_data_probe():
    probe = Probe("VERSION AS OF", fails="AS partitions", describe=PARTITIONED)
    verdict = judge({5: [add("P=x/f", P="x")]}, Scope(reads=(ReadFilter("p = 0"),)), probe)
    assert verdict.conflict and any("VERSION AS OF" in q for q in probe.asked)


def test_an_attempts_pre_check_and_verification_share_one_analysis():
    fence = Fence(Probe(), lambda: None, log=Log({}))
    state = FenceState("s.t", "s.t", "replace_where", 4, 4, "inv", "model.p.t")
    first = fence.conflict_check(state)
    assert fence.conflict_check(dataclasses.replace(state, expected_version=6)) is first
    # A retry reads a new vB: the table's columns are looked up again.
    assert fence.conflict_check(dataclasses.replace(state, read_version=7)) is not first
