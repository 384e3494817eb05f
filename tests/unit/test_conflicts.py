"""How a foreign commit is judged from its actions; the row probes are faked here (real Spark +
Delta runs them in tests/functional/test_conflicts.py). Whatever cannot be decided conflicts."""

import dataclasses
import json

from dbt.adapters.fenced_spark.fence.conflicts import ConflictCheck
from dbt.adapters.fenced_spark.fence.delta.actions import parse_actions
from dbt.adapters.fenced_spark.fence.delta.changes import DeltaChanges
from dbt.adapters.fenced_spark.fence.footprint import ReadFilter
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState
from dbt.adapters.fenced_spark.fence.scope import Scope


def add(path: str, data_change: bool = True, rows: int | None = None, **values: str) -> str:
    body = {"path": path, "dataChange": data_change, "partitionValues": values}
    if rows is not None:
        body["stats"] = json.dumps({"numRecords": rows})
    return json.dumps({"add": body})


def remove(path: str, data_change: bool = True, rows: int | None = None, **values: str) -> str:
    body = {"path": path, "dataChange": data_change, "partitionValues": values}
    if rows is not None:
        body["stats"] = json.dumps({"numRecords": rows})
    return json.dumps({"remove": body})


def info(operation: str = "WRITE", **metrics: int) -> str:
    body = {"operation": operation, "operationMetrics": {k: str(v) for k, v in metrics.items()}}
    return json.dumps({"commitInfo": body})


SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "P", "type": "integer", "nullable": True, "metadata": {}},
    ],
}
PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}


def meta(**fields) -> dict:
    """A metaData action's body, as Delta 4.4 writes it (a RESTORE copies it whole)."""
    body = {
        "id": "63ad06be",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA, separators=(",", ":")),
        "partitionColumns": ["P"],
        "configuration": {},
        "createdTime": 1796156067358,
    }
    return {**body, **fields}


def restore(*files: str, metadata=None, protocol=None) -> list[str]:
    """A RESTORE's commit: commitInfo, metaData and protocol (the table's own unless given),
    then the files it removed and re-added."""
    return [
        json.dumps({"commitInfo": {"operation": "RESTORE", "operationParameters": {"version": 2}}}),
        json.dumps({"metaData": meta() if metadata is None else metadata}),
        *files,
        json.dumps({"protocol": PROTOCOL if protocol is None else protocol}),
    ]


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
        self,
        *hits: str,
        fails: str | None = None,
        describe=(),
        props=(),
        plan="",
        confs=None,
        checksums=None,
    ) -> None:
        confs = confs or {}
        self.hits, self.fails, self.asked = hits, fails, []
        self.answers = {
            "DESCRIBE": list(describe),
            "SHOW": list(props),
            "EXPLAIN": [(plan,)],
        }
        self.confs = confs
        # Delta's checksum (N.crc) of a version: its metaData and protocol.
        self.checksums = {4: (meta(), PROTOCOL)} if checksums is None else checksums

    def any_row(self, sql: str) -> bool:
        self.asked.append(sql)
        if self.fails and self.fails in sql:
            raise RuntimeError("[UNRESOLVED_COLUMN] no such column")
        return any(hit in sql for hit in self.hits)

    def fetch(self, sql: str):
        self.asked.append(sql)
        if sql.startswith("SELECT get_json_object"):
            version = int(sql.rsplit("/", 1)[1].split(".")[0])
            if version not in self.checksums:
                raise RuntimeError("[PATH_NOT_FOUND] Path does not exist")
            return [tuple(json.dumps(part) for part in self.checksums[version])]
        return self.answers[sql.split()[0]]

    def session_conf(self, key: str):
        return self.confs.get(key)

    def location(self, table: str) -> str:
        self.asked.append(f"DESCRIBE DETAIL {table}")
        return "file:/lake/t"


def check_of(log, probe, strategy="merge"):
    """The conflict analysis of `s`.`t` over a Delta log and its rows."""
    return ConflictCheck("`s`.`t`", DeltaChanges("`s`.`t`", log, probe), probe, strategy)


def judge(lines, scope, probe=None, strategy="merge"):
    check = check_of(Log(lines), probe or Probe(), strategy)
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


def test_a_commit_of_no_file_is_no_data_change_and_probes_nothing():
    probe = Probe()
    lines = {5: [info("VACUUM END"), json.dumps({"txn": {"appId": "a", "version": 3}})]}
    verdict = judge(lines, Scope(any_change=True, why_any="x"), probe)
    assert not verdict.conflict and verdict.why == "no data change" and probe.asked == []


def test_a_change_to_the_table_itself_conflicts():
    # A metaData that is not the table's before it (the checksum of v4 says what that was).
    lines = {5: [json.dumps({"metaData": meta(id="another")})]}
    verdict = judge(lines, Scope())
    assert verdict.conflict and verdict.why == "changed the table itself (metaData: table id)"


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
    context = Fence(Probe(), lambda: None, log=Log({})).context
    state = FenceState("s.t", "s.t", "replace_where", 4, 4, "inv", "model.p.t")
    first = context.conflict_check(state)
    assert context.conflict_check(dataclasses.replace(state, expected_version=6)) is first
    # A retry reads a new vB: the table's columns are looked up again.
    assert context.conflict_check(dataclasses.replace(state, read_version=7)) is not first


# RESTORE: Delta writes metaData and protocol into every one, as the table has them unless it
# restores another definition (Delta 4.4's RESTORE copies the restored version's metaData
# whole). Only a change to them changes the table itself; the rest is judged by its files.

READS_P0 = Scope(reads=(ReadFilter("p = 0"),))


def test_a_restore_of_the_tables_own_definition_is_judged_by_its_files():
    probe = Probe(describe=PARTITIONED)
    lines = {5: restore(remove("P=1/f", P="1"))}
    verdict = judge(lines, READS_P0, probe)
    assert not verdict.conflict
    assert verdict.why == (
        "changed data in partition P=1, outside the partitions this model read or writes"
    )
    # The table's definition before it: Delta's checksum of v4, read by the server.
    crc = "FROM text.`file:/lake/t/_delta_log/00000000000000000004.crc`"
    assert any(crc in q for q in probe.asked)


def test_a_restore_of_rows_the_model_read_conflicts_for_that_reason():
    probe = Probe("AS changed LIMIT", "(p = 'a')")
    lines = {5: restore(add("p=a/old", p="a"), remove("p=a/new", p="a"))}
    verdict = judge(lines, Scope(reads=(ReadFilter("(p = 'a')"),)), probe)
    assert verdict.conflict
    assert (
        verdict.why
        == "changed rows in partition p=a, among them rows this model read (where (p = 'a'))"
    )


def test_a_restore_of_another_definition_changes_the_table_itself():
    narrower = {**SCHEMA, "fields": SCHEMA["fields"][:1]}
    features = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"]}
    cases = {
        "metaData: schema": {"metadata": meta(schemaString=json.dumps(narrower))},
        "metaData: properties delta.enableDeletionVectors": {
            "metadata": meta(configuration={"delta.enableDeletionVectors": "true"})
        },
        "metaData: partition columns": {"metadata": meta(partitionColumns=[])},
        "metaData: table id": {"metadata": meta(id="replaced")},
        "protocol": {"protocol": features},
        "metaData: format, schema; protocol": {
            "metadata": meta(format={"provider": "orc"}, schemaString=json.dumps(narrower)),
            "protocol": features,
        },
    }
    for named, definition in cases.items():
        verdict = judge({5: restore(remove("P=1/f", P="1"), **definition)}, READS_P0)
        assert verdict.conflict and verdict.why == f"changed the table itself ({named})", named


def test_fields_that_change_no_meaning_are_not_a_change():
    # A RESTORE across a COMMENT or a CREATE OR REPLACE writes the older description and
    # createdTime; the schema is compared as JSON, not as text.
    spaced = json.dumps(SCHEMA, indent=2)
    the_same = meta(description="hello", createdTime=1, name=None, schemaString=spaced)
    verdict = judge({5: restore(metadata=the_same)}, READS_P0)
    assert not verdict.conflict and verdict.why == "no data change"
    # Features in another order are the same protocol.
    before = {"minReaderVersion": 3, "minWriterVersion": 7, "writerFeatures": ["a", "b"]}
    after = {**before, "writerFeatures": ["b", "a"]}
    probe = Probe(checksums={4: (meta(), before)})
    verdict = judge({5: restore(protocol=after)}, READS_P0, probe)
    assert not verdict.conflict


def test_the_definition_before_a_commit_is_read_from_the_log_without_a_checksum():
    # No checksum of v4 (a RESTORE writes none): v4's own commit file holds both.
    probe = Probe(describe=PARTITIONED, checksums={})
    lines = {4: restore(), 5: restore(remove("P=1/f", P="1"))}
    assert not judge(lines, READS_P0, probe).conflict
    # v4 changed the schema (and conflicted when judged), v2 is where the protocol was set.
    alter = json.dumps({"metaData": meta()})
    lines = {2: [json.dumps({"protocol": PROTOCOL})], 3: [add("P=1/g", P="1")], 4: [alter]}
    lines[5] = restore(remove("P=1/f", P="1"))
    assert not judge(
        {**lines, 0: restore(protocol={"minReaderVersion": 9})}, READS_P0, probe
    ).conflict
    # One of the commits before it is gone (cleaned up after a checkpoint): not decidable.
    del lines[2]
    verdict = judge({**lines, 0: restore()}, READS_P0, probe)
    assert verdict.conflict and verdict.why == (
        "wrote metaData, protocol, which could not be compared with the table's at v4 "
        "(neither its checksum nor the 33 commits up to it say), so it counts as a conflict"
    )


def test_a_definition_that_does_not_parse_conflicts():
    verdict = judge({5: restore(metadata=meta(configuration="not a map"))}, READS_P0)
    assert verdict.conflict and verdict.why.startswith("wrote metaData, protocol, which could not")


def test_consecutive_restores_read_one_checksum():
    # v4 against v3's checksum; v5 against v4's own commit file, already read: no second read.
    probe = Probe(describe=PARTITIONED, checksums={3: (meta(), PROTOCOL)})
    lines = {4: restore(remove("P=1/e", P="1")), 5: restore(remove("P=1/f", P="1"))}
    check = check_of(Log(lines), probe)
    judged = check.judge([Commit(v, "RESTORE", v - 1, None) for v in (4, 5)], READS_P0)
    assert [j.conflict for j in judged] == [False, False]
    assert [q[-9:] for q in probe.asked if "get_json_object" in q] == ["0003.crc`"]
    assert probe.asked.count("DESCRIBE DETAIL `s`.`t`") == 1


def test_a_definition_that_cannot_be_read_conflicts():
    class Before(Log):
        def actions(self, table, versions):
            if list(versions) != [5]:
                raise RuntimeError("[PATH_NOT_FOUND] the log before it is gone")
            return super().actions(table, versions)

    class NoDetail(Probe):
        def location(self, table):
            raise RuntimeError("[DELTA_MISSING_DELTA_TABLE] not a Delta table")

    check = check_of(Before({5: restore()}), NoDetail())
    verdict = check.judge([Commit(5, "RESTORE", 4, None)], READS_P0)[0]
    assert verdict.conflict and verdict.why == (
        "wrote metaData, protocol, which could not be compared with the table's at v4 "
        "([PATH_NOT_FOUND] the log before it is gone), so it counts as a conflict"
    )


# dataChange: false is what its writer says; its row counts can contradict it.


def test_a_rewrite_marked_no_data_change_is_the_writers_claim():
    # OPTIMIZE: the removed files' stats count 1 + 1 rows, the added file's 2; REORG PURGE:
    # a file of 2 rows with 1 deleted by its vector, rewritten as 1 row.
    dv = json.dumps(
        {
            "remove": {
                "path": "d",
                "dataChange": False,
                "stats": json.dumps({"numRecords": 2}),
                "deletionVector": {"cardinality": 1},
            }
        }
    )
    compactions = [
        [info("OPTIMIZE", numRemovedFiles=2), remove("a", False, 1), remove("b", False, 1)]
        + [add("c", False, 2)],
        [info("REORG", numRemovedFiles=1, numAddedFiles=1), dv, add("e", False, 1)],
        # Files re-added as they were (new stats, row ids): nothing removed, nothing written.
        [info("COMPUTE STATS"), add("a", False, 3)],
    ]
    for lines in compactions:
        probe = Probe()
        verdict = judge({5: lines}, Scope(reads=(ReadFilter(None),)), probe)
        assert not verdict.conflict and verdict.why == "marked no data change by its writer"
        assert probe.asked == [], lines  # no Spark job for a compaction
    # The same OPTIMIZE from a writer with history metrics off: its counts agree, but so would
    # a partition rewritten with one row changed; its rows are read, and found unchanged.
    probe = Probe()
    unmetered = [info("OPTIMIZE"), *compactions[0][1:]]
    verdict = judge({5: unmetered}, Scope(reads=(ReadFilter(None),)), probe)
    assert not verdict.conflict and verdict.why == (
        "marked no data change by its writer, yet its writer recorded no metrics, and row "
        "counts alone do not show its rows unchanged: rewrote files without changing a row"
    )
    assert any("VERSION AS OF" in q for q in probe.asked)


def test_a_claim_of_no_data_change_that_its_counts_contradict_is_judged_as_a_data_change():
    reads = Scope(reads=(ReadFilter("(id = 2)"),))
    claim = "marked no data change by its writer, yet "
    cases = {
        "the files it removed hold 2 rows and those it added 1": [
            info("WRITE"),
            remove("a", False, 2),
            add("b", False, 1),
        ],
        "the files it removed hold 2 rows and it wrote 1 (numOutputRows)": [
            info("WRITE", numOutputRows=1),
            remove("a", False, 2),
            add("b", False),
        ],
        "its metrics count 2 rows deleted (numDeletedRows)": [
            info("WRITE", numDeletedRows=2, numOutputRows=1),
            remove("a", False, 2),
            add("b", False, 2),
        ],
        # INSERT OVERWRITE ... WITH ('dataChange' = 'false'): its removes carry no stats.
        "it wrote 5 rows (numOutputRows) in place of files whose rows its log does not count": [
            info("WRITE", numOutputRows=5),
            remove("a", False),
            add("b", False, 5),
        ],
        # The same from a session with history metrics off: nothing in its log counts a row,
        # so nothing there can confirm the claim either (the hostile review of 2026-12-03: a
        # counter's +10 tolerated and lost).
        "its log counts none of the rows of the files it removed": [
            info("WRITE"),
            remove("a", False),
            add("b", False),
        ],
        # A partition rewritten so (INSERT OVERWRITE ... PARTITION, or REPLACE WHERE on a
        # partition column) from such a session: its removes carry row counts, as many as it
        # added, and one of them changed (the hostile review over Thrift, 2026-12-03).
        "its writer recorded no metrics, and row counts alone do not show its rows unchanged": [
            info("WRITE"),
            remove("a", False, 1),
            add("b", False, 1),
        ],
        # INSERT INTO ... WITH ('dataChange' = 'false')
        "it wrote 1 row (numOutputRows) and removed no file": [
            info("WRITE", numOutputRows=1),
            add("b", False, 1),
        ],
    }
    for doubt, lines in cases.items():
        probe = Probe("AS changed LIMIT", "(id = 2)")
        verdict = judge({5: lines}, reads, probe)
        assert verdict.conflict, doubt
        assert (
            verdict.why
            == f"{claim}{doubt}: changed rows, among them rows this model read (where (id = 2))"
        )
        # Its files were read as a data change's: the ones it removed, and those it added.
        rows = next(q for q in probe.asked if "VERSION AS OF" in q)
        assert "_metadata.file_name IN ('b')" in rows
        if "removed no file" not in doubt:
            assert "_metadata.file_name IN ('a')" in rows
    # Its rows may still be unchanged: then it rewrote files, as it said.
    lines = cases["its metrics count 2 rows deleted (numDeletedRows)"]
    verdict = judge({5: lines}, reads, Probe())
    assert not verdict.conflict
    assert (
        verdict.why
        == f"{claim}its metrics count 2 rows deleted (numDeletedRows): rewrote files without "
        "changing a row"
    )


def test_a_contradicted_claim_under_any_change_reads_its_rows():
    lines = {5: [info("WRITE", numOutputRows=3), remove("a", False), add("b", False, 3)]}
    scope = Scope(any_change=True, why_any="it must")
    unchanged = judge(lines, scope, Probe())
    assert not unchanged.conflict and unchanged.why.endswith(
        ": rewrote files without changing a row"
    )
    changed = judge(lines, scope, Probe("AS changed LIMIT"))
    assert changed.conflict and changed.why.endswith(": changed rows, and it must")


def test_a_commit_that_mixes_both_kinds_of_file_is_judged_on_all_of_them():
    probe = Probe()
    judge(
        {5: [remove("a", p="x"), add("b", False, p="y")]}, Scope(reads=(ReadFilter(None),)), probe
    )
    rows = next(q for q in probe.asked if "VERSION AS OF" in q)
    assert "IN ('a')" in rows and "IN ('b')" in rows


# `insert`: MERGE ... WHEN NOT MATCHED THEN INSERT never changes a row of the table.

KEYED = Scope(keys=("id",), source="SELECT * FROM staged")


def test_insert_commits_over_a_commit_that_only_inserted_rows():
    # Whatever its keys: its MERGE, at a snapshot that holds them, inserts none of them.
    probe = Probe("AS changed LIMIT", "JOIN")
    verdict = judge({5: [add("f")]}, KEYED, probe, strategy="insert")
    assert not verdict.conflict
    assert verdict.why == (
        "only inserted rows, none this model read: its MERGE inserts only keys not in the "
        "table, so committing gives the serial result"
    )
    assert not any("JOIN" in q for q in probe.asked)
    # A merge would overwrite such a row: refused.
    probe = Probe("AS changed LIMIT", "JOIN")
    verdict = judge({5: [add("f")]}, KEYED, probe, strategy="merge")
    assert (
        verdict.conflict
        and verdict.why == "changed rows, among them rows with a key (id) this model writes"
    )


def test_insert_is_refused_by_a_commit_that_removed_or_changed_a_row_of_its_keys():
    # Files rewritten, a row gone from them (an UPDATE, a DELETE): the key check decides.
    probe = Probe("AS changed LIMIT", "AS removed LIMIT", "JOIN")
    verdict = judge({5: [remove("a"), add("b")]}, KEYED, probe, strategy="insert")
    assert (
        verdict.conflict
        and verdict.why == "changed rows, among them rows with a key (id) this model writes"
    )
    # Rewritten with every row kept (a MERGE that only inserted into a file it rewrote).
    probe = Probe("AS changed LIMIT", "JOIN")
    verdict = judge({5: [remove("a"), add("b")]}, KEYED, probe, strategy="insert")
    assert not verdict.conflict and verdict.why.startswith(
        "only inserted rows, none this model read"
    )
    # The exact form does not run here (a map column): whether rows were removed is unknown.
    probe = Probe("UNION ALL", "JOIN", fails="EXCEPT ALL")
    verdict = judge({5: [remove("a"), add("b")]}, KEYED, probe, strategy="insert")
    assert verdict.conflict


def test_insert_is_refused_by_inserted_rows_it_read():
    scope = dataclasses.replace(KEYED, reads=(ReadFilter("(id > 3)"),))
    probe = Probe("AS changed LIMIT", "(id > 3)")
    verdict = judge({5: [add("f")]}, scope, probe, strategy="insert")
    assert verdict.conflict and "among them rows this model read (where (id > 3))" in verdict.why


def test_insert_after_its_write_refuses_a_key_it_inserted_too():
    written = dataclasses.replace(KEYED, source="SELECT * FROM ours", source_verb="wrote")
    probe = Probe("AS changed LIMIT", "JOIN")
    verdict = judge({5: [add("f")]}, written, probe, strategy="insert")
    assert (
        verdict.conflict
        and verdict.why == "changed rows, among them rows with a key (id) this model wrote"
    )
    # A NULL key never matches in its MERGE: both rows are inserted in either order.
    assert any("ON changed.id = source.id LIMIT 1" in q for q in probe.asked)
    verdict = judge({5: [add("f")]}, written, Probe("AS changed LIMIT"), strategy="insert")
    assert not verdict.conflict
    assert verdict.why == (
        "only inserted rows, none this model read and none with a key (id) it wrote: its MERGE "
        "inserts only keys not in the table, so committing gives the serial result"
    )


# Rules the audit found no test for.


def test_a_users_domain_changes_the_table_itself_and_deltas_own_do_not():
    domain = json.dumps({"domainMetadata": {"domain": "app.watermark", "configuration": "{}"}})
    verdict = judge({5: [domain]}, Scope())
    assert (
        verdict.conflict
        and verdict.why == "changed the table itself (domainMetadata app.watermark)"
    )
    delta = json.dumps({"domainMetadata": {"domain": "delta.rowTracking", "configuration": "{}"}})
    assert not judge({5: [delta]}, Scope()).conflict


def test_judging_stops_at_the_first_conflict():
    probe = Probe()
    lines = {5: [add("a", False)], 6: [add("b")], 7: [add("c")]}
    check = check_of(Log(lines), probe)
    commits = [Commit(v, "WRITE", v - 1, None) for v in (5, 6, 7)]
    judged = check.judge(commits, Scope(any_change=True, why_any="it must"))
    assert [(j.commit.version, j.conflict) for j in judged] == [(5, False), (6, True)]


def test_rows_in_the_replaced_range_conflict_and_others_do_not():
    scope = Scope(replaces=("p = 'a'", "id < 9"))
    ranged = "AS changed WHERE (p = 'a') AND (id < 9) LIMIT 1"
    verdict = judge({5: [add("f")]}, scope, Probe("AS changed LIMIT", ranged))
    assert verdict.conflict
    assert (
        verdict.why
        == "changed rows, among them rows in the range this model replaces ((p = 'a') AND (id < 9))"
    )
    verdict = judge({5: [add("f")]}, scope, Probe("AS changed LIMIT"))
    assert (
        not verdict.conflict
        and verdict.why == "changed rows outside what this model read or writes"
    )


def test_the_key_check_joins_the_changed_rows_with_the_source_on_every_key():
    scope = Scope(
        keys=("id", "k"), source="SELECT * FROM staged", key_predicates=("changed.d > 3",)
    )
    join = (
        "AS changed JOIN (SELECT * FROM staged) AS source "
        "ON changed.id <=> source.id AND changed.k <=> source.k AND (changed.d > 3) LIMIT 1"
    )
    probe = Probe("AS changed LIMIT", join)
    verdict = judge({5: [add("f")]}, scope, probe)
    assert (
        verdict.conflict
        and verdict.why == "changed rows, among them rows with a key (id, k) this model writes"
    )
    verdict = judge({5: [add("f")]}, scope, Probe("AS changed LIMIT"))
    assert (
        not verdict.conflict
        and verdict.why == "changed rows outside what this model read or writes"
    )
    # Without the model's rows to join (a scope with keys, no source), no key check runs.
    assert not judge(
        {5: [add("f")]}, Scope(keys=("id",)), Probe("AS changed LIMIT", "JOIN")
    ).conflict
