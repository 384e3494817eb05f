import functools
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, replace
from typing import Any

from dbt.adapters.base import available
from dbt.adapters.base.impl import AdapterTrackingRelationInfo
from dbt.adapters.contracts.connection import AdapterResponse, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.column import SparkColumn
from dbt.adapters.spark.connections import SparkConnectionMethod
from dbt.adapters.spark.impl import SparkAdapter
from dbt_common.clients.agate_helper import empty_table
from dbt_common.exceptions import CompilationError, DbtRuntimeError
from dbt_common.invocation import get_invocation_id

from dbt.adapters.fenced_spark import (
    catalog,
    connect,
    python_model,
    row_counts,
    session,
    sql_header,
    thrift,
)
from dbt.adapters.fenced_spark.config_keys import FencedSparkConfig
from dbt.adapters.fenced_spark.connections import (
    BackoffPyhiveConnectionWrapper,
    ConnectHandle,
    FencedSparkConnectionManager,
    SessionHandle,
    spark_errors,
)
from dbt.adapters.fenced_spark.fence import sequence
from dbt.adapters.fenced_spark.fence.batch import batch_id
from dbt.adapters.fenced_spark.fence.conflicts import Scope
from dbt.adapters.fenced_spark.fence.delta_log import LogTail
from dbt.adapters.fenced_spark.fence.errors import (
    FenceError,
    FenceViolation,
    FenceWriteRefused,
    Outcome,
    never_written,
    node_kind,
)
from dbt.adapters.fenced_spark.fence.footprint import WHOLE_TABLE, statement_reads
from dbt.adapters.fenced_spark.fence.history import (
    Commit,
    HistoryReader,
    SqlHistory,
    parse_history,
)
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
from dbt.adapters.fenced_spark.fence.protocol import (
    LAST_COMMIT,
    LOOKBACK,
    MAX_COMMIT_ATTEMPTS,
    SNAPSHOT,
    USER_METADATA,
    Fence,
    FenceState,
    conflict_name,
    set_conf_sql,
)
from dbt.adapters.fenced_spark.fence.rewriter import (
    as_subquery,
    names_bare,
    pin_self_reads,
    reads_self,
)
from dbt.adapters.fenced_spark.fence.sql_log import SqlLog, location_of
from dbt.adapters.fenced_spark.fence.statements import (
    READ,
    READS,
    WRITE,
    pin_statement,
    statement_kind,
)
from dbt.adapters.fenced_spark.relation import FencedSparkColumn, FencedSparkRelation, quote_name
from dbt.adapters.fenced_spark.run_results import FenceResponses, LastRun, last_runs
from dbt.adapters.fenced_spark.run_state import first_word

logger = AdapterLogger("FencedSpark")

_DEST = re.compile(r"\bDBT_INTERNAL_DEST\.", re.I)
# What a read pinned to vB fails with when the table is gone or replaced since.
_GONE_SINCE_VB = re.compile(
    r"DELTA_VERSION_NOT_FOUND|VersionNotFound|TABLE_OR_VIEW_NOT_FOUND|DELTA_TABLE_NOT_FOUND"
    r"|FileNotFound|PATH_NOT_FOUND"
)

# The fence's own statements that run no Spark job (FenceSql.fetch): its EXPLAINs of commit
# files and of its target, SHOW TBLPROPERTIES.
_NO_JOB = {"EXPLAIN", "SHOW"}
# Confs only the fence's own statements set over Thrift: their RESETs may wait (thrift.py).
_DEFERRABLE = (USER_METADATA, MAX_COMMIT_ATTEMPTS, sequence.APP_ID_CONF, sequence.VERSION_CONF)

# Strategies that never pin at compile time: unfenced by design, or fenced per batch.
UNFENCED_AT_COMPILE_TIME = ("insert_overwrite", "microbatch")


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


class FenceSql:
    """The fence's SQL runner: its statements and history reads on the model's connection."""

    def __init__(
        self,
        connections: FencedSparkConnectionManager,
        described: dict[str, tuple[int, Any]] | None = None,
    ) -> None:
        self.connections = connections
        self._before: dict[tuple[int, str], str | None] = {}
        self.described = described

    def execute(self, sql: str) -> None:
        self.connections.add_query(sql, auto_begin=False)

    def history(self, table: str, limit: int) -> list[Commit]:
        names, rows = self.connections.fetch_rows(f"DESCRIBE HISTORY {table} LIMIT {limit}")
        return parse_history(names, rows)

    def fetch(self, sql: str) -> list[Sequence[Any]]:
        # Answered at once over Thrift where no Spark job runs (_NO_JOB); its reads of commit
        # files and of rows are jobs, which may wait behind others' on a shared cluster: polled.
        return list(self.connections.fetch_rows(sql, first_word(sql) in _NO_JOB)[1])

    def any_row(self, sql: str) -> bool:
        return bool(self.fetch(sql))

    def describe(self, table: str) -> list[Sequence[Any]]:
        # dbt-spark's own statement for a table's columns: kept for the node (`described`),
        # it answers dbt-spark's DESCRIBE of the target later in the node (impl.py).
        changes = self.connections.table_changes()
        with self.connections.fence_own():
            _, rows = self.connections.execute(f"describe extended {table}", fetch=True)
        if self.described is not None:
            self.described[table] = (changes, rows)
        return [tuple(row) for row in rows]

    def _handle(self) -> Any:
        # What dbt-spark's connection wrapper holds: ours (session, Connect) or pyhive's.
        return getattr(self.connections.get_thread_connection().handle, "handle", None)

    def _session(self) -> Any:
        handle = self._handle()
        if not isinstance(handle, SessionHandle):
            return None
        self.connections.prime()
        return handle.spark

    def session_conf(self, key: str) -> str | None:
        # SQL's `SET key` redacts values that look secret (a label with "url" in it): the
        # session's own conf is read where there is one.
        spark = self._session()
        if spark is not None:
            value = spark.conf.get(key, None)
            return None if value is None else str(value)
        handle = self.connections.get_thread_connection().handle
        if isinstance(handle, BackoffPyhiveConnectionWrapper) and key in handle.leftovers.deferred:
            # Deferred only where the fence's SET found nothing to put back (send_conf).
            return None
        if key == USER_METADATA and isinstance(handle, BackoffPyhiveConnectionWrapper):
            # Only a statement sets it: in a session where none did, the server's own value.
            return thrift.server_default(handle, key, lambda: self._read_conf(key))
        return self._read_conf(key)

    def _read_conf(self, key: str) -> str | None:
        rows = self.fetch(f"SET {key}")
        value = rows[0][1] if rows else None
        return None if value in (None, "<undefined>") else str(value)

    def set_session_conf(self, key: str, value: str | None) -> None:
        if (
            key == LAST_COMMIT
            and value is None
            and not self.connections.session_may_have_committed()
        ):
            # Delta sets it when this session commits, and nothing in it could have yet: a
            # statement over Thrift saved.
            logger.debug(f"fenced_spark: {key} is unset: nothing in this session committed")
            return
        self.send_conf(key, value)

    def send_conf(self, key: str, value: str | None) -> None:
        # The session's conf API where there is a session: over Connect one config call takes
        # under a millisecond where SQL's SET takes 20-30 ms (docs/benchmarks.md). A Thrift
        # connection has only SQL, and its RESET. dbt.log shows both.
        spark = self._session()
        if spark is None:
            self._send_sql_conf(key, value)
            return
        shown = set_conf_sql(key, value)
        logger.debug(f"fenced_spark: {shown} (through the session's conf)")
        self.connections.sent_one()
        # A reset puts back what the key held before the fence set it (a cluster default, a
        # hook's SET), as SQL's RESET would put back the cluster default.
        held = (id(spark), key)
        try:
            with spark_errors():
                if value is not None:
                    self._before.setdefault(held, spark.conf.get(key, None))
                    spark.conf.set(key, value)
                    return
                before = self._before.pop(held, None)
                if before is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, before)
        except DbtRuntimeError as exc:
            self.connections.keep_no_session(failed=exc)
            raise
        except Exception as exc:
            # A closed Connect channel, a dead JVM: a failed statement, as over SQL.
            self.connections.keep_no_session(failed=exc)
            raise DbtRuntimeError(f"{shown} failed: {exc}") from exc

    def _send_sql_conf(self, key: str, value: str | None) -> None:
        handle = self.connections.get_thread_connection().handle
        confs = None
        if isinstance(handle, BackoffPyhiveConnectionWrapper) and key in _DEFERRABLE:
            confs = handle.leftovers
        if confs is not None and value is None and key in confs.fence_set:
            # Between the fence's SET and this RESET only the statement it tags ran.
            confs.deferred[key] = confs.fence_set.pop(key)
            logger.debug(f"fenced_spark: RESET {key} waits for a statement not the fence's")
            return
        if confs is not None and value is not None and confs.deferred.get(key) == value:
            confs.fence_set[key] = confs.deferred.pop(key)
            logger.debug(f"fenced_spark: {key} still holds `{value}` (its RESET waited)")
            return
        with self.connections.fence_own():
            self.execute(set_conf_sql(key, value))
        if confs is not None:
            confs.deferred.pop(key, None)  # replaced by this SET or RESET once sent
            if value is None:
                confs.fence_set.pop(key, None)
            else:
                confs.fence_set[key] = value

    def reconnect(self) -> None:
        # The embedded session lives as long as the process; a Connect session or a Thrift
        # connection is opened anew (the run's hook statements are replayed into it).
        connection = self.connections.get_thread_connection()
        handle = getattr(connection.handle, "handle", None)
        if isinstance(handle, SessionHandle) and not isinstance(handle, ConnectHandle):
            return
        self._before.clear()  # what it held belonged to the old session
        self.connections.keep_no_session()
        with suppress(Exception):  # the old one is gone; closing it is best effort
            connection.handle.close()
        connection.state = ConnectionState.INIT
        # A new session: a kept one may hold lastCommitVersionInSession from another node's
        # commit, which the verdict being read must not take for ours.
        self.connections.open(connection, new=True)

    def current_schema(self) -> str:
        return str(self.fetch("SELECT current_database()")[0][0])

    def location(self, table: str) -> str:
        names, rows = self.connections.fetch_rows(f"DESCRIBE DETAIL {table}")
        return str(dict(zip(names, rows[0], strict=True))["location"])

    def log(
        self,
        locations: dict[str, str | None] | None = None,
        hints: dict[str, int] | None = None,
        settled: dict[str, str] | None = None,
        continued: bool = False,
    ) -> HistoryReader:
        # The embedded session reads the Delta log itself: no Spark job, no log listing.
        # Thrift and Connect clients have no JVM of their own: the server reads the files,
        # where the node's earlier steps found them (`locations`), from where the node's last
        # run left the table (`hints`).
        if self.over_sql():
            files = connect.FrameReads(self.connections) if self.over_connect() else None
            return SqlLog(self, locations, hints, settled, files, continued)
        handle = self.connections.get_thread_connection().handle.handle
        return LogTail(handle.spark, fallback=SqlHistory(self))

    def over_sql(self) -> bool:
        """Thrift and Connect: the client has no JVM of its own to read the Delta log."""
        handle = self._handle()
        return not isinstance(handle, SessionHandle) or isinstance(handle, ConnectHandle)

    def over_connect(self) -> bool:
        return isinstance(self._handle(), ConnectHandle)


def dbt_command() -> str | None:
    """The dbt subcommand being run (`run`, `parse`, ...), or None when it cannot be told."""
    try:
        from dbt.flags import get_flags

        return getattr(get_flags(), "WHICH", None)
    except Exception:
        return None


def run_batch(value: object) -> str | None:
    """The batch this run applies; none when it builds from part of its input (`--empty`,
    `--sample`): its commit must not stand for the whole batch."""
    try:
        from dbt.flags import get_flags

        flags = get_flags()
        if getattr(flags, "EMPTY", False) or getattr(flags, "SAMPLE", None):
            return None
    except Exception:
        pass
    return batch_id(value)


def records_failure(method: Callable[..., Any]) -> Callable[..., Any]:
    """A fence error raised here keeps its response for run_results.json (run_results.py)."""

    @functools.wraps(method)
    def recorded(self: "FencedSparkAdapter", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except FenceError as failed:
            txn = self._txn()
            if txn is not None:
                read = {"read_version": txn.state.read_version} if txn.state else {}
                self._responses.record(txn.node, {**read, **failed.response})
            raise

    return recorded


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


def _brief(sql: str, width: int = 60) -> str:
    """A statement on one line, cut to `width`, to name it in a message."""
    line = " ".join(sql.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def builds(sql: str, txn: NodeTransaction) -> bool:
    """dbt-spark's CREATE [OR REPLACE] TABLE of the node's target, on a first run or rebuild."""
    verb = first_word(sql)
    return (
        verb in ("CREATE", "REPLACE") and statement_kind(sql, txn.schema, txn.identifier) == WRITE
    )


class FencedSparkAdapter(SparkAdapter):
    Relation = FencedSparkRelation
    ConnectionManager = FencedSparkConnectionManager
    AdapterSpecificConfigs = FencedSparkConfig
    connections: FencedSparkConnectionManager

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._nodes = threading.local()
        self._responses = FenceResponses()
        self._versions_lock = threading.Lock()
        self._versions: tuple[str, dict[str, LastRun]] | None = None  # invocation id, runs
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

    def pre_model_hook(self, config: Mapping[str, Any]) -> Any:
        # dbt never applies AdapterSpecificConfigs defaults, so delta is made the default here,
        # once, for every materialization that reads file_format.
        node = getattr(config, "model", None)
        if node is not None and node.config.get("file_format") is None:
            node.config["file_format"] = "delta"
        if node is not None and getattr(node, "language", "sql") == "python":
            self._check_python_method(node.unique_id)  # before its hooks and materialization
        # The node's compile time ends here: its materialization starts.
        txn = self._txn()
        if txn is not None and txn.phase == Phase.COMPILE:
            txn.phase = Phase.MATERIALIZE
        return super().pre_model_hook(config)

    def post_model_hook(self, config: Mapping[str, Any], context: Any) -> None:
        # A node that failed mid-step leaves no phase behind for the next node on this thread.
        txn = self._txn()
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
        outer = self._txn()
        txn = self._node_transaction(query_header_context)
        if txn is not None:
            self._nodes.txn = txn
        outer_header = self._header()
        self._nodes.header = sql_header.of_node(query_header_context)
        try:
            with super().connection_named(name, query_header_context, should_release_connection):
                yield
        finally:
            self._nodes.header = outer_header
            if txn is not None:
                self._nodes.txn = outer

    def cleanup_connections(self) -> None:
        # dbt cleans up once before it writes run_results.json and once after: the second
        # call fills in the fenced nodes' responses dbt left empty. `dbt debug` has no project.
        try:
            super().cleanup_connections()
        finally:
            target = getattr(self.config, "project_target_path", None)
            if target:
                self._responses.write(target, str(get_invocation_id()))

    def _txn(self) -> NodeTransaction | None:
        return getattr(self._nodes, "txn", None)

    def _header(self) -> sql_header.NodeHeader | None:
        return getattr(self._nodes, "header", None)

    def _node_transaction(self, node: Any) -> NodeTransaction | None:
        """A transaction for a node that may run fenced; None for any other node. The
        materialization has the last word (fence_begin); this only decides what compile
        time pins."""
        config = getattr(node, "config", None)
        kind = getattr(node, "resource_type", None)
        if config is None or config.get("fenced") is False:
            return None
        if kind == "model":
            strategy = config.get("incremental_strategy") or "append"
            # A --full-refresh run is not excluded here: its reads are pinned to the version it
            # replaces, which is what they read anyway.
            if config.get("materialized") != "incremental" or strategy in UNFENCED_AT_COMPILE_TIME:
                return None
        elif kind != "snapshot":  # snapshots are nodes too: dbt's other read-modify-write
            return None
        if (config.get("file_format") or "delta") != "delta":
            return None
        txn = self._new_transaction(self.Relation.create_from(self.config, node), node.unique_id)
        txn.strategy = strategy if kind == "model" else "snapshot"
        accepted = config.get("fence_accept_unverified") or []
        if isinstance(accepted, list) and all(isinstance(v, int) for v in accepted):
            txn.accepted = frozenset(accepted)  # validate.sql names a bad value, later
        txn.batch = run_batch(config.get("fence_batch_id"))
        return txn

    @staticmethod
    def _new_transaction(relation: FencedSparkRelation, node: str) -> NodeTransaction:
        return NodeTransaction(
            schema=str(relation.schema),
            identifier=str(relation.identifier),
            table=relation.fence_name,
            display=relation.render(),
            node=node,
            invocation_id=str(get_invocation_id()),
        )

    def quote(self, identifier: str) -> str:  # type: ignore[override]
        return quote_name(identifier)

    def get_columns_in_relation(self, relation: Any) -> list[SparkColumn]:
        # dbt-spark builds its own SparkColumn, whose `quoted` breaks on a name with a backquote.
        columns = self._described(relation)
        if columns is None:
            columns = super().get_columns_in_relation(relation)
        return [FencedSparkColumn.of(c) for c in columns]

    def _described(self, relation: Any) -> list[SparkColumn] | None:
        """The node's target's columns from the DESCRIBE the fence sent to find its Delta log
        (over SQL), while no statement on this thread since could have changed a table: the
        same statement dbt-spark would send again, a round trip per write saved."""
        txn = self._txn()
        # Up to the write only: after it nothing fences a foreign ALTER from a post-hook's read.
        if txn is None or txn.phase in (Phase.DONE, Phase.POST_HOOK):
            return None
        if not isinstance(relation, FencedSparkRelation) or not relation.include_policy.schema:
            return None  # a bare name may resolve to a temp view, or another schema's table
        if (str(relation.schema).lower(), str(relation.identifier).lower()) != (
            txn.schema.lower(),
            txn.identifier.lower(),
        ):
            return None
        described = txn.described.get(txn.table)
        if described is None or described[0] != self.connections.table_changes():
            return None
        logger.debug(f"fenced_spark: columns of {txn.display} from the fence's DESCRIBE")
        return self.parse_describe_extended(relation, described[1])

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
            stats = self._detail_stats(relation)
            for column in columns:
                column.update(stats)
        yield from columns

    def _detail_stats(self, relation: FencedSparkRelation) -> dict[str, Any]:
        try:
            _, table = self.execute(f"describe detail {relation.fence_name}", fetch=True)
        except DbtRuntimeError as exc:
            logger.debug(f"No DESCRIBE DETAIL for the catalog's {relation}: {exc}")
            return {}
        if not table.rows:
            return {}
        return catalog.detail_stats(dict(zip(table.column_names, table.rows[0], strict=True)))

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

    def _fence(self) -> Fence:
        txn = self._txn()
        runner = FenceSql(self.connections, txn.described if txn is not None else None)
        if txn is None:
            return Fence(runner, self.connections.single_attempt, log=runner.log())
        last = self._last_runs().get(txn.node)
        verified = (
            (last.version, last.invocation_id)
            if last and last.verified and last.invocation_id
            else None
        )
        if last is None or not runner.over_sql():
            log = runner.log(txn.logs)
        else:
            # A batch already applied is found in the commits: its capture reads them.
            settled = last.settled_at if txn.batch is None else None
            log = runner.log(
                txn.logs, {txn.table: last.version}, {txn.table: settled} if settled else None
            )
        return Fence(runner, self.connections.single_attempt, log=log, verified=verified)

    def _last_runs(self) -> dict[str, LastRun]:
        """Where the last run left each fenced table (run_results.json), read once per run."""
        invocation = str(get_invocation_id())
        with self._versions_lock:
            if self._versions is None or self._versions[0] != invocation:
                target = getattr(self.config, "project_target_path", None)
                self._versions = (invocation, last_runs(target, invocation) if target else {})
            return self._versions[1]

    @records_failure
    def execute(
        self, sql: str, auto_begin: bool = False, fetch: bool = False, limit: int | None = None
    ) -> tuple[AdapterResponse, Any]:
        rest = self._after_header(sql)
        if rest is not sql and not sql_header.has_statement(rest):
            return AdapterResponse(_message="OK"), empty_table()  # the header was all of it
        return self._execute(rest, auto_begin=auto_begin, fetch=fetch, limit=limit)

    def get_column_schema_from_query(self, sql: str) -> list[Any]:
        # A contract's column check sends the header with its probe query too.
        return super().get_column_schema_from_query(self._after_header(sql))

    @available
    def sql_header_parts(self, header: str, query: str, node: str) -> tuple[str, str]:
        """For a macro that puts the node's sql_header above its statement: what goes above
        (the header's whole statements, run on their own), and `query` with the header's
        fragment that opens it in front (sql_header.py)."""
        statements, fragment = sql_header.split(header)
        return statements, sql_header.in_front(fragment, query, node)

    def _after_header(self, sql: str) -> str:
        """dbt glues the node's sql_header to a statement; Spark runs one statement per call:
        the header's whole statements run first (once per node), and the statement without them
        is returned, a fragment that opens its query still in front; `sql` itself when it has
        none."""
        header = self._header()
        if header is None:
            return sql
        rest = sql_header.split_off(sql, header.text)
        if rest is None:
            sql_header.check_placed(sql, header.fragment, header.node)
            return sql
        self._run_header()
        return self._after_header(rest)  # dbt may glue it twice (a test's own and ours)

    def _run_header(self) -> None:
        """The node's sql_header, each statement on its own, once, in the node's session."""
        header = self._header()
        if header is None or header.ran:
            return
        header.ran = True
        for number, statement in enumerate(sql_header.statements(header.text), 1):
            try:
                self._execute(statement)
            except FenceError:
                raise
            except DbtRuntimeError as failed:
                raise DbtRuntimeError(
                    f"{header.node}: statement {number} of its sql_header failed: {failed.msg}"
                ) from failed

    def _execute(
        self, sql: str, auto_begin: bool = False, fetch: bool = False, limit: int | None = None
    ) -> tuple[AdapterResponse, Any]:
        # Inside a fenced node, a statement on its target is part of the node's transaction:
        # a read is pinned to vB, a pre-hook's or schema change's write is a strict step of
        # ours, a post-hook's write is tagged. Everything else runs as dbt-spark runs it.
        txn = self._txn()
        if txn is not None and txn.build is not None and builds(sql, txn):
            with self._fence().tagged(txn.build, "write", strict=False):
                return super().execute(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)
        self._location(sql)
        self._current_schema(sql)
        action = txn.action(sql) if txn is not None else None
        if txn is None or action is None:
            return super().execute(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)
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
            with self._fence().tagged(txn.state, txn.step, strict=False):
                return super().execute(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)
        return super().execute(sql, auto_begin=auto_begin, fetch=fetch, limit=limit)

    def _location(self, sql: str) -> str | None:
        """The node's table's location, looked up once per node and only for SQL that reads
        a Delta path: it costs a statement."""
        txn = self._txn()
        if txn is None:
            return None
        if txn.location is None and not txn.unfenced and names_a_path(sql):
            try:
                txn.location = FenceSql(self.connections).location(txn.table)
            except (DbtRuntimeError, IndexError):
                return None  # not a Delta table (yet): nothing to pin
        return txn.location

    def _current_schema(self, sql: str) -> str | None:
        """The session's current schema, looked up once per node and only for SQL that names
        the node's table bare (after a hook's `USE` that reads it): it costs a statement."""
        txn = self._txn()
        if txn is None:
            return None
        if txn.current_schema is None and not txn.unfenced and names_bare(sql, txn.identifier):
            try:
                txn.current_schema = FenceSql(self.connections).current_schema()
            except (DbtRuntimeError, IndexError):
                return None
        return txn.current_schema

    def _captured(self, txn: NodeTransaction) -> bool:
        """vB, at the node's first read of its target; False when it is not a Delta table
        (yet): the read runs as written and the materialization decides."""
        if txn.state is not None:
            return True
        fence = self._fence()
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

    def _own_step(
        self, txn: NodeTransaction, sql: str, fetch: bool, limit: int | None
    ) -> tuple[AdapterResponse, Any]:
        """One statement of ours on the target before the write: pre-checked, tagged, strict,
        and the next step expects the version it produced."""
        assert txn.state is not None
        txn.stepped = True
        txn.state = replace(txn.state, head=None)  # a step is pre-checked from a read of its own
        fence = self._fence()
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
                    self.connections.single_attempt(),
                ):
                    result = super().execute(sql, fetch=fetch, limit=limit)
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

    # Fence steps, called by the incremental materialization -------------------------------

    def _node(self) -> NodeTransaction:
        txn = self._txn()
        assert txn is not None and txn.state is not None, "fence_begin runs first"
        return txn

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
        """vB: captured now, or at the node's first read of its target if that came earlier.
        An earlier run of the node that never reached its verdict is found here, and so is
        the batch's commit when the table holds it already: then the node's response, and
        the materialization writes nothing."""
        txn = self._txn()
        if txn is None or txn.phase != Phase.MATERIALIZE or txn.table != relation.fence_name:
            # No compile time of its own (a microbatch batch, --no-introspect): starts here.
            txn = self._nodes.txn = self._new_transaction(relation, node)
        txn.batch = run_batch(batch)
        fence = self._fence()
        txn.unfenced = False  # the materialization found a Delta table: fenced from here on
        recent: Iterable[Commit] | None = None
        if txn.state is None:
            version, recent = fence.capture(relation.fence_name)
            txn.start(strategy, version)
            txn.settled = recent is None
        state = txn.fenced_as(strategy)
        if recent is None and txn.settled:
            # captured just now with no commit to search: the write may follow at once
            state = txn.state = fence.head_seen(state)
            txn.sent_at_capture = self.connections.statements_sent()
        if txn.batch is not None and txn.applied is None:
            recent = list(recent if recent is not None else fence.log.recent(state.table, LOOKBACK))
        if recent is not None or not txn.settled:
            fence.check_earlier_runs(
                state, frozenset(accepted or ()), iter(recent) if recent else None
            )
        if txn.applied is None and recent is not None:
            txn.applied = fence.batch_applied(state, recent)
        txn.phase = Phase.PRE_HOOK
        if txn.applied is None:
            return None
        txn.phase = Phase.DONE
        return self._already_applied(state, txn.applied)

    @staticmethod
    def _already_applied(state: FenceState, commit: Commit) -> FencedAdapterResponse:
        assert commit.tag is not None
        logger.info(
            f"fenced {state.strategy} into {state.display}: batch {state.batch!r} is already in "
            f"the table: {commit.describe()}; nothing written (a batch is applied once: "
            "fence_batch_id)"
        )
        return FencedAdapterResponse(
            _message=f"{state.strategy.upper()} {Outcome.ALREADY_APPLIED.value}",
            read_version=state.read_version,
            commit_version=commit.version,
            fence_outcome=Outcome.ALREADY_APPLIED.value,
            **row_counts.NOTHING.fields(),
        )

    @available
    def fence_tag_build(
        self, relation: FencedSparkRelation, strategy: str, node: str, batch: str | int
    ) -> str:
        """A first run or full refresh with `fence_batch_id` builds the table from its batch:
        dbt-spark's CREATE of the table carries the batch's tag (`execute`), so that a re-run
        finds the batch applied; its hooks' statements do not."""
        txn = self._txn()
        if txn is None or txn.table != relation.fence_name:
            txn = self._nodes.txn = self._new_transaction(relation, node)
        txn.batch = run_batch(batch)
        if txn.batch is not None:
            txn.build = replace(txn.start(strategy, -1), batch=txn.batch)
            txn.state = None  # not a fenced run: nothing is pinned
        return ""

    @available
    def fence_read_at_compile_time(self) -> bool:
        txn = self._txn()
        return txn is not None and bool(txn.compile_reads)

    @available
    def fence_hooks_read_self(self, hooks: list[str], relation: FencedSparkRelation) -> bool:
        """Whether a pre-hook (as rendered) reads the target, through any statement
        (fence/statements.py): an `append` that does is a read-modify-write."""
        schema, identifier = str(relation.schema), str(relation.identifier)
        return any(
            statement_kind(h, schema, identifier, self._location(h), self._current_schema(h))
            in READS
            for h in hooks
        )

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
            self._location(sql),
            self._current_schema(sql),
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
        txn = self._node()
        txn.phase = Phase.MODEL
        txn.language = language
        if inline and language == "sql":
            txn.source = ""
        return self._stage(relation, staging, compiled_code, txn.state)  # type: ignore[arg-type]

    def _stage(
        self,
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        state: FenceState,
        diagnose: bool = True,
    ) -> str:
        if self._node().language == "python":
            return self._stage_python(relation, staging, compiled_code, state)
        pinned = pin_self_reads(
            compiled_code,
            str(relation.schema),
            str(relation.identifier),
            state.pinned,
            self._location(compiled_code),
            self._current_schema(compiled_code),
        )
        txn = self._node()
        if txn.source is not None:
            # Evaluated by the write, in this session: the header's settings hold.
            self._run_header()
            txn.source = as_subquery(pinned)
            return txn.source
        view_sql = self.execute_macro(
            "create_temporary_view", kwargs={"relation": staging, "compiled_code": pinned}
        )
        # The view is evaluated by the write, in this session: the header's settings hold.
        self._run_header()
        try:
            FenceSql(self.connections).execute(str(view_sql))
            self._node().staged_on = self.connections.get_thread_connection().handle
        except DbtRuntimeError:
            # A pinned read of a table dropped or replaced since vB fails here: the fence says so
            # (from a read of the log, however recently the head was read).
            if diagnose:
                self._fence().precheck(replace(state, head=None))
            raise
        return str(view_sql)

    def _stage_python(
        self,
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        state: FenceState,
    ) -> str:
        txn = self._node()

        def current_schema() -> str | None:
            # Only for a bare name the model reads (`spark.table("orders")`): a statement.
            if txn.current_schema is None:
                txn.current_schema = FenceSql(self.connections).current_schema()
            return txn.current_schema

        pin = python_model.Pin(
            schema=txn.schema,
            identifier=txn.identifier,
            table=txn.table,
            version=state.pinned,
            current_schema=current_schema,
            pin_sql=lambda sql: self._pin_read(txn, sql, state.pinned),
        )
        name = txn.node
        try:
            with spark_errors():
                python_model.stage(
                    self._python_session(name), compiled_code, name, str(staging.identifier), pin
                )
        except DbtRuntimeError as exc:
            # A pinned read of a table dropped or replaced since vB fails here: the fence says
            # so. Any other failure is the model's own, and says so itself.
            text = str(exc)
            if _GONE_SINCE_VB.search(text) and txn.identifier.lower() in text.lower():
                self._fence().precheck(replace(state, head=None))
            raise
        txn.reads.extend(pin.reads)
        return (
            f"# staged as the temporary view {staging.identifier}; its reads of "
            f"{txn.display} through `session` pinned to v{state.pinned}"
        )

    def _pin_read(self, txn: NodeTransaction, sql: str, version: int) -> str:
        """A Python model's SQL (`session.sql`): a read of its table pinned to `version`, any
        other statement as it is."""
        location, current = self._location(sql), self._current_schema(sql)
        if statement_kind(sql, txn.schema, txn.identifier, location, current) != READ:
            return sql
        return pin_statement(sql, txn.schema, txn.identifier, version, location, current)

    def _check_python_method(self, model: str) -> None:
        method = str(getattr(self.config.credentials.method, "value", ""))
        if method not in python_model.PYTHON_METHODS:
            raise DbtRuntimeError(
                f"Python model {model}: method '{method}' cannot run Python models (a Thrift "
                "client sends SQL, it has no SparkSession to run them in); run it on a target "
                f"with method {' or '.join(python_model.PYTHON_METHODS)}, or write it in SQL"
            )

    def _python_session(self, model: str) -> Any:
        """The node's own SparkSession, where its Python runs."""
        self._check_python_method(model)
        # Its DataFrame calls are statements no add_query sees: they may change any table,
        # and leave in the session what no RESET clears.
        self.connections.may_have_changed_tables()
        self.connections.keep_no_session()
        return self.connections.get_thread_connection().handle.handle.spark

    @available.parse_none
    def submit_python_job(self, parsed_model: dict, compiled_code: str) -> AdapterResponse:
        # dbt-spark submits to Databricks; the script runs in the node's own session instead.
        model = str(parsed_model.get("unique_id", parsed_model.get("name")))
        spark = self._python_session(model)
        method = (parsed_model.get("config") or {}).get("submission_method")
        if method:
            logger.warning(
                f"fenced_spark: {model} sets submission_method {method!r}, dbt-spark's way to "
                "submit to Databricks; it runs in the connection's own SparkSession instead"
            )
        txn = self._txn()
        build = txn.build if txn is not None else None

        def tag() -> Any:
            # A batch's first run or full refresh is that batch's write (fence_tag_build): the
            # table's write carries its tag, nothing else the script commits does.
            if build is None:
                return nullcontext()
            return self._fence().tagged(build, "write", strict=False)

        with spark_errors():
            python_model.run_script(spark, compiled_code, model, tag)
        return AdapterResponse(_message="OK")

    def _rows_written(
        self, table: str, version: int | None, commit: Commit | None = None, fenced: bool = False
    ) -> dict[str, Any]:
        """The response's row counts of the write that committed `version` (none: it changed
        nothing). Never the node's error: without them the response only says less."""
        if version is None:
            return row_counts.NOTHING.fields()
        txn = self._txn() if fenced else None
        if txn is None:
            log, node = self._fence().log, None
        else:
            # Right after the fenced write: where its steps found the table, no DESCRIBE more;
            # a commit read there counts only if it carries the node's tag.
            log = FenceSql(self.connections, txn.described).log(txn.logs, continued=True)
            node = txn.node
        try:
            counts = row_counts.written(log, table, version, commit, node)
        except Exception as exc:
            logger.debug(f"fenced_spark: the rows of {table}'s v{version} are unknown: {exc}")
            return {}
        return counts.fields() if counts is not None else {}

    @available
    def fence_rows_begin(self) -> str:
        """Before dbt-spark writes an incremental model (its statement 'main', which the
        statement macro in python.sql marks): what the session committed before is forgotten,
        so that a commit afterwards is the write's."""
        FenceSql(self.connections).set_session_conf(LAST_COMMIT, None)
        return ""

    @available
    def fence_rows_response(
        self, response: Any, relation: FencedSparkRelation, batch_of: str | None = None
    ) -> Any:
        """dbt-spark's response to that write, with its commit's row counts; as it was when it
        committed nothing (Delta makes no commit for a write that changed nothing). A
        microbatch model's (`batch_of`: its first batch, which creates the table) is kept with
        its fenced batches' for run_results.json, where dbt records none."""
        try:
            version = FenceSql(self.connections).session_conf(LAST_COMMIT)
        except Exception as exc:
            logger.debug(f"fenced_spark: {LAST_COMMIT} unread, rows unknown: {exc}")
            return response
        if version is None or not version.isdigit() or not isinstance(response, AdapterResponse):
            return response
        counts = self._rows_written(relation.fence_name, int(version))
        if not counts:
            return response
        counted = FencedAdapterResponse(
            _message=response._message, code=response.code, query_id=response.query_id, **counts
        )
        if batch_of:
            self._responses.record(batch_of, counted.to_dict(omit_none=True))
        return counted

    @available
    def fence_query_columns(self, sql: str) -> list[FencedSparkColumn]:
        """The columns of a query's result as Spark analyses it: DESCRIBE QUERY runs no job.
        `sql` is the model's query with its sql_header's fragment in front (header_query); the
        header's statements run first, once per node, as before the model's CREATE, and fail
        the model as there. None when Spark cannot analyse the query so: the statement that
        runs it says why."""
        self._run_header()
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
        self._node().phase = Phase(phase)
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
        txn = self._node()
        state = self._scoped(txn, staging, compiled_code, scope or {})
        if txn.sent_at_capture != self.connections.statements_sent():
            state = replace(state, head=None)  # something ran since the capture: pre-check

        written = sql

        def restage(new: FenceState) -> tuple[FenceState, str] | None:
            # A retry recomputes from the new vB: same staging view, pinned anew; or the
            # write's own source, pinned anew, in the write and in what the analysis joins.
            nonlocal written
            before = txn.source
            self._stage(relation, staging, compiled_code, new)
            if before is None or txn.source is None:
                return None
            written = written.replace(before, txn.source)
            source = replace(new.scope, source=f"SELECT * FROM {txn.source}")
            return replace(new, scope=source), written

        no_retry, node = None, node_kind(state.strategy)
        if txn.compile_reads:
            no_retry = (
                f"this {node} read {state.display} at compile time (run_query, statement), and "
                f"a retry would reuse what it read at v{state.read_version}; a re-run compiles "
                f"the {node} again"
            )
        elif txn.source is not None and txn.source not in sql:
            no_retry = (
                "its write does not read the model SQL it was given as its source (an override "
                "of fence_write_sql), so a retry could not pin it at the new version"
            )
        elif txn.kept_reads:
            no_retry = (
                f"this {node}'s pre-hooks or sql_header read {state.display} into the session "
                f"(a variable, a cache, a view: `{_brief(txn.kept_reads[0])}`), and a retry "
                f"would reuse what they read at v{state.read_version}; a re-run runs them again"
            )
        elif txn.stepped:
            changes = "new columns" if node == "snapshot" else "schema changes"
            no_retry = (
                f"this {node}'s compile-time writes, pre-hooks or {changes} write "
                f"{state.display}, and a retry would redo only the write"
            )
        try:
            result = self._fence().run(
                state,
                sql,
                retries=int(retries),
                restage=restage,
                no_retry=no_retry,
                vet=lambda attempt, refused: self._check_unique_key(
                    relation, staging, compiled_code, attempt, refused
                ),
            )
        except BaseException:
            txn.phase = Phase.DONE
            # A lost session fails the cleanup too: it must not replace the fence's error.
            with suppress(Exception):
                self._drop_staging(staging, failed=True)
            raise
        txn.phase = Phase.DONE
        # Post-hooks tag their commits with the attempt that committed.
        txn.state = replace(state, read_version=result.read_version, attempt=result.attempt)
        over = [j.describe() for j in result.tolerated]
        tolerated = f" over {'; '.join(over)}" if over else ""
        steps = result.step_names()
        # The node's own step commits sit between vB and the write: named, so that no
        # version in the history is unaccounted for (docs/inspect.md).
        read = f"read v{result.read_version}" + "".join(f" -> {s}" for s in steps)
        if result.outcome == Outcome.COMMITTED:
            outcome = f"{',' if steps else ' ->'} committed v{result.commit_version}"
        else:
            outcome = ", no change, nothing" + (" more" if steps else "") + " committed"
        logger.info(f"fenced {state.strategy} into {state.display}: {read}{outcome}{tolerated}")
        response = FencedAdapterResponse(
            _message=f"{state.strategy.upper()} {result.outcome.value}",
            read_version=result.read_version,
            commit_version=result.commit_version,
            fence_outcome=result.outcome.value,
            tolerated=over,
            steps=steps,
            table_location=location_of(log) if (log := txn.logs.get(txn.table)) else None,
            **self._rows_written(state.table, result.commit_version, result.write, fenced=True),
        )
        # A post-hook or grant failing after this commit leaves dbt's response empty.
        self._responses.record(txn.node, response.to_dict(omit_none=True))
        self._drop_staging(staging)
        return response

    def _check_unique_key(
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
        txn = self._node()
        if txn.source is None or not state.scope.keys or not _nothing_stands(refused):
            return
        keys = list(state.scope.keys)
        source, txn.source = txn.source, None
        try:
            try:
                self._stage(relation, staging, compiled_code, state, diagnose=False)
                found = self.execute_macro(
                    "fence_missing_unique_key", kwargs={"staging": staging, "unique_key": keys}
                )
            except Exception:
                return
            finally:
                with suppress(Exception):  # never in place of the refusal
                    self._drop_staging(staging)
        finally:
            txn.source = source  # a retry pins the write's own source anew
        if not (found["missing"] and found["columns"]):
            return
        self._responses.record(txn.node, never_written(state, []))
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

    def _drop_staging(self, staging: FencedSparkRelation, failed: bool = False) -> None:
        # Temp views live as long as their session. The embedded JVM's sessions live on. A
        # Connect session kept for a later node loses its temp views first (connect.clear).
        if self._node().source is not None:
            return  # no view was made
        runner = FenceSql(self.connections)
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
        handle = self.connections.get_thread_connection().handle
        if runner.over_connect() or failed or self._node().staged_on is not handle:
            return
        with suppress(Exception), self.connections.at_once(), self.connections.fence_own():
            runner.execute(drop)

    def _scoped(
        self,
        txn: NodeTransaction,
        staging: FencedSparkRelation,
        compiled_code: str,
        scope: Mapping[str, Any],
    ) -> FenceState:
        """What the node read of its target (every pinned statement and the model SQL) and
        what it writes (the macro's `scope`), for the conflict analysis."""
        assert txn.state is not None
        if txn.language == "python":
            # Python reaches its table in ways no pin or parse sees (a path, a template, a
            # second session): it is taken to have read all of it, so that any data change
            # after vB refuses it, whatever it read and at which version.
            reads = [WHOLE_TABLE]
        else:
            reads = [
                f
                for sql in [*txn.reads, compiled_code]
                for f in statement_reads(
                    sql, txn.schema, txn.identifier, self._location(sql), self._current_schema(sql)
                )
            ]
        keys = scope.get("keys") or ()
        # A merge's incremental_predicates on its target narrow the rows its keys can touch.
        narrowing = [
            _DEST.sub("changed.", p)
            for p in scope.get("key_predicates") or ()
            if _DEST.search(p) and "dbt_internal_source" not in p.lower()
        ]
        return replace(
            txn.state,
            isolation=scope.get("isolation") or SNAPSHOT,
            scope=Scope(
                reads=tuple(reads),
                keys=tuple([keys] if isinstance(keys, str) else keys),
                source=f"SELECT * FROM {txn.source or staging.render()}",
                key_predicates=tuple(narrowing),
                replaces=tuple(scope.get("replaces") or ()),
                any_change=bool(scope.get("any_change")),
                why_any=str(scope.get("why_any") or ""),
            ),
        )
