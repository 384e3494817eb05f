"""The model staged for the fenced write: its SQL with every read of its target pinned to vB,
as the run's temporary view or as the write's own source; a Python model run in the node's own
session, reading through a pinned session. Also the view's cleanup, and a unique_key the model
lacks named as a staged model would name it."""

from collections.abc import Callable
from contextlib import nullcontext, suppress
from dataclasses import replace
from typing import Any

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import CompilationError, DbtRuntimeError

from dbt.adapters.fenced_spark import python_model
from dbt.adapters.fenced_spark.fence.delta.words import GONE_SINCE_VB
from dbt.adapters.fenced_spark.fence.errors import (
    FenceError,
    FenceViolation,
    FenceWriteRefused,
    never_written,
)
from dbt.adapters.fenced_spark.fence.node import NodeTransaction
from dbt.adapters.fenced_spark.fence.rewriter import as_subquery, pin_self_reads
from dbt.adapters.fenced_spark.fence.state import FenceState
from dbt.adapters.fenced_spark.fence.statements import READ, pin_statement, statement_kind
from dbt.adapters.fenced_spark.handles import spark_errors
from dbt.adapters.fenced_spark.nodes import Nodes
from dbt.adapters.fenced_spark.relation import FencedSparkRelation
from dbt.adapters.fenced_spark.routing import Routing
from dbt.adapters.fenced_spark.run_results import FenceResponses

logger = AdapterLogger("FencedSpark")


def _nothing_stands(refused: FenceError) -> bool:
    """Spark refused the write and no step of ours stands, or the analysis could not judge a
    commit's rows before anything of ours committed."""
    if isinstance(refused, FenceWriteRefused):
        return refused.response["standing"] == []
    if isinstance(refused, FenceViolation):
        report = refused.report
        never = report.our_version is None and not report.ours and not report.rolled_back
        return never and any(j.undecided for j in report.judged.values())
    return False


class Staging:
    def __init__(
        self,
        nodes: Nodes,
        routing: Routing,
        execute_macro: Callable[..., Any],
        method: Callable[[], str],
        responses: FenceResponses,
    ) -> None:
        self.nodes = nodes
        self.routing = routing
        self.execute_macro = execute_macro
        self.method = method  # the profile's connection method
        self.responses = responses

    def stage(
        self,
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        state: FenceState,
        diagnose: bool = True,
    ) -> str:
        if self.nodes.node().language == "python":
            return self._stage_python(relation, staging, compiled_code, state)
        pinned = pin_self_reads(
            compiled_code,
            str(relation.schema),
            str(relation.identifier),
            state.pinned,
            self.routing.location(compiled_code),
            self.routing.current_schema(compiled_code),
        )
        txn = self.nodes.node()
        if txn.source is not None:
            # Evaluated by the write, in this session: the header's settings hold.
            self.routing.run_header()
            txn.source = as_subquery(pinned)
            return txn.source
        view_sql = self.execute_macro(
            "create_temporary_view", kwargs={"relation": staging, "compiled_code": pinned}
        )
        # The view is evaluated by the write, in this session: the header's settings hold.
        self.routing.run_header()
        try:
            self.nodes.runner().execute(str(view_sql))
            self.nodes.node().staged_on = self.nodes.connections.get_thread_connection().handle
        except DbtRuntimeError:
            # A pinned read of a table dropped or replaced since vB fails here: the fence says so
            # (from a read of the log, however recently the head was read).
            if diagnose:
                self.nodes.fence().precheck(replace(state, head=None))
            raise
        return str(view_sql)

    def _stage_python(
        self,
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        state: FenceState,
    ) -> str:
        txn = self.nodes.node()

        def current_schema() -> str | None:
            # Only for a bare name the model reads (`spark.table("orders")`): a statement.
            if txn.current_schema is None:
                txn.current_schema = self.nodes.runner().current_schema()
            return txn.current_schema

        pin = python_model.Pin(
            schema=txn.schema,
            identifier=txn.identifier,
            table=txn.table,
            version=state.pinned,
            current_schema=current_schema,
            pin_sql=lambda sql: self.pin_read(txn, sql, state.pinned),
        )
        name = txn.node
        try:
            with spark_errors():
                python_model.stage(
                    self.python_session(name), compiled_code, name, str(staging.identifier), pin
                )
        except DbtRuntimeError as exc:
            # A pinned read of a table dropped or replaced since vB fails here: the fence says
            # so. Any other failure is the model's own, and says so itself.
            text = str(exc)
            if GONE_SINCE_VB.search(text) and txn.identifier.lower() in text.lower():
                self.nodes.fence().precheck(replace(state, head=None))
            raise
        txn.reads.extend(pin.reads)
        return (
            f"# staged as the temporary view {staging.identifier}; its reads of "
            f"{txn.display} through `session` pinned to v{state.pinned}"
        )

    def pin_read(self, txn: NodeTransaction, sql: str, version: int) -> str:
        """A Python model's SQL (`session.sql`): a read of its table pinned to `version`, any
        other statement as it is."""
        location, current = self.routing.location(sql), self.routing.current_schema(sql)
        if statement_kind(sql, txn.schema, txn.identifier, location, current) != READ:
            return sql
        return pin_statement(sql, txn.schema, txn.identifier, version, location, current)

    def check_python_method(self, model: str) -> None:
        method = self.method()
        if method not in python_model.PYTHON_METHODS:
            raise DbtRuntimeError(
                f"Python model {model}: method '{method}' cannot run Python models (a Thrift "
                "client sends SQL, it has no SparkSession to run them in); run it on a target "
                f"with method {' or '.join(python_model.PYTHON_METHODS)}, or write it in SQL"
            )

    def python_session(self, model: str) -> Any:
        """The node's own SparkSession, where its Python runs."""
        self.check_python_method(model)
        connections = self.nodes.connections
        # Its DataFrame calls are statements no add_query sees: they may change any table,
        # and leave in the session what no RESET clears.
        connections.may_have_changed_tables()
        connections.keep_no_session()
        return connections.get_thread_connection().handle.handle.spark

    def run_python(self, parsed_model: dict, compiled_code: str) -> None:
        """A Python model's script (dbt's submit_python_job), in the node's own session."""
        model = str(parsed_model.get("unique_id", parsed_model.get("name")))
        spark = self.python_session(model)
        method = (parsed_model.get("config") or {}).get("submission_method")
        if method:
            logger.warning(
                f"fenced_spark: {model} sets submission_method {method!r}, dbt-spark's way to "
                "submit to Databricks; it runs in the connection's own SparkSession instead"
            )
        txn = self.nodes.txn()
        build = txn.build if txn is not None else None

        def tag() -> Any:
            # A batch's first run or full refresh is that batch's write (fence_tag_build): the
            # table's write carries its tag, nothing else the script commits does.
            if build is None:
                return nullcontext()
            return self.nodes.fence().tagged(build, "write", strict=False)

        with spark_errors():
            python_model.run_script(spark, compiled_code, model, tag)

    def check_unique_key(
        self,
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        state: FenceState,
        refused: FenceError,
    ) -> None:
        """A refusal of a write whose source is the model SQL itself, of which nothing stands:
        Spark refused the write, or the conflict analysis could not join the model's rows. A
        unique_key the model lacks fails both alike: say so as a staged model would have
        (validate.sql), in place of the refusal. Only now does the run pay for the view that
        reads the model's columns; anything else failing leaves the refusal as it is."""
        txn = self.nodes.node()
        if txn.source is None or not state.scope.keys or not _nothing_stands(refused):
            return
        keys = list(state.scope.keys)
        source, txn.source = txn.source, None
        try:
            try:
                self.stage(relation, staging, compiled_code, state, diagnose=False)
                found = self.execute_macro(
                    "fence_missing_unique_key", kwargs={"staging": staging, "unique_key": keys}
                )
            except Exception:
                return
            finally:
                with suppress(Exception):  # never in place of the refusal
                    self.drop(staging)
        finally:
            txn.source = source  # a retry pins the write's own source anew
        if not (found["missing"] and found["columns"]):
            return
        self.responses.record(txn.node, never_written(state, []))
        try:
            self.execute_macro(
                "fence_validate_unique_key",
                kwargs={
                    "staging": staging,
                    "unique_key": keys,
                    "relation": relation,
                    "found": found,
                },
            )
        except CompilationError as missing:
            # as the staged check raises it: dbt names the model, not the macro
            raise CompilationError(missing.msg) from None

    def drop(self, staging: FencedSparkRelation, failed: bool = False) -> None:
        # Temp views live as long as their session. The embedded JVM's sessions live on. A
        # Connect session kept for a later node loses its temp views first (connect.clear).
        if self.nodes.node().source is not None:
            return  # no view was made
        runner = self.nodes.runner()
        drop = f"DROP VIEW IF EXISTS {staging.render()}"
        if not runner.over_sql():
            runner.execute(drop)
            return
        # A Thrift session ends with the node, but closing it analyses each temp view's query
        # again to uncache it (Delta's snapshot at vB): 45 ms, against 6-11 ms for this DROP,
        # which uncaches by name and runs no job, so it is answered at once. Only on the
        # session that holds the view (after a reconnect the name could find a permanent
        # view), after a verdict (a failed node's session may be cancelled or lost), and
        # never failing the node: its session ends anyway.
        connections = self.nodes.connections
        handle = connections.get_thread_connection().handle
        if runner.over_connect() or failed or self.nodes.node().staged_on is not handle:
            return
        with suppress(Exception), connections.at_once(), connections.fence_own():
            runner.execute(drop)
