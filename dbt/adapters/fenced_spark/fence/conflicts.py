"""Conflicts, not commits: whether a foreign commit after vB touched what the node read or
writes (docs/fence.md, "What conflicts with what").

The Delta log says most of it: a commit whose file actions all carry `dataChange: false`
(OPTIMIZE, auto compaction) changed no row; one with `metaData` or `protocol` changed the
table itself. For a commit that changed rows, the rows it changed are read back exactly
(`_metadata.file_name` restricts each side to the files it removed and added, at the versions
around it) and tested against the node's footprint: the filters of its reads of the target,
the keys it merges, the range it replaces. Whatever cannot be decided is a conflict.
"""

import json
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote

from dbt.adapters.fenced_spark.fence.footprint import ReadFilter
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.partitions import (
    MAX_PARTITIONS,
    PartitionValues,
    partition_only,
    partition_types,
    quote_sql_string,
    values_sql,
)
from dbt.adapters.fenced_spark.relation import quote_name

# Partition column types whose rows Spark may read padded (CHAR(n) describes as one of them).
TEXT_TYPES = ("string", "char", "varchar")


@dataclass(frozen=True)
class Scope:
    """What the node read of its target and what it writes there."""

    reads: tuple[ReadFilter, ...] = ()
    # merge, insert: the unique_key columns, and the rows whose keys it writes: the staged
    # source before the write, the rows its own commit changed after it; and its
    # incremental_predicates on the target, which narrow the keys it can touch.
    keys: tuple[str, ...] = ()
    source: str | None = None
    source_verb: str = "writes"
    key_predicates: tuple[str, ...] = ()
    # replace_where, microbatch: the predicates of the range it replaces (ANDed).
    replaces: tuple[str, ...] = ()
    # Refused by any data change: append_if_unchanged by its name, and whatever this module
    # cannot bound (snapshots, our own pre-hook steps, whose writes are arbitrary SQL).
    any_change: bool = False
    why_any: str = ""


def scope_json(scope: Scope) -> str:
    """The scope as the write's tag records it, for a later run to judge the commits that
    landed while the write ran (its verdict is not in the log)."""
    data = {
        "reads": [r.predicate for r in scope.reads],
        "replaces": list(scope.replaces),
        "keys": list(scope.keys),
        "key_predicates": list(scope.key_predicates),
        "any_change": scope.any_change,
        "why_any": scope.why_any,
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def scope_from_json(text: str) -> Scope:
    data = json.loads(text)
    return Scope(
        reads=tuple(ReadFilter(p) for p in data.get("reads") or ()),
        replaces=tuple(data.get("replaces") or ()),
        keys=tuple(data.get("keys") or ()),
        key_predicates=tuple(data.get("key_predicates") or ()),
        any_change=bool(data.get("any_change")),
        why_any=str(data.get("why_any") or ""),
    )


# Until the write says what it touches, and for the node's own pre-hook and schema-change
# statements (arbitrary SQL), any data change conflicts.
STEPS = Scope(
    any_change=True,
    why_any="this run's own pre-hook or schema-change steps write the table, rows unknown",
)


@dataclass(frozen=True)
class Judgement:
    commit: Commit
    conflict: bool
    why: str
    # Its rows could not be compared with what the node read or writes: the query failed,
    # which may be the model SQL's own fault (a unique_key it lacks).
    undecided: bool = False

    def describe(self) -> str:
        return f"v{self.commit.version} {self.commit.operation}: {self.why}"


@dataclass
class Actions:
    """One commit's actions, as far as conflicts go."""

    added: list[str] = field(default_factory=list)  # data files with dataChange, by name
    removed: list[str] = field(default_factory=list)
    partitions: set[str] = field(default_factory=set)  # "p=a" of every data-changing file
    partition_values: set[PartitionValues] = field(default_factory=set)
    # A file without partitionValues (optional on `remove` in Delta's protocol): its values,
    # and so the commit's, are unknown.
    partition_values_unknown: bool = False
    table_changes: list[str] = field(default_factory=list)  # metaData, protocol, ...

    @property
    def data_change(self) -> bool:
        return bool(self.added or self.removed)


# Actions that say nothing about rows or the table's definition. Delta's own domains
# (`delta.*`: row tracking's high-water mark, clustering) move with data changes checked
# through the files; a user's domain is the user's meaning, so it conflicts.
_NEUTRAL = {"commitInfo", "txn", "cdc", "checkpointMetadata", "sidecar"}


def parse_actions(lines: Iterable[str]) -> Actions:
    actions = Actions()
    for line in lines:
        if not line.strip():
            continue
        for kind, body in json.loads(line).items():
            if kind in ("add", "remove"):
                if body.get("dataChange", True) is False:
                    continue
                name = unquote(posixpath.basename(str(body["path"])))
                (actions.added if kind == "add" else actions.removed).append(name)
                values = body.get("partitionValues") or {}
                actions.partition_values.add(tuple(sorted(values.items())))
                if not isinstance(body.get("partitionValues"), dict):
                    actions.partition_values_unknown = True
                actions.partitions.add(
                    ", ".join(
                        f"{k}={'null' if v is None else v}" for k, v in sorted(values.items())
                    )
                    or "unpartitioned"
                )
            elif kind == "domainMetadata" and str(body.get("domain", "")).startswith("delta."):
                continue
            elif kind not in _NEUTRAL:
                actions.table_changes.append(kind)
    return actions


class ActionReader(Protocol):
    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]: ...


class RowProbe(Protocol):
    def any_row(self, sql: str) -> bool: ...

    def fetch(self, sql: str) -> list[Sequence[Any]]: ...

    def session_conf(self, key: str) -> str | None: ...


def _in_files(names: list[str]) -> str:
    if not names:
        return "false"
    return "_metadata.file_name IN (" + ", ".join(quote_sql_string(n) for n in names) + ")"


def _sides(table: str, version: int, actions: Actions) -> tuple[str, str]:
    """The rows of the files commit `version` removed (before it) and added (at it)."""
    before = f"SELECT * FROM {table} VERSION AS OF {version - 1} WHERE {_in_files(actions.removed)}"
    after = f"SELECT * FROM {table} VERSION AS OF {version} WHERE {_in_files(actions.added)}"
    return before, after


def changed_rows_sql(table: str, version: int, actions: Actions) -> str:
    """The rows commit `version` removed or added, each side without the rows it kept: an
    UPDATE rewrites whole files, and the rows it copied unchanged changed nothing."""
    before, after = _sides(table, version, actions)
    return f"(({before}) EXCEPT ALL ({after})) UNION ALL (({after}) EXCEPT ALL ({before}))"


def _union_rows_sql(table: str, version: int, actions: Actions) -> str:
    # Without EXCEPT ALL (a map column cannot be compared): every row of both sides, wider.
    before, after = _sides(table, version, actions)
    return f"({before}) UNION ALL ({after})"


class ConflictCheck:
    """Judges foreign commits against a node's scope; reads the log's actions once for all."""

    def __init__(
        self, table: str, log: ActionReader, probe: RowProbe, strategy: str = "model"
    ) -> None:
        self.table = table
        self.log = log
        self.probe = probe
        self.node = "snapshot" if strategy == "snapshot" else "model"
        self._types: dict[str, str] | None = None

    def judge(self, commits: Sequence[Commit], scope: Scope) -> list[Judgement]:
        """One judgement per commit, in order; stops after the first conflict."""
        if not commits:
            return []
        try:
            files = self.log.actions(self.table, [c.version for c in commits])
        except Exception as exc:
            return [Judgement(commits[0], True, _undecided(exc))]
        judgements = []
        for commit in commits:
            judgement = self._judge(commit, files.get(commit.version), scope)
            judgements.append(judgement)
            if judgement.conflict:
                break
        return judgements

    def _judge(self, commit: Commit, lines: list[str] | None, scope: Scope) -> Judgement:
        if lines is None:
            return Judgement(
                commit, True, "its commit file could not be read, so it counts as a conflict"
            )
        actions = parse_actions(lines)
        if actions.table_changes:
            kinds = ", ".join(sorted(set(actions.table_changes)))
            return Judgement(commit, True, f"changed the table itself ({kinds})")
        if not actions.data_change:
            return Judgement(commit, False, "no data change")
        where = _partitions(actions)
        if scope.any_change:
            return Judgement(commit, True, f"changed data{where}, and {scope.why_any}")
        try:
            return self._judge_rows(commit, actions, scope, where)
        except Exception as exc:
            return Judgement(commit, True, _undecided(exc), undecided=True)

    def _judge_rows(self, commit: Commit, actions: Actions, scope: Scope, where: str) -> Judgement:
        if self._outside_partitions(actions, scope):
            return Judgement(
                commit,
                False,
                f"changed data{where}, outside the partitions this {self.node} read or writes",
            )
        rows, changed = self._changed_rows(commit.version, actions)
        if not changed:
            return Judgement(commit, False, f"rewrote files{where} without changing a row")
        for read in scope.reads:
            # A read of the whole table saw the changed rows: the first probe said there are some.
            if read.predicate is None or self._hit(rows, read.predicate):
                return Judgement(
                    commit,
                    True,
                    f"changed rows{where}, among them rows this {self.node} read "
                    f"({read.describe()})",
                )
        if scope.replaces:
            predicate = " AND ".join(f"({p})" for p in scope.replaces)
            if self._hit(rows, predicate):
                return Judgement(
                    commit,
                    True,
                    f"changed rows{where}, among them rows in the range this {self.node} "
                    f"replaces ({predicate})",
                )
        if scope.keys and scope.source:
            on = " AND ".join(f"changed.{k} <=> source.{k}" for k in scope.keys)
            narrowed = "".join(f" AND ({p})" for p in scope.key_predicates)
            if self.probe.any_row(
                f"SELECT 1 FROM ({rows}) AS changed JOIN ({scope.source}) AS source "
                f"ON {on}{narrowed} LIMIT 1"
            ):
                keys = ", ".join(scope.keys)
                return Judgement(
                    commit,
                    True,
                    f"changed rows{where}, among them rows with a key ({keys}) this "
                    f"{self.node} {scope.source_verb}",
                )
        return Judgement(
            commit, False, f"changed rows{where} outside what this {self.node} read or writes"
        )

    def _outside_partitions(self, actions: Actions, scope: Scope) -> bool:
        """Whether the commit's partition values alone put every file it changed outside
        each read filter and the replaced range. A merge's keys are checked on the data."""
        if scope.keys or not actions.partition_values or actions.partition_values_unknown:
            return False
        if len(actions.partition_values) > MAX_PARTITIONS:
            return False
        predicates = [r.predicate for r in scope.reads]
        if scope.replaces:
            predicates.append(" AND ".join(f"({p})" for p in scope.replaces))
        if not predicates or None in predicates:
            return False
        try:
            types = self._partition_types()
            named = {name.lower() for name in types}
            # Every file must name every partition column, or its values are unknown.
            if not types or any(
                {k.lower() for k, _ in v} != named for v in actions.partition_values
            ):
                return False
            for predicate in predicates:
                assert predicate is not None
                conjuncts = partition_only(predicate, types)
                if conjuncts is None or self.probe.any_row(
                    values_sql(conjuncts, actions.partition_values, types)
                ):
                    return False
        except Exception:
            return False  # undecided here: the data probe decides
        return True

    def _partition_types(self) -> dict[str, str]:
        """The partition columns whose log values Spark compares as the table's rows do;
        empty (no partition test) when that cannot be told from SQL: under column mapping
        the log names columns by physical name, which a rename can swap with another
        column's; a CHAR(n) column's rows are read padded, its log values are not."""
        if self._types is None:
            types = partition_types(self.probe.fetch(f"DESCRIBE TABLE {self.table}"))
            if types and (self._column_mapping() or self._literals_raw() or self._padded(types)):
                types = {}
            self._types = types
        return self._types

    def _column_mapping(self) -> bool:
        for row in self.probe.fetch(f"SHOW TBLPROPERTIES {self.table}"):
            if str(row[0]) == "delta.columnMapping.mode":
                return str(row[1]).lower() != "none"
        return False

    def _literals_raw(self) -> bool:
        # Under escapedStringLiterals a backslash in the VALUES' quoted values stays a backslash.
        return self._conf("spark.sql.parser.escapedStringLiterals") == "true"

    def _padded(self, types: dict[str, str]) -> bool:
        # A CHAR(n) column describes as `string` (or char(n)): only those need the plan.
        texts = [n for n, t in types.items() if t.lower().split("(")[0] in TEXT_TYPES]
        if not texts:
            return False
        # Without read-side padding the plan shows none, yet CHAR comparisons still pad.
        if self._conf("spark.sql.readSideCharPadding") == "false":
            return True
        columns = ", ".join(quote_name(n) for n in texts)
        plan = self.probe.fetch(f"EXPLAIN SELECT {columns} FROM {self.table}")
        return any("readSidePadding" in str(row[0]) for row in plan)

    def _conf(self, key: str) -> str:
        return (self.probe.session_conf(key) or "").strip().lower()

    def changed_rows(self, version: int) -> str:
        """The rows commit `version` changed, as SQL: what our own MERGE wrote, for the key
        check after the write (the rows it really wrote, not the model SQL evaluated again)."""
        lines = self.log.actions(self.table, [version]).get(version)
        if lines is None:
            raise ValueError(f"the commit file of v{version} could not be read")
        return self._changed_rows(version, parse_actions(lines))[0]

    def _changed_rows(self, version: int, actions: Actions) -> tuple[str, bool]:
        """The changed rows as SQL, and whether there are any: one probe answers both whether
        the exact form runs here and whether it is empty."""
        exact = changed_rows_sql(self.table, version, actions)
        try:
            return exact, self._hit(exact, None)
        except Exception:
            wider = _union_rows_sql(self.table, version, actions)
            return wider, self._hit(wider, None)

    def _hit(self, rows: str, predicate: str | None) -> bool:
        condition = f" WHERE {predicate}" if predicate else ""
        return self.probe.any_row(f"SELECT 1 FROM ({rows}) AS changed{condition} LIMIT 1")


def _partitions(actions: Actions) -> str:
    parts = sorted(actions.partitions - {"unpartitioned"})
    if not parts:
        return ""
    shown = ", ".join(parts[:3]) + (", ..." if len(parts) > 3 else "")
    return f" in partition{'s' if len(parts) > 1 else ''} {shown}"


def _undecided(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    first = lines[0][:200] if lines else type(error).__name__
    return f"could not be checked ({first}), so it counts as a conflict"


def first_conflict(judgements: Sequence[Judgement]) -> Judgement | None:
    return next((j for j in judgements if j.conflict), None)
