"""Conflicts, not commits: whether a foreign commit after vB touched what the node read or
writes (docs/fence.md, "What conflicts with what").

The Delta log says most of it. A commit whose `metaData` or `protocol` differ from the
table's before it changed the table itself; one that writes them as they were (every RESTORE
does) is judged by its files like any other. A commit whose file actions all carry
`dataChange: false` (OPTIMIZE, auto compaction) is marked so by its writer: that claim stands
unless the commit's own row counts contradict it, and then it is judged as a data change. For a
commit that changed rows, the rows it changed are read back exactly (`_metadata.file_name`
restricts each side to the files it removed and added, at the versions around it) and tested
against the node's footprint: the filters of its reads of the target, the keys it merges, the
range it replaces. Whatever cannot be decided is a conflict.
"""

import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from urllib.parse import unquote

from dbt.adapters.fenced_spark.fence.footprint import ReadFilter
from dbt.adapters.fenced_spark.fence.history import Commit, checksum_file
from dbt.adapters.fenced_spark.fence.partitions import (
    MAX_PARTITIONS,
    PartitionValues,
    partition_only,
    partition_types,
    quote_sql_string,
    values_sql,
)
from dbt.adapters.fenced_spark.fence.sql_log import delta_log
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
    # The rows the files added and removed hold (their stats' numRecords, less the rows a
    # deletion vector deletes); None once one of them does not say.
    rows_added: int | None = 0
    rows_removed: int | None = 0
    table_changes: list[str] = field(default_factory=list)  # a user's domain, an unknown action
    # The table's definition as the commit writes it; compared with the table's before it.
    metadata: dict[str, Any] | None = None
    protocol: dict[str, Any] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # commitInfo.operationMetrics
    # The files marked `dataChange: false` by the commit's writer (a compaction's), apart.
    rearranged: "Actions | None" = None

    @property
    def data_change(self) -> bool:
        return bool(self.added or self.removed)

    def _file(self, kind: str, body: Mapping[str, Any]) -> None:
        name = unquote(posixpath.basename(str(body["path"])))
        (self.added if kind == "add" else self.removed).append(name)
        values = body.get("partitionValues") or {}
        self.partition_values.add(tuple(sorted(values.items())))
        if not isinstance(body.get("partitionValues"), dict):
            self.partition_values_unknown = True
        self.partitions.add(
            ", ".join(f"{k}={'null' if v is None else v}" for k, v in sorted(values.items()))
            or "unpartitioned"
        )
        rows = _live_rows(body)
        if kind == "add":
            self.rows_added = (
                None if rows is None or self.rows_added is None else self.rows_added + rows
            )
        else:
            self.rows_removed = (
                None if rows is None or self.rows_removed is None else self.rows_removed + rows
            )


def _live_rows(body: Mapping[str, Any]) -> int | None:
    """The rows a file action's file holds for the table: its stats' numRecords, less those
    its deletion vector deletes. None when its stats do not say (optional on a remove)."""
    try:
        stats = body.get("stats")
        records = json.loads(stats).get("numRecords") if isinstance(stats, str) else None
        deleted = (body.get("deletionVector") or {}).get("cardinality", 0)
        return None if records is None else int(records) - int(deleted)
    except (ValueError, TypeError, AttributeError):
        return None


# Actions that say nothing about rows or the table's definition. Delta's own domains
# (`delta.*`: row tracking's high-water mark, clustering) move with data changes checked
# through the files; a user's domain is the user's meaning, so it conflicts.
_NEUTRAL = {"txn", "cdc", "checkpointMetadata", "sidecar"}


def parse_actions(lines: Iterable[str]) -> Actions:
    actions = Actions()
    rearranged = Actions()
    for line in lines:
        if not line.strip():
            continue
        for kind, body in json.loads(line).items():
            if kind in ("add", "remove"):
                # Delta's protocol requires dataChange; a file that does not say changed data.
                marked = body.get("dataChange", True) is False
                (rearranged if marked else actions)._file(kind, body)
            elif kind == "metaData":
                actions.metadata = body
            elif kind == "protocol":
                actions.protocol = body
            elif kind == "commitInfo":
                metrics = body.get("operationMetrics")
                actions.metrics = metrics if isinstance(metrics, dict) else {}
            elif kind == "domainMetadata":
                domain = str(body.get("domain", ""))
                if not domain.startswith("delta."):
                    actions.table_changes.append(f"domainMetadata {domain}")
            elif kind not in _NEUTRAL:
                actions.table_changes.append(kind)
    if rearranged.data_change:
        actions.rearranged = rearranged
    return actions


def _as_data(actions: Actions) -> Actions:
    """The commit with the files its writer marked `dataChange: false` judged as data files
    too: its claim is not borne out, or the commit mixes both kinds."""
    other = actions.rearranged
    if other is None:
        return actions
    return replace(
        actions,
        added=actions.added + other.added,
        removed=actions.removed + other.removed,
        partitions=actions.partitions | other.partitions,
        partition_values=actions.partition_values | other.partition_values,
        partition_values_unknown=actions.partition_values_unknown or other.partition_values_unknown,
        rearranged=None,
    )


# Metrics of rows a commit deleted, updated or inserted: a rewrite that changes no row has
# none of them (OPTIMIZE, REORG and auto compaction report files and bytes only).
_ROW_METRICS = {
    "numDeletedRows": "deleted",
    "numUpdatedRows": "updated",
    "numInsertedRows": "inserted",
    "numTargetRowsInserted": "inserted",
    "numTargetRowsUpdated": "updated",
    "numTargetRowsDeleted": "deleted",
    "numTargetRowsMatchedUpdated": "updated",
    "numTargetRowsMatchedDeleted": "deleted",
    "numTargetRowsNotMatchedBySourceUpdated": "updated",
    "numTargetRowsNotMatchedBySourceDeleted": "deleted",
}


def _rows(count: int) -> str:
    return f"{count} row{'' if count == 1 else 's'}"


def _metric(metrics: Mapping[str, Any], key: str) -> int | None:
    try:
        return int(metrics[key])
    except (KeyError, ValueError, TypeError):
        return None


def claim_doubt(actions: Actions) -> str | None:
    """What in a commit marked `dataChange: false` contradicts its writer's claim, from the
    log alone (no Spark job): its metrics count rows deleted, updated or inserted, or the
    rows it wrote are not the rows of the files it removed. None: nothing does."""
    files = actions.rearranged
    if files is None:
        return None
    for key, verb in _ROW_METRICS.items():
        count = _metric(actions.metrics, key)
        if count:
            return f"its metrics count {_rows(count)} {verb} ({key})"
    written = _metric(actions.metrics, "numOutputRows")
    removed = files.rows_removed
    if not files.removed:
        if written:
            return f"it wrote {_rows(written)} (numOutputRows) and removed no file"
        return None  # files re-added as they were (new stats, row ids), or nothing said
    if removed is None:
        if written is not None:
            return (
                f"it wrote {_rows(written)} (numOutputRows) in place of files whose rows "
                "its log does not count"
            )
        # Neither its metrics nor the files it removed count rows (a writer with history
        # metrics off): the claim cannot be checked from the log, so its rows are read.
        return "its log counts none of the rows of the files it removed"
    if written is not None and written != removed:
        return f"the files it removed hold {_rows(removed)} and it wrote {written} (numOutputRows)"
    added = files.rows_added
    if added is not None and added != removed:
        return f"the files it removed hold {_rows(removed)} and those it added {added}"
    if not actions.metrics:
        # From a writer with metrics off that kept the files' counts: a partition rewritten
        # WITH ('dataChange' = 'false') removes and adds as many rows as it changes.
        return "its writer recorded no metrics, and row counts alone do not show its rows unchanged"
    return None


# Fields of a `metaData` action that change nothing a reader or writer of the table relies
# on: a RESTORE across a CREATE OR REPLACE writes the older createdTime, one across a
# COMMENT ON TABLE the older description.
_DOCUMENTATION = {"createdTime", "description", "name"}
_METADATA_LABELS = {
    "id": "table id",
    "format": "format",
    "schemaString": "schema",
    "partitionColumns": "partition columns",
}


def metadata_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What a `metaData` action changes against the table's before it, by field: the schema
    (as JSON, not as text), the partition columns, each property, the format, the id."""
    changed = []
    for key in sorted((before.keys() | after.keys()) - _DOCUMENTATION):
        old, new = before.get(key), after.get(key)
        if key == "schemaString":
            old, new = _json(old), _json(new)
        if key == "configuration":
            old, new = old or {}, new or {}
            keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            if keys:
                more = ", ..." if len(keys) > 3 else ""
                changed.append(f"properties {', '.join(keys[:3])}{more}")
        elif old != new:
            changed.append(_METADATA_LABELS.get(key, key))
    return changed


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def protocol_key(protocol: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        protocol.get("minReaderVersion"),
        protocol.get("minWriterVersion"),
        sorted(protocol.get("readerFeatures") or ()),
        sorted(protocol.get("writerFeatures") or ()),
    )


class ActionReader(Protocol):
    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]: ...


class RowProbe(Protocol):
    def any_row(self, sql: str) -> bool: ...

    def fetch(self, sql: str) -> list[Sequence[Any]]: ...

    def session_conf(self, key: str) -> str | None: ...

    def location(self, table: str) -> str: ...


# How far back from a commit the table's metaData and protocol before it are looked for in
# the log, when Delta's checksum of the version before it is missing (one read of files by
# name).
STATE_LOOKBACK = 32

# Why the `insert` strategy commits over a foreign commit that only inserted rows.
INSERT_SERIAL = (
    "its MERGE inserts only keys not in the table, so committing gives the serial result"
)


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
        # `insert` (MERGE ... WHEN NOT MATCHED THEN INSERT) never changes a row in the table.
        self.inserts = strategy == "insert"
        self._types: dict[str, str] | None = None
        self._lines: dict[int, list[str]] = {}  # commit files read, by version
        self._location: str | None = None
        # The table's metaData and protocol at a version, as far as they could be found.
        self._states: dict[int, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}

    def judge(self, commits: Sequence[Commit], scope: Scope) -> list[Judgement]:
        """One judgement per commit, in order; stops after the first conflict."""
        if not commits:
            return []
        try:
            files = self.log.actions(self.table, [c.version for c in commits])
        except Exception as exc:
            return [Judgement(commits[0], True, _undecided(exc))]
        self._lines.update(files)
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
        if actions.metadata is not None or actions.protocol is not None:
            # Every RESTORE writes both, as the table had them unless it restores another
            # schema: only a change to them changes the table itself.
            changed = self._definition_change(commit.version, actions)
            if changed is not None:
                return Judgement(commit, True, changed)
        claim = ""
        if not actions.data_change:
            if actions.rearranged is None:
                return Judgement(commit, False, "no data change")
            doubt = claim_doubt(actions)
            if doubt is None:
                return Judgement(commit, False, "marked no data change by its writer")
            claim = f"marked no data change by its writer, yet {doubt}: "
        actions = _as_data(actions)
        try:
            judgement = self._judge_data(commit, actions, scope, _partitions(actions), claim)
        except Exception as exc:
            return Judgement(commit, True, claim + _undecided(exc), undecided=True)
        return replace(judgement, why=claim + judgement.why)

    def _judge_data(
        self, commit: Commit, actions: Actions, scope: Scope, where: str, claim: str
    ) -> Judgement:
        if not scope.any_change:
            return self._judge_rows(commit, actions, scope, where)
        if not claim:
            return Judgement(commit, True, f"changed data{where}, and {scope.why_any}")
        # A claim of no data change that its counts do not bear out: its rows say.
        if not self._changed_rows(commit.version, actions)[1]:
            return Judgement(commit, False, f"rewrote files{where} without changing a row")
        return Judgement(commit, True, f"changed rows{where}, and {scope.why_any}")

    def _judge_rows(self, commit: Commit, actions: Actions, scope: Scope, where: str) -> Judgement:
        if self._outside_partitions(actions, scope):
            return Judgement(
                commit,
                False,
                f"changed data{where}, outside the partitions this {self.node} read or writes",
            )
        rows, changed, exact = self._changed_rows(commit.version, actions)
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
            keys = ", ".join(scope.keys)
            # `insert` over a commit that only inserted rows, none of them read: its MERGE,
            # at a snapshot that holds them, inserts only the keys they lack.
            inserted = self.inserts and self._only_inserted(commit.version, actions, exact)
            written = scope.source_verb == "wrote"
            if inserted and not written:
                return Judgement(
                    commit,
                    False,
                    f"only inserted rows{where}, none this model read: {INSERT_SERIAL}",
                )
            # After the write: a key it inserted too is in the table twice. Its MERGE never
            # matches a NULL key (`=`), so NULL keys are inserted in any order.
            equal = "=" if inserted else "<=>"
            on = " AND ".join(f"changed.{k} {equal} source.{k}" for k in scope.keys)
            narrowed = "".join(f" AND ({p})" for p in scope.key_predicates)
            if self.probe.any_row(
                f"SELECT 1 FROM ({rows}) AS changed JOIN ({scope.source}) AS source "
                f"ON {on}{narrowed} LIMIT 1"
            ):
                return Judgement(
                    commit,
                    True,
                    f"changed rows{where}, among them rows with a key ({keys}) this "
                    f"{self.node} {scope.source_verb}",
                )
            if inserted:
                return Judgement(
                    commit,
                    False,
                    f"only inserted rows{where}, none this model read and none with a key "
                    f"({keys}) it {scope.source_verb}: {INSERT_SERIAL}",
                )
        return Judgement(
            commit, False, f"changed rows{where} outside what this {self.node} read or writes"
        )

    def _only_inserted(self, version: int, actions: Actions, exact: bool) -> bool:
        """Whether the commit removed no row (it may have rewritten files it kept rows of):
        no file removed, or none of their rows missing after it. Unknown (no exact form of
        the rows here) is no."""
        if not actions.removed:
            return True
        if not exact:
            return False
        before, after = _sides(self.table, version, actions)
        return not self.probe.any_row(
            f"SELECT 1 FROM (({before}) EXCEPT ALL ({after})) AS removed LIMIT 1"
        )

    def _definition_change(self, version: int, actions: Actions) -> str | None:
        """How the commit's metaData and protocol change the table's at the version before
        it, as the reason it conflicts; None when they are the table's own."""
        written = [
            kind
            for kind, body in (("metaData", actions.metadata), ("protocol", actions.protocol))
            if body is not None
        ]
        why = f"neither its checksum nor the {STATE_LOOKBACK + 1} commits up to it say"
        changes: list[str] = []
        try:
            metadata, protocol = self._state(version - 1)
            if actions.metadata is not None and metadata is not None:
                fields = metadata_changes(metadata, actions.metadata)
                if fields:
                    changes.append(f"metaData: {', '.join(fields)}")
            if (
                actions.protocol is not None
                and protocol is not None
                and protocol_key(protocol) != protocol_key(actions.protocol)
            ):
                changes.append("protocol")
        except Exception as exc:  # an unreadable log, a definition that does not parse
            metadata = protocol = None
            why = _first_line(exc)
        if (actions.metadata is not None and metadata is None) or (
            actions.protocol is not None and protocol is None
        ):
            return (
                f"wrote {', '.join(written)}, which could not be compared with the table's at "
                f"v{version - 1} ({why}), so it counts as a conflict"
            )
        return f"changed the table itself ({'; '.join(changes)})" if changes else None

    def _state(self, version: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The table's metaData and protocol at `version`: its own commit file when it holds
        both (a RESTORE, a CREATE), else Delta's checksum of the version (its state there,
        exact), else the newest of each in the commits up to it, STATE_LOOKBACK of them."""
        if version not in self._states:
            known = self._lines.get(version)
            found = _definition(known) if known is not None else (None, None)
            if None in found:
                found = self._checksum(version) or self._walk(version)
            self._states[version] = found
        return self._states[version]

    def _checksum(self, version: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Delta's checksum of `version` (`N.crc`, its state there), read by the server as the
        commit files are, any connection method; None when there is none to read (a RESTORE
        writes none, nor may another engine) or it does not parse."""
        try:
            if self._location is None:
                self._location = self.probe.location(self.table)
            path = f"{delta_log(self._location)}/{checksum_file(version)}".replace("`", "``")
            rows = self.probe.fetch(
                "SELECT get_json_object(value, '$.metadata'), get_json_object(value, "
                f"'$.protocol') FROM text.`{path}`"
            )
            metadata, protocol = json.loads(str(rows[0][0])), json.loads(str(rows[0][1]))
        except Exception:
            return None
        if len(rows) != 1 or not isinstance(metadata, dict) or not isinstance(protocol, dict):
            return None
        return metadata, protocol

    def _walk(self, version: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        low = max(0, version - STATE_LOOKBACK)
        wanted = [v for v in range(low, version + 1) if v not in self._lines]
        if wanted:
            self._lines.update(self.log.actions(self.table, wanted))
        metadata: dict[str, Any] | None = None
        protocol: dict[str, Any] | None = None
        for below in range(version, low - 1, -1):
            if below not in self._lines:
                break  # cleaned up: what came before is in a checkpoint
            older = _definition(self._lines[below])
            metadata = metadata if metadata is not None else older[0]
            protocol = protocol if protocol is not None else older[1]
            if metadata is not None and protocol is not None:
                break
        return metadata, protocol

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

    def _changed_rows(self, version: int, actions: Actions) -> tuple[str, bool, bool]:
        """The changed rows as SQL, whether there are any, and whether the SQL is the exact
        form: one probe answers both whether it runs here and whether it is empty."""
        exact = changed_rows_sql(self.table, version, actions)
        try:
            return exact, self._hit(exact, None), True
        except Exception:
            wider = _union_rows_sql(self.table, version, actions)
            return wider, self._hit(wider, None), False

    def _hit(self, rows: str, predicate: str | None) -> bool:
        condition = f" WHERE {predicate}" if predicate else ""
        return self.probe.any_row(f"SELECT 1 FROM ({rows}) AS changed{condition} LIMIT 1")


def _partitions(actions: Actions) -> str:
    parts = sorted(actions.partitions - {"unpartitioned"})
    if not parts:
        return ""
    shown = ", ".join(parts[:3]) + (", ..." if len(parts) > 3 else "")
    return f" in partition{'s' if len(parts) > 1 else ''} {shown}"


def _definition(lines: Iterable[str]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The metaData and protocol actions of one commit file, None where it has none."""
    actions = parse_actions(lines)
    return actions.metadata, actions.protocol


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__


def _undecided(error: BaseException) -> str:
    return f"could not be checked ({_first_line(error)}), so it counts as a conflict"


def first_conflict(judgements: Sequence[Judgement]) -> Judgement | None:
    return next((j for j in judgements if j.conflict), None)
