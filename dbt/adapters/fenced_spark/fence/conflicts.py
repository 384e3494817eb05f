"""Conflicts, not commits: whether a foreign commit after vB touched what the node read or
writes (docs/fence.md, "What conflicts with what").

The table's log says most of it, read through its format (changes.TableChanges; Delta's is
fence/delta/changes.py). A commit whose `metaData` or `protocol` differ from the table's
before it changed the table itself; one that writes them as they were (every RESTORE
does) is judged by its files like any other. A commit whose file actions all carry
`dataChange: false` (OPTIMIZE, auto compaction) is marked so by its writer: that claim stands
unless the commit's own row counts contradict it, and then it is judged as a data change. For a
commit that changed rows, the rows it changed are read back exactly (each side restricted to
the files it removed and added, at the versions around it) and tested
against the node's footprint: the filters of its reads of the target, the keys it merges, the
range it replaces. Whatever cannot be decided is a conflict.
"""

from collections.abc import Sequence
from dataclasses import replace

from dbt.adapters.fenced_spark.fence.changes import Actions, RowProbe, TableChanges, as_data
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.outcome import first_line
from dbt.adapters.fenced_spark.fence.partitions import (
    MAX_PARTITIONS,
    partition_only,
    partition_types,
    values_sql,
)
from dbt.adapters.fenced_spark.fence.scope import Judgement, Scope
from dbt.adapters.fenced_spark.relation import quote_name

# Partition column types whose rows Spark may read padded (CHAR(n) describes as one of them).
TEXT_TYPES = ("string", "char", "varchar")

# Why the `insert` strategy commits over a foreign commit that only inserted rows.
INSERT_SERIAL = (
    "its MERGE inserts only keys not in the table, so committing gives the serial result"
)


def changed_rows_sql(before: str, after: str) -> str:
    """The rows a commit removed or added, each side without the rows it kept: an UPDATE
    rewrites whole files, and the rows it copied unchanged changed nothing."""
    return f"(({before}) EXCEPT ALL ({after})) UNION ALL (({after}) EXCEPT ALL ({before}))"


class ConflictCheck:
    """Judges foreign commits against a node's scope; reads their changes from the table's
    format (`changes`, fence/format.py) once for all."""

    def __init__(
        self, table: str, changes: TableChanges, probe: RowProbe, strategy: str = "model"
    ) -> None:
        self.table = table
        self.changes = changes
        self.probe = probe
        self.node = "snapshot" if strategy == "snapshot" else "model"
        # `insert` (MERGE ... WHEN NOT MATCHED THEN INSERT) never changes a row in the table.
        self.inserts = strategy == "insert"
        self._types: dict[str, str] | None = None

    def judge(self, commits: Sequence[Commit], scope: Scope) -> list[Judgement]:
        """One judgement per commit, in order; stops after the first conflict."""
        if not commits:
            return []
        try:
            read = self.changes.read([c.version for c in commits])
        except Exception as exc:
            return [Judgement(commits[0], True, _undecided(exc))]
        judgements = []
        for commit in commits:
            judgement = self._judge(commit, commit.version in read, scope)
            judgements.append(judgement)
            if judgement.conflict:
                break
        return judgements

    def _judge(self, commit: Commit, read: bool, scope: Scope) -> Judgement:
        if not read:
            return Judgement(
                commit, True, "its commit file could not be read, so it counts as a conflict"
            )
        actions = self.changes.actions(commit.version)
        if actions.table_changes:
            kinds = ", ".join(sorted(set(actions.table_changes)))
            return Judgement(commit, True, f"changed the table itself ({kinds})")
        if actions.metadata is not None or actions.protocol is not None:
            # Every RESTORE writes both, as the table had them unless it restores another
            # schema: only a change to them changes the table itself.
            changed = self.changes.definition_change(commit.version, actions)
            if changed is not None:
                return Judgement(commit, True, changed)
        claim = ""
        if not actions.data_change:
            if actions.rearranged is None:
                return Judgement(commit, False, "no data change")
            doubt = self.changes.doubt(actions)
            if doubt is None:
                return Judgement(commit, False, "marked no data change by its writer")
            claim = f"marked no data change by its writer, yet {doubt}: "
        actions = as_data(actions)
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
        before, after = self.changes.sides(version, actions)
        return not self.probe.any_row(
            f"SELECT 1 FROM (({before}) EXCEPT ALL ({after})) AS removed LIMIT 1"
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
            if types and (
                self.changes.remaps_columns() or self._literals_raw() or self._padded(types)
            ):
                types = {}
            self._types = types
        return self._types

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
        actions = self.changes.one(version)
        if actions is None:
            raise ValueError(f"the commit file of v{version} could not be read")
        return self._changed_rows(version, actions)[0]

    def _changed_rows(self, version: int, actions: Actions) -> tuple[str, bool, bool]:
        """The changed rows as SQL, whether there are any, and whether the SQL is the exact
        form: one probe answers both whether it runs here and whether it is empty."""
        before, after = self.changes.sides(version, actions)
        exact = changed_rows_sql(before, after)
        try:
            return exact, self._hit(exact, None), True
        except Exception:
            # Without EXCEPT ALL (a map column cannot be compared): every row of both sides.
            wider = f"({before}) UNION ALL ({after})"
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


def _undecided(error: BaseException) -> str:
    return f"could not be checked ({first_line(error)}), so it counts as a conflict"
