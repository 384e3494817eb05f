import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dbt.adapters.base import available
from dbt.adapters.base.impl import AdapterTrackingRelationInfo
from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.column import SparkColumn
from dbt.adapters.spark.impl import SparkAdapter, SparkConfig
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager
from dbt.adapters.fenced_spark.fence.delta_log import LogTail
from dbt.adapters.fenced_spark.fence.errors import (
    FenceUnverified,
    FenceViolation,
    Outcome,
    engine_message,
    first_lines,
)
from dbt.adapters.fenced_spark.fence.history import (
    Commit,
    HistoryReader,
    SqlHistory,
    parse_history,
)
from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState, conflict_name
from dbt.adapters.fenced_spark.fence.rewriter import pin_self_reads, reads_self
from dbt.adapters.fenced_spark.relation import FencedSparkColumn, FencedSparkRelation, quote_name

logger = AdapterLogger("FencedSpark")


class FencedSparkConfig(SparkConfig):
    file_format: str = "delta"
    fenced: bool | None = None
    fence_retries: int | None = None


@dataclass
class FencedAdapterResponse(AdapterResponse):
    read_version: int | None = None
    commit_version: int | None = None
    fence_outcome: str | None = None


class FenceSql:
    """The fence's SQL runner: its statements and history reads on the model's connection."""

    def __init__(self, connections: FencedSparkConnectionManager) -> None:
        self.connections = connections

    def execute(self, sql: str) -> None:
        self.connections.add_query(sql, auto_begin=False)

    def history(self, table: str, limit: int) -> list[Commit]:
        names, rows = self.connections.fetch_rows(f"DESCRIBE HISTORY {table} LIMIT {limit}")
        return parse_history(names, rows)

    def log(self) -> HistoryReader:
        # The embedded session reads the Delta log itself: no Spark job, no log listing.
        handle = self.connections.get_thread_connection().handle
        spark = getattr(getattr(handle, "handle", None), "spark", None)
        if spark is None:
            return SqlHistory(self)
        return LogTail(spark, fallback=SqlHistory(self))


class FencedSparkAdapter(SparkAdapter):
    Relation = FencedSparkRelation
    ConnectionManager = FencedSparkConnectionManager
    AdapterSpecificConfigs = FencedSparkConfig
    connections: FencedSparkConnectionManager

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._steps = threading.local()

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

    def pre_model_hook(self, config: Mapping[str, Any]) -> Any:
        # dbt never applies AdapterSpecificConfigs defaults, so delta is made the default here,
        # once, for every materialization that reads file_format.
        # A step a failed model left open (a compile error mid-schema-change) ends here.
        self._steps.state = None
        node = getattr(config, "model", None)
        if node is not None and node.config.get("file_format") is None:
            node.config["file_format"] = "delta"
        return super().pre_model_hook(config)

    def quote(self, identifier: str) -> str:  # type: ignore[override]
        return quote_name(identifier)

    def get_columns_in_relation(self, relation: Any) -> list[SparkColumn]:
        # dbt-spark builds its own SparkColumn, whose `quoted` breaks on a name with a backquote.
        return [FencedSparkColumn.of(c) for c in super().get_columns_in_relation(relation)]

    def debug_query(self) -> None:
        # `dbt debug` is where users check what they run on: report Spark's and Delta's versions.
        _, table = self.execute(
            "select version() as spark, reflect('io.delta.package', 'VERSION') as delta",
            fetch=True,
        )
        spark, delta = table.rows[0]
        logger.info(f"Spark {str(spark).split()[0]}, Delta Lake {delta}")

    def _fence(self) -> Fence:
        runner = FenceSql(self.connections)
        return Fence(runner, self.connections.single_attempt, log=runner.log())

    def execute(
        self, sql: str, auto_begin: bool = False, fetch: bool = False, limit: int | None = None
    ) -> tuple[AdapterResponse, Any]:
        # Inside a fenced step (the schema change) each statement is tagged and strict, the
        # confs are set around that one statement only, and a Delta conflict becomes a fence
        # violation.
        step: FenceState | None = getattr(self._steps, "state", None)
        if step is None:
            return super().execute(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)
        fence = self._fence()
        try:
            with fence.tagged(step, "schema_change", strict=True):
                return super().execute(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)
        except Exception as exc:
            if conflict_name(exc) is None:
                raise
            self._steps.state = None
            fence.precheck(step)
            raise

    # Fence steps, called by the incremental materialization -------------------------------

    @available
    def fence_capture(self, relation: FencedSparkRelation) -> int:
        return self._fence().latest_version(relation.fence_name)

    @available
    def fence_stage(
        self,
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        fence: dict[str, Any],
    ) -> str:
        """The model SQL, its self-reads pinned to the fence's vB, in the run's temp view."""
        state = FenceState.from_dict(fence)
        pinned = pin_self_reads(
            compiled_code, str(relation.schema), str(relation.identifier), state.read_version
        )
        view_sql = self.execute_macro(
            "create_temporary_view", kwargs={"relation": staging, "compiled_code": pinned}
        )
        try:
            FenceSql(self.connections).execute(str(view_sql))
        except DbtRuntimeError:
            # A pinned read of a table dropped or replaced since vB fails here: the fence says so.
            self._fence().precheck(state)
            raise
        return ""

    @available
    def fence_reads_self(self, sql: str, relation: FencedSparkRelation) -> bool:
        return reads_self(sql, str(relation.schema), str(relation.identifier))

    @available
    def fence_schema_change_begin(self, fence: dict[str, Any]) -> str:
        state = FenceState.from_dict(fence)
        self._fence().precheck(state)
        self._steps.state = state
        return ""

    @available
    def fence_schema_change_end(self) -> dict[str, Any]:
        state: FenceState = self._steps.state
        self._steps.state = None
        return self._fence().after_schema_change(state).to_dict()

    @available
    def fence_write(
        self,
        sql: str,
        fence: dict[str, Any],
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        retries: int = 0,
    ) -> FencedAdapterResponse:
        state = FenceState.from_dict(fence)

        def restage(new: FenceState) -> None:
            # A retry recomputes from the new vB: same staging view, pinned anew.
            self.fence_stage(relation, staging, compiled_code, new.to_dict())

        try:
            result = self._fence().run(state, sql, retries=int(retries), restage=restage)
        except (FenceViolation, FenceUnverified):
            raise
        except DbtRuntimeError as exc:
            # Delta's own refusal (duplicate source keys, rows outside replace_where): say which
            # model, and keep Delta's words without the JVM's stack.
            raise DbtRuntimeError(
                f"Fenced {state.strategy} into {state.display} ({state.node}) failed; nothing "
                f"was written. Delta said:\n{first_lines(engine_message(exc))}"
            ) from exc
        finally:
            # Temp views live as long as the connection; this one must not outlive the run.
            FenceSql(self.connections).execute(f"DROP VIEW IF EXISTS {staging.render()}")
        if result.outcome == Outcome.COMMITTED:
            logger.info(
                f"fenced {state.strategy} into {state.display}: "
                f"read v{result.read_version} -> committed v{result.commit_version}"
            )
        else:
            logger.info(
                f"fenced {state.strategy} into {state.display}: "
                f"read v{result.read_version}, no change, nothing committed"
            )
        return FencedAdapterResponse(
            _message=f"{state.strategy.upper()} {result.outcome.value}",
            read_version=result.read_version,
            commit_version=result.commit_version,
            fence_outcome=result.outcome.value,
        )
