"""dbt's face of the adapter: dbt-spark's adapter with what differs overridden (one line of why
on each), and the entry points the fenced materializations call. The fence lives behind it:
the node's statements are routed in routing.py, the model staged in staging.py, the fenced
write run in fenced_write.py, each thread's node kept in nodes.py."""

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from dbt.adapters.base import available
from dbt.adapters.base.impl import AdapterTrackingRelationInfo
from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.column import SparkColumn
from dbt.adapters.spark.connections import SparkConnectionMethod
from dbt.adapters.spark.impl import SparkAdapter
from dbt_common.invocation import get_invocation_id

from dbt.adapters.fenced_spark import catalog, session, sql_header
from dbt.adapters.fenced_spark.config_keys import FencedSparkConfig
from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager
from dbt.adapters.fenced_spark.fence.errors import FenceError
from dbt.adapters.fenced_spark.fence.node import Phase
from dbt.adapters.fenced_spark.fence.rewriter import reads_self
from dbt.adapters.fenced_spark.fence.statements import READS, statement_kind
from dbt.adapters.fenced_spark.fenced_write import FencedWrite
from dbt.adapters.fenced_spark.handles import ConnectHandle, SessionHandle
from dbt.adapters.fenced_spark.nodes import Nodes, dbt_command
from dbt.adapters.fenced_spark.relation import FencedSparkColumn, FencedSparkRelation, quote_name
from dbt.adapters.fenced_spark.responses import FencedAdapterResponse, WriteRows
from dbt.adapters.fenced_spark.routing import Result, Routing
from dbt.adapters.fenced_spark.run_results import FenceResponses
from dbt.adapters.fenced_spark.staging import Staging

logger = AdapterLogger("FencedSpark")


def records_failure(method: Callable[..., Any]) -> Callable[..., Any]:
    """A fence error raised here keeps its response for run_results.json (run_results.py)."""

    @functools.wraps(method)
    def recorded(self: "FencedSparkAdapter", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except FenceError as failed:
            txn = self.nodes.txn()
            if txn is not None:
                read = {"read_version": txn.state.read_version} if txn.state else {}
                self._responses.record(txn.node, {**read, **failed.response})
            raise

    return recorded


class FencedSparkAdapter(SparkAdapter):
    Relation = FencedSparkRelation
    ConnectionManager = FencedSparkConnectionManager
    AdapterSpecificConfigs = FencedSparkConfig
    connections: FencedSparkConnectionManager

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._responses = FenceResponses()
        self.nodes = Nodes(self.config, self.connections)
        self.routing = Routing(self.nodes, self._spark_execute)
        self.staging = Staging(
            self.nodes, self.routing, self.execute_macro, self._method, self._responses
        )
        self.rows = WriteRows(self.nodes, self._responses)
        self.writes = FencedWrite(self.nodes, self.routing, self.staging, self.rows)
        # dbt builds the adapter before it parses the project: the JVM starts meanwhile.
        if self.config.credentials.method == SparkConnectionMethod.SESSION:
            session.start_early(self.config.credentials, dbt_command())

    @classmethod
    def type(cls) -> str:
        return "fenced_spark"

    @classmethod
    def get_adapter_run_info(cls, config: Any) -> AdapterTrackingRelationInfo:
        # dbt derives the module from the class name ("fencedspark"), which does not exist.
        from dbt.adapters.__about__ import version as base_version

        from dbt.adapters.fenced_spark.__version__ import version

        # dbt's own base class builds this dataclass the same way; its __hash__ is generated.
        return AdapterTrackingRelationInfo(  # type: ignore[abstract]
            adapter_name="fenced_spark",
            base_adapter_version=base_version,
            adapter_version=version,
            model_adapter_details=cls._get_adapter_specific_run_info(config),
        )

    def _method(self) -> str:
        return str(getattr(self.config.credentials.method, "value", ""))

    def pre_model_hook(self, config: Mapping[str, Any]) -> Any:
        # dbt never applies AdapterSpecificConfigs defaults, so delta is made the default here,
        # once, for every materialization that reads file_format.
        node = getattr(config, "model", None)
        if node is not None and node.config.get("file_format") is None:
            node.config["file_format"] = "delta"
        if node is not None and getattr(node, "language", "sql") == "python":
            self.staging.check_python_method(node.unique_id)  # before hooks and materialization
        # The node's compile time ends here: its materialization starts.
        txn = self.nodes.txn()
        if txn is not None and txn.phase == Phase.COMPILE:
            txn.phase = Phase.MATERIALIZE
        return super().pre_model_hook(config)

    def post_model_hook(self, config: Mapping[str, Any], context: Any) -> None:
        # A node that failed mid-step leaves no phase behind for the next node on this thread.
        txn = self.nodes.txn()
        if txn is not None:
            txn.phase = Phase.DONE
            txn.build = None
        super().post_model_hook(config, context)

    @contextmanager
    def connection_named(
        self, name: str, query_header_context: Any = None, should_release_connection: bool = True
    ) -> Iterator[None]:
        # dbt names the node it is about to compile and run on this thread: the node's
        # transaction on its target starts here, so that compile-time reads are pinned too.
        with (
            self.nodes.entered(query_header_context),
            super().connection_named(name, query_header_context, should_release_connection),
        ):
            yield

    def cleanup_connections(self) -> None:
        # dbt cleans up once before it writes run_results.json and once after: the second
        # call fills in the fenced nodes' responses dbt left empty. `dbt debug` has no project.
        try:
            super().cleanup_connections()
        finally:
            target = getattr(self.config, "project_target_path", None)
            if target:
                self._responses.write(target, str(get_invocation_id()))

    def quote(self, identifier: str) -> str:  # type: ignore[override]
        return quote_name(identifier)

    def get_columns_in_relation(self, relation: Any) -> list[SparkColumn]:
        # dbt-spark builds its own SparkColumn, whose `quoted` breaks on a name with a backquote;
        # the target's columns come from the fence's own DESCRIBE while it holds (nodes.py).
        described = self.nodes.described(relation)
        if described is not None:
            columns = self.parse_describe_extended(relation, described)
        else:
            columns = super().get_columns_in_relation(relation)
        return [FencedSparkColumn.of(c) for c in columns]

    def parse_describe_extended(self, relation: Any, raw_rows: Any) -> list[SparkColumn]:
        # dbt's catalog numbers columns from 1; dbt-spark from 0.
        columns = super().parse_describe_extended(relation, raw_rows)
        return [replace(c, column_index=(c.column_index or 0) + 1) for c in columns]

    def parse_columns_from_information(self, relation: Any) -> list[SparkColumn]:
        # The catalog's types as DESCRIBE prints them (`bigint`, `varchar(3)`, `array<int>`), not
        # as the schema tree of SHOW TABLE EXTENDED does (`long`, `string`, `array`): with none
        # here, dbt-spark's catalog asks DESCRIBE, as it already does for every Delta table.
        return []

    def _get_columns_for_catalog(self, relation: Any) -> Iterator[dict[str, Any]]:
        # A Delta table's size is in its log, not DESCRIBE EXTENDED's Statistics: `dbt docs`
        # showed none (catalog.py). One DESCRIBE DETAIL per Delta table that has none.
        columns = list(super()._get_columns_for_catalog(relation))
        if columns and getattr(relation, "is_delta", False) and not catalog.has_stats(columns[0]):
            stats = catalog.detail_stats_of(self.execute, relation)
            for column in columns:
                column.update(stats)
        yield from columns

    def debug_query(self) -> None:
        # `dbt debug` is where users check what they run on: report Spark's and Delta's versions.
        _, table = self.execute(
            "select version() as spark, reflect('io.delta.package', 'VERSION') as delta",
            fetch=True,
        )
        spark, delta = table.rows[0]
        logger.info(f"Spark {str(spark).split()[0]}, Delta Lake {delta}")
        handle = getattr(self.connections.get_thread_connection().handle, "handle", None)
        if isinstance(handle, SessionHandle) and not isinstance(handle, ConnectHandle):
            logger.info(f"Delta's jars: {session.jars_summary(handle.spark)}")

    @records_failure
    def execute(
        self, sql: str, auto_begin: bool = False, fetch: bool = False, limit: int | None = None
    ) -> Result:
        # Inside a fenced node a statement on its target is part of the node's transaction.
        return self.routing.execute(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)

    def _spark_execute(
        self, sql: str, auto_begin: bool = False, fetch: bool = False, limit: int | None = None
    ) -> Result:
        """dbt-spark's execute, looked up at each call (tests and the scorecard patch it)."""
        return super().execute(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)

    def get_column_schema_from_query(self, sql: str) -> list[Any]:
        # A contract's column check sends the header with its probe query too.
        return super().get_column_schema_from_query(self.routing.after_header(sql))

    @available.parse_none
    def submit_python_job(self, parsed_model: dict, compiled_code: str) -> AdapterResponse:
        # dbt-spark submits to Databricks; the script runs in the node's own session instead.
        self.staging.run_python(parsed_model, compiled_code)
        return AdapterResponse(_message="OK")

    # Entry points the macros call ---------------------------------------------------------

    @available
    def sql_header_parts(self, header: str, query: str, node: str) -> tuple[str, str]:
        """For a macro that puts the node's sql_header above its statement: what goes above
        (the header's whole statements, run on their own), and `query` with the header's
        fragment that opens it in front (sql_header.py)."""
        statements, fragment = sql_header.split(header)
        return statements, sql_header.in_front(fragment, query, node)

    @available
    @records_failure
    def fence_begin(
        self,
        relation: FencedSparkRelation,
        strategy: str,
        node: str,
        accepted: list[int] | None = None,
        batch: str | int | None = None,
    ) -> FencedAdapterResponse | None:
        """vB, an earlier run's verdict, a batch already applied (fenced_write.py)."""
        return self.writes.begin(relation, strategy, node, accepted, batch)

    @available
    def fence_tag_build(
        self, relation: FencedSparkRelation, strategy: str, node: str, batch: str | int
    ) -> str:
        """A first run or full refresh with `fence_batch_id`: its CREATE carries the tag."""
        self.writes.tag_build(relation, strategy, node, batch)
        return ""

    @available
    def fence_read_at_compile_time(self) -> bool:
        txn = self.nodes.txn()
        return txn is not None and bool(txn.compile_reads)

    @available
    def fence_hooks_read_self(self, hooks: list[str], relation: FencedSparkRelation) -> bool:
        """Whether a pre-hook (as rendered) reads the target, through any statement
        (fence/statements.py): an `append` that does is a read-modify-write."""
        schema, identifier = str(relation.schema), str(relation.identifier)
        at, current = self.routing.location, self.routing.current_schema
        return any(statement_kind(h, schema, identifier, at(h), current(h)) in READS for h in hooks)

    @available
    def fence_reads_self(
        self, sql: str, relation: FencedSparkRelation, language: str = "sql"
    ) -> bool:
        if language == "python":
            return True  # what Python reads is known only once it has run (python_model.py)
        return self.fence_read_at_compile_time() or reads_self(
            sql,
            str(relation.schema),
            str(relation.identifier),
            self.routing.location(sql),
            self.routing.current_schema(sql),
        )

    @available
    @records_failure
    def fence_stage(
        self,
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        language: str = "sql",
        inline: bool = False,
    ) -> str:
        """The model SQL, its self-reads pinned to the fence's vB, in the run's temp view; the
        statement that made it, for target/run. A Python model runs here, and its DataFrame is
        the view. `inline` (SQL only): the pinned SQL is the write's own source instead, as a
        subquery, returned; the view's CREATE, DESCRIBE and DROP are not sent."""
        txn = self.nodes.node()
        txn.phase = Phase.MODEL
        txn.language = language
        if inline and language == "sql":
            txn.source = ""
        assert txn.state is not None
        return self.staging.stage(relation, staging, compiled_code, txn.state)

    @available
    def fence_rows_begin(self) -> str:
        """Before dbt-spark writes an incremental model (its statement 'main', which the
        statement macro in python.sql marks): a commit afterwards is the write's."""
        self.rows.begin()
        return ""

    @available
    def fence_rows_response(
        self, response: Any, relation: FencedSparkRelation, batch_of: str | None = None
    ) -> Any:
        """dbt-spark's response to that write, with its commit's row counts. A microbatch
        model's (`batch_of`: its first batch, which creates the table) is kept with its fenced
        batches' for run_results.json, where dbt records none."""
        return self.rows.response(response, relation, batch_of)

    @available
    def fence_query_columns(self, sql: str) -> list[FencedSparkColumn]:
        """The columns of a query's result as Spark analyses it: DESCRIBE QUERY runs no job.
        `sql` is the model's query with its sql_header's fragment in front (header_query); the
        header's statements run first, once per node, as before the model's CREATE, and fail
        the model as there. None when Spark cannot analyse the query so: the statement that
        runs it says why."""
        self.routing.run_header()
        try:
            _, table = self.execute(f"describe query\n{sql}", fetch=True)
        except Exception as exc:
            logger.debug(f"fenced_spark: DESCRIBE QUERY failed, the query's columns unknown: {exc}")
            return []
        return [FencedSparkColumn(column=str(name), dtype=str(dtype)) for name, dtype, *_ in table]

    @available
    def fence_phase(self, phase: str) -> str:
        """The materialization says where it is: `schema_change` around dbt's ALTERs,
        `post_hook` around the post-hooks, `model` after either."""
        self.nodes.node().phase = Phase(phase)
        return ""

    @available
    @records_failure
    def fence_write(
        self,
        sql: str,
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        retries: int = 0,
        scope: Mapping[str, Any] | None = None,
    ) -> FencedAdapterResponse:
        """The write, fenced, with fence_retries; its log line and response (fenced_write.py)."""
        return self.writes.write(sql, relation, staging, compiled_code, retries, scope)
