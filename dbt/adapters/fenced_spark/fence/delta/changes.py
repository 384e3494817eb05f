"""A Delta table's commits as the conflict analysis reads them (changes.TableChanges): its
commit files, read once and shared with the table's definitions; the rows of the files a
commit removed and added, by `_metadata.file_name` at the versions around it."""

from collections.abc import Collection, Sequence

from dbt.adapters.fenced_spark.fence.changes import Actions, RowProbe
from dbt.adapters.fenced_spark.fence.delta.actions import ActionReader, claim_doubt, parse_actions
from dbt.adapters.fenced_spark.fence.delta.definitions import TableDefinitions
from dbt.adapters.fenced_spark.fence.partitions import quote_sql_string


def _in_files(names: list[str]) -> str:
    if not names:
        return "false"
    return "_metadata.file_name IN (" + ", ".join(quote_sql_string(n) for n in names) + ")"


class DeltaChanges:
    def __init__(self, table: str, log: ActionReader, probe: RowProbe) -> None:
        self.table = table
        self.log = log
        self.probe = probe
        self._lines: dict[int, list[str]] = {}  # commit files read, by version
        self.definitions = TableDefinitions(table, log, probe, self._lines)

    def read(self, versions: Sequence[int]) -> Collection[int]:
        files = self.log.actions(self.table, list(versions))
        self._lines.update(files)
        return set(files)

    def actions(self, version: int) -> Actions:
        return parse_actions(self._lines[version])

    def one(self, version: int) -> Actions | None:
        # Not kept: what the definitions read stays what the analysis itself read.
        lines = self.log.actions(self.table, [version]).get(version)
        return None if lines is None else parse_actions(lines)

    def definition_change(self, version: int, actions: Actions) -> str | None:
        return self.definitions.change(version, actions)

    def doubt(self, actions: Actions) -> str | None:
        return claim_doubt(actions)

    def sides(self, version: int, actions: Actions) -> tuple[str, str]:
        removed, added = _in_files(actions.removed), _in_files(actions.added)
        before = f"SELECT * FROM {self.table} VERSION AS OF {version - 1} WHERE {removed}"
        after = f"SELECT * FROM {self.table} VERSION AS OF {version} WHERE {added}"
        return before, after

    def remaps_columns(self) -> bool:
        for row in self.probe.fetch(f"SHOW TBLPROPERTIES {self.table}"):
            if str(row[0]) == "delta.columnMapping.mode":
                return str(row[1]).lower() != "none"
        return False
