"""What a write's dbt response says beside dbt-spark's: the fence's versions and outcome, and
the rows the write's commit inserted, updated and deleted (row_counts.py), fenced or not."""

from dataclasses import dataclass
from typing import Any

from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger

from dbt.adapters.fenced_spark import row_counts
from dbt.adapters.fenced_spark.fence.delta.words import LAST_COMMIT
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.nodes import Nodes
from dbt.adapters.fenced_spark.relation import FencedSparkRelation
from dbt.adapters.fenced_spark.run_results import FenceResponses

logger = AdapterLogger("FencedSpark")


@dataclass
class FencedAdapterResponse(AdapterResponse):
    read_version: int | None = None
    commit_version: int | None = None
    fence_outcome: str | None = None
    # Foreign commits after vB that the write committed over, each with why it could.
    tolerated: list[str] | None = None
    # The node's own commits before its write: `v1 DELETE (pre_hook)`.
    steps: list[str] | None = None
    # Over SQL, where the catalog placed the table: the next run takes this run's verified
    # commit as checked only for a table still there (SqlLog.settled).
    table_location: str | None = None
    # Beside dbt's rows_affected (their sum): the write's commit's counts (row_counts.py).
    rows_inserted: int | None = None
    rows_updated: int | None = None
    rows_deleted: int | None = None


class WriteRows:
    def __init__(self, nodes: Nodes, responses: FenceResponses) -> None:
        self.nodes = nodes
        self.responses = responses

    def written(
        self, table: str, version: int | None, commit: Commit | None = None, fenced: bool = False
    ) -> dict[str, Any]:
        """The response's row counts of the write that committed `version` (none: it changed
        nothing). Never the node's error: without them the response only says less."""
        if version is None:
            return row_counts.NOTHING.fields()
        txn = self.nodes.txn() if fenced else None
        if txn is None:
            log, node = self.nodes.fence().log, None
        else:
            # Right after the fenced write: where its steps found the table, no DESCRIBE more;
            # a commit read there counts only if it carries the node's tag.
            log = self.nodes.runner(txn.described).log(txn.logs, continued=True)
            node = txn.node
        try:
            counts = row_counts.written(log, table, version, commit, node)
        except Exception as exc:
            logger.debug(f"fenced_spark: the rows of {table}'s v{version} are unknown: {exc}")
            return {}
        return counts.fields() if counts is not None else {}

    def begin(self) -> None:
        """Before dbt-spark's own write: what the session committed before is forgotten, so
        that a commit afterwards is the write's."""
        self.nodes.runner().set_session_conf(LAST_COMMIT, None)

    def response(
        self, response: Any, relation: FencedSparkRelation, batch_of: str | None = None
    ) -> Any:
        """dbt-spark's response to that write, with its commit's row counts; as it was when it
        committed nothing (Delta makes no commit for a write that changed nothing)."""
        try:
            version = self.nodes.runner().session_conf(LAST_COMMIT)
        except Exception as exc:
            logger.debug(f"fenced_spark: {LAST_COMMIT} unread, rows unknown: {exc}")
            return response
        if version is None or not version.isdigit() or not isinstance(response, AdapterResponse):
            return response
        counts = self.written(relation.fence_name, int(version))
        if not counts:
            return response
        counted = FencedAdapterResponse(
            _message=response._message, code=response.code, query_id=response.query_id, **counts
        )
        if batch_of:
            self.responses.record(batch_of, counted.to_dict(omit_none=True))
        return counted
