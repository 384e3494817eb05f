"""The seam between the fence's steps and a table format (Delta today; Iceberg next): the SQL
runner the fence speaks through, and what a format does for a write. The steps ask a
TableFormat; only protocol.py and the adapter name a format (fence/delta/)."""

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from dbt.adapters.fenced_spark.fence.changes import RowProbe, TableChanges
from dbt.adapters.fenced_spark.fence.history import Commit, FenceTag


class SqlRunner(Protocol):
    def execute(self, sql: str) -> None: ...

    def history(self, table: str, limit: int) -> list[Commit]: ...

    def fetch(self, sql: str) -> list[Sequence[Any]]: ...

    # DESCRIBE EXTENDED's rows: where the catalog says the table lives, and its columns.
    def describe(self, table: str) -> list[Sequence[Any]]: ...

    def location(self, table: str) -> str: ...

    def any_row(self, sql: str) -> bool: ...

    def session_conf(self, key: str) -> str | None: ...

    # `value` None resets the key: to what it held before the fence set it, or as SQL's RESET.
    def set_session_conf(self, key: str, value: str | None) -> None: ...

    # A lost session or server: open the connection again, to read the log; nothing is re-sent.
    def reconnect(self) -> None: ...


class Token(Protocol):
    """What one send of a write carries so that the format refuses it inside its own commit
    when another fenced write overtook it: judged up to `horizon`."""

    @property
    def horizon(self) -> int: ...

    # What the write carries for the format to check (Delta: its SetTransaction's version).
    @property
    def version(self) -> int: ...

    # Whether `commit`, after the horizon, is a fenced write the format's check of us saw.
    def explains(self, commit: Commit) -> bool: ...


class TableFormat(Protocol):
    # The format's name in what the fence says ("Delta refused the write ...").
    name: str

    # The label the session itself would give a commit (an audit pre-hook's), put back after.
    def label(self) -> str | None: ...

    # Our tag on every commit of the statements inside; `strict`: the commit must directly
    # follow the snapshot it read. Everything set is reset after, even when they fail.
    def tagged(
        self, tag: FenceTag, strict: bool, token: Token | None
    ) -> AbstractContextManager[None]: ...

    # The token for a write judged up to `horizon`; None when the format cannot refuse
    # inside its commit (verification then covers the gap).
    def token(self, table: str, horizon: int) -> Token | None: ...

    # A transaction the session's own confs would add to our write: (its conf, its value).
    def session_txn(self) -> tuple[str, str] | None: ...

    # Send the write: the format's own conflict (nothing committed), or None.
    def publish(self, sql: str) -> BaseException | None: ...

    # The format's name for a conflict it refused a commit for, None for any other error.
    def conflict_name(self, error: BaseException) -> str | None: ...

    # This session's last commit, forgotten before our write and read after it (None: unknown).
    def forget_own_commit(self) -> None: ...

    def own_commit(self) -> int | None: ...

    # The table's commits as the conflict analysis reads them, rows read through `probe`.
    def changes(self, table: str, probe: RowProbe) -> TableChanges: ...

    # Put the table back to `version` in one statement (a commit of its own).
    def undo(self, table: str, version: int) -> None: ...
