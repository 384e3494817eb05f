"""The fence's SqlRunner over a bare SparkSession (embedded, or a Connect client), as the
adapter's FenceSql runs it over a dbt connection: for tests and the bench that drive a Fence
without dbt."""

from collections.abc import Sequence
from typing import Any

from dbt.adapters.fenced_spark.fence.delta.history import parse_history
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.handles import spark_errors


class SessionRunner:
    def __init__(self, session: Any) -> None:
        self.session = session

    def execute(self, sql: str) -> None:
        with spark_errors():
            self.session.sql(sql)

    def history(self, table: str, limit: int) -> list[Commit]:
        with spark_errors():
            frame = self.session.sql(f"DESCRIBE HISTORY {table} LIMIT {limit}")
            return parse_history(frame.columns, [tuple(r) for r in frame.collect()])

    def fetch(self, sql: str) -> list[Sequence[Any]]:
        with spark_errors():
            return [tuple(r) for r in self.session.sql(sql).collect()]

    def any_row(self, sql: str) -> bool:
        return bool(self.fetch(sql))

    def describe(self, table: str) -> list[Sequence[Any]]:
        return self.fetch(f"describe extended {table}")

    def location(self, table: str) -> str:
        with spark_errors():
            return str(self.session.sql(f"DESCRIBE DETAIL {table}").collect()[0]["location"])

    def session_conf(self, key: str) -> str | None:
        value = self.session.conf.get(key, None)
        return None if value is None else str(value)

    def set_session_conf(self, key: str, value: str | None) -> None:
        with spark_errors():
            if value is None:
                self.session.conf.unset(key)
            else:
                self.session.conf.set(key, value)

    def reconnect(self) -> None:
        pass  # a bare session has nothing to open again: a test that loses it loses its runner
