"""An in-memory table with Delta's commit rules, enough to drive the fence's protocol in unit
tests: versions, readVersion, the userMetadata conf and RESTORE. Real
Spark + Delta runs the same paths in tests/functional."""

import re
from collections.abc import Callable

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.delta.words import LAST_COMMIT, USER_METADATA
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.state import set_conf_sql

_SET = re.compile(r"SET (\S+?)=`(.*)`$|SET (\S+?)=(\S+)$", re.S)


class FakeTable:
    def __init__(self) -> None:
        self.commits = [Commit(0, "CREATE TABLE", None, None)]
        self.rows: list[frozenset[str]] = [frozenset()]
        self.conf: dict[str, str] = {}
        # Called with the next statement right before it takes its snapshot: a foreign
        # writer's slot (it may also raise, as a refused commit does).
        self.before: Callable[[str], None] = lambda sql: None
        # A lost session (a Connect server restarted): every statement fails until the runner
        # reconnects, which works only while the server is back.
        self.lost = False
        self.server_back = True
        self.reconnects = 0

    @property
    def latest(self) -> int:
        return self.commits[-1].version

    def commit(
        self,
        operation: str,
        rows: frozenset[str],
        read: int,
        metadata=None,
        parameters=None,
        metrics=None,
    ) -> None:
        self.commits.append(
            Commit(
                self.latest + 1,
                operation,
                read,
                metadata,
                metrics=metrics or {},
                parameters=parameters or {},
            )
        )
        self.rows.append(rows)

    def foreign(self, row: str) -> None:
        self.commit("WRITE", self.rows[-1] | {row}, self.latest)

    def reachable(self) -> None:
        if self.lost:
            raise DbtRuntimeError("[NO_ACTIVE_SESSION] No active Spark session found")

    def reconnect(self) -> None:
        self.reconnects += 1
        if not self.server_back:
            raise DbtRuntimeError("Could not reach the Spark Connect server: UNAVAILABLE")
        self.lost = False
        self.conf = {}  # a new session has none of the old one's confs

    def execute(self, sql: str) -> None:
        self.reachable()
        if sql.startswith("RESET "):
            self.conf.pop(sql.split()[1], None)
            return
        if match := _SET.match(sql):
            quoted, value, plain, bare = match.groups()
            self.conf[quoted or plain] = value.replace("``", "`") if quoted else bare
            return
        before, self.before = self.before, lambda sql: None
        before(sql)
        if "no change" in sql:
            return  # Delta makes no commit for a write that changed nothing
        read = self.latest
        if restore := re.match(r"RESTORE TABLE \S+ TO VERSION AS OF (\d+)", sql):
            rows, operation = self.rows[int(restore.group(1))], "RESTORE"
            parameters = {"version": restore.group(1)}
        else:
            rows, operation = self.rows[read] | {sql}, sql.split()[0].upper()
            parameters = {}
        metrics = None
        if "empty" in sql:
            # A write with the fence's SetTransaction that changed no rows commits only that.
            rows, metrics = (
                self.rows[read],
                {"numTargetFilesAdded": "0", "numTargetFilesRemoved": "0"},
            )
        self.commit(operation, rows, read, self.conf.get(USER_METADATA), parameters, metrics)
        self.conf[LAST_COMMIT] = str(self.latest)  # Delta records it in the committing session

    def history(self, table: str, limit: int) -> list[Commit]:
        self.reachable()
        return self.commits[-limit:]

    # The conflict analysis's reads: every commit here added a data file, and every probe of
    # the rows a commit changed finds one, so any foreign commit conflicts (OPTIMIZE aside).
    def location(self, table: str) -> str:
        self.reachable()
        return "/fake/t"

    def session_conf(self, key: str) -> str | None:
        self.reachable()
        return self.conf.get(key)

    def set_session_conf(self, key: str, value: str | None) -> None:
        self.execute(set_conf_sql(key, value))

    def fetch(self, sql: str) -> list[tuple[str, str]]:
        self.reachable()
        versions = [int(v) for v in re.findall(r"(\d{20})\.json", sql)]
        rows = []
        for version in versions:
            commit = self.commits[version]
            change = "false" if commit.operation == "OPTIMIZE" else "true"
            action = f'{{"add": {{"path": "f{version}", "dataChange": {change}}}}}'
            rows.append((f"{version:020d}.json", action))
        return rows

    def any_row(self, sql: str) -> bool:
        self.reachable()
        return True
