"""Every statement a fenced node sends, routed: inside the node's transaction a read of its
target is pinned to vB, a pre-hook's or schema change's write is a strict step of ours, a
post-hook's write is tagged; everything else runs as dbt-spark runs it. The node's sql_header
is split off the statement dbt glues it to, and runs first, once."""

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger
from dbt_common.clients.agate_helper import empty_table
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import sql_header
from dbt.adapters.fenced_spark.fence.context import LOOKBACK
from dbt.adapters.fenced_spark.fence.delta.words import conflict_name
from dbt.adapters.fenced_spark.fence.errors import FenceError, FenceViolation
from dbt.adapters.fenced_spark.fence.node import (
    COUNT,
    PIN,
    STEP,
    STEP_READ,
    TAG,
    NodeTransaction,
    Phase,
    names_a_path,
)
from dbt.adapters.fenced_spark.fence.rewriter import names_bare
from dbt.adapters.fenced_spark.fence.statements import WRITE, statement_kind
from dbt.adapters.fenced_spark.nodes import Nodes
from dbt.adapters.fenced_spark.run_state import first_word

logger = AdapterLogger("FencedSpark")

Result = tuple[AdapterResponse, Any]
# dbt-spark's own execute: (sql, auto_begin=, fetch=, limit=).
Run = Callable[..., Result]


def builds(sql: str, txn: NodeTransaction) -> bool:
    """dbt-spark's CREATE [OR REPLACE] TABLE of the node's target, on a first run or rebuild."""
    verb = first_word(sql)
    return (
        verb in ("CREATE", "REPLACE") and statement_kind(sql, txn.schema, txn.identifier) == WRITE
    )


class Routing:
    def __init__(self, nodes: Nodes, run: Run) -> None:
        self.nodes = nodes
        self.run = run

    def execute(
        self, sql: str, auto_begin: bool = False, fetch: bool = False, limit: int | None = None
    ) -> Result:
        rest = self.after_header(sql)
        if rest is not sql and not sql_header.has_statement(rest):
            return AdapterResponse(_message="OK"), empty_table()  # the header was all of it
        return self._route(rest, auto_begin=auto_begin, fetch=fetch, limit=limit)

    def after_header(self, sql: str) -> str:
        """dbt glues the node's sql_header to a statement; Spark runs one statement per call:
        the header's whole statements run first (once per node), and the statement without them
        is returned, a fragment that opens its query still in front; `sql` itself when it has
        none."""
        header = self.nodes.header()
        if header is None:
            return sql
        rest = sql_header.split_off(sql, header.text)
        if rest is None:
            sql_header.check_placed(sql, header.fragment, header.node)
            return sql
        self.run_header()
        return self.after_header(rest)  # dbt may glue it twice (a test's own and ours)

    def run_header(self) -> None:
        """The node's sql_header, each statement on its own, once, in the node's session."""
        header = self.nodes.header()
        if header is None or header.ran:
            return
        header.ran = True
        for number, statement in enumerate(sql_header.statements(header.text), 1):
            try:
                self._route(statement)
            except FenceError:
                raise
            except DbtRuntimeError as failed:
                raise DbtRuntimeError(
                    f"{header.node}: statement {number} of its sql_header failed: {failed.msg}"
                ) from failed

    def _route(
        self, sql: str, auto_begin: bool = False, fetch: bool = False, limit: int | None = None
    ) -> Result:
        txn = self.nodes.txn()
        if txn is not None and txn.build is not None and builds(sql, txn):
            with self.nodes.fence().tagged(txn.build, "write", strict=False):
                return self.run(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)
        self.location(sql)
        self.current_schema(sql)
        action = txn.action(sql) if txn is not None else None
        if txn is None or action is None:
            return self.run(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)
        if action == PIN and self._captured(txn):
            sql = txn.pin(sql)
        elif action == COUNT and self._captured(txn):
            txn.count(sql)  # no pin reaches it (a variable's text, a permanent view): as written
        elif action in (STEP, STEP_READ) and self._captured(txn):
            # A compile-time write may come first: it starts the node's transaction too.
            if action == STEP_READ:
                txn.reads.append(sql)  # a script: what it read is not known, so all of it
            return self._own_step(txn, sql, fetch=fetch, limit=limit)
        elif action == TAG:
            assert txn.state is not None
            with self.nodes.fence().tagged(txn.state, txn.step, strict=False):
                return self.run(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)
        return self.run(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)

    def location(self, sql: str) -> str | None:
        """The node's table's location, looked up once per node and only for SQL that reads
        a Delta path: it costs a statement."""
        txn = self.nodes.txn()
        if txn is None:
            return None
        if txn.location is None and not txn.unfenced and names_a_path(sql):
            try:
                txn.location = self.nodes.runner().location(txn.table)
            except (DbtRuntimeError, IndexError):
                return None  # not a Delta table (yet): nothing to pin
        return txn.location

    def current_schema(self, sql: str) -> str | None:
        """The session's current schema, looked up once per node and only for SQL that names
        the node's table bare (after a hook's `USE` that reads it): it costs a statement."""
        txn = self.nodes.txn()
        if txn is None:
            return None
        if txn.current_schema is None and not txn.unfenced and names_bare(sql, txn.identifier):
            try:
                txn.current_schema = self.nodes.runner().current_schema()
            except (DbtRuntimeError, IndexError):
                return None
        return txn.current_schema

    def _captured(self, txn: NodeTransaction) -> bool:
        """vB, at the node's first read of its target; False when it is not a Delta table
        (yet): the read runs as written and the materialization decides."""
        if txn.state is not None:
            return True
        fence = self.nodes.fence()
        try:
            settled = fence.settled(txn.table)
            version = fence.latest_version(txn.table) if settled is None else settled
        except DbtRuntimeError:
            txn.unfenced = True
            return False
        txn.settled = settled is not None
        logger.debug(
            f"fenced_spark: {txn.display} read at {txn.phase.value} time: vB is v{version}"
        )
        txn.start(txn.strategy, version)
        return True

    def _own_step(self, txn: NodeTransaction, sql: str, fetch: bool, limit: int | None) -> Result:
        """One statement of ours on the target before the write: pre-checked, tagged, strict,
        and the next step expects the version it produced."""
        assert txn.state is not None
        txn.stepped = True
        txn.state = replace(txn.state, head=None)  # a step is pre-checked from a read of its own
        fence = self.nodes.fence()
        if txn.phase == Phase.COMPILE:
            # Touched at compile time: a read-modify-write, fenced as a compile-time read is.
            txn.compile_reads.append(sql)
            if not txn.checked and not (txn.settled and txn.batch is None):
                # Before our first commit: an earlier run's unverified commit must not be
                # buried under it (fence_begin's check stops at the node's own commits), and
                # a batch already applied must not be touched (fence_begin then says so).
                # Only a batch id needs the whole window: the earlier-runs search stops early.
                recent = list(fence.log.recent(txn.table, LOOKBACK)) if txn.batch else None
                fence.check_earlier_runs(
                    txn.state, txn.accepted, iter(recent) if recent is not None else None
                )
                txn.applied = fence.batch_applied(txn.state, recent or ())
                txn.checked = True
            if txn.applied is not None:
                return AdapterResponse(_message="SKIPPED"), empty_table()
        try:
            txn.state = fence.precheck(txn.state)
            try:
                with (
                    fence.tagged(txn.state, txn.step, strict=True),
                    self.nodes.connections.single_attempt(),
                ):
                    result = self.run(sql, fetch=fetch, limit=limit)
            except Exception as exc:
                if (conflict := conflict_name(exc)) is None:
                    raise
                fence.refuse(
                    txn.state, f"Delta's conflict detection during the {txn.step} ({conflict})"
                )
            txn.state = fence.after_step(txn.state, txn.step)
        except FenceViolation as refused:
            # fence_retries retries the write alone; a refusal here is never retried.
            refused.report.no_retry = f"the refusal came in a {txn.step.replace('_', '-')} step"
            raise FenceViolation(refused.report) from refused
        return result
