"""Which node each of dbt's threads is running: its transaction on its target (fence/node.py),
its sql_header, and the Fence and SQL runner its steps use, on the thread's own connection."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.invocation import get_invocation_id

from dbt.adapters.fenced_spark import sql_header
from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager
from dbt.adapters.fenced_spark.fence.batch import batch_id
from dbt.adapters.fenced_spark.fence.node import NodeTransaction, Phase
from dbt.adapters.fenced_spark.fence.protocol import Fence
from dbt.adapters.fenced_spark.fence_sql import FenceSql
from dbt.adapters.fenced_spark.relation import FencedSparkRelation
from dbt.adapters.fenced_spark.run_results import LastRun, last_runs

logger = AdapterLogger("FencedSpark")

# Strategies that never pin at compile time: unfenced by design, or fenced per batch.
UNFENCED_AT_COMPILE_TIME = ("insert_overwrite", "microbatch")


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


def new_transaction(relation: FencedSparkRelation, node: str) -> NodeTransaction:
    return NodeTransaction(
        schema=str(relation.schema),
        identifier=str(relation.identifier),
        table=relation.fence_name,
        display=relation.render(),
        node=node,
        invocation_id=str(get_invocation_id()),
    )


class Nodes:
    def __init__(self, config: Any, connections: FencedSparkConnectionManager) -> None:
        self.config = config
        self.connections = connections
        self._local = threading.local()
        self._versions_lock = threading.Lock()
        self._versions: tuple[str, dict[str, LastRun]] | None = None  # invocation id, runs

    def txn(self) -> NodeTransaction | None:
        return getattr(self._local, "txn", None)

    def header(self) -> sql_header.NodeHeader | None:
        return getattr(self._local, "header", None)

    def node(self) -> NodeTransaction:
        txn = self.txn()
        assert txn is not None and txn.state is not None, "fence_begin runs first"
        return txn

    def restart(self, relation: FencedSparkRelation, node: str) -> NodeTransaction:
        """A transaction of its own for a node whose compile time had none on this thread."""
        txn = self._local.txn = new_transaction(relation, node)
        return txn

    @contextmanager
    def entered(self, node: Any) -> Iterator[None]:
        """The node dbt is about to compile and run on this thread, until it is done."""
        outer = self.txn()
        txn = self.transaction_for(node)
        if txn is not None:
            self._local.txn = txn
        outer_header = self.header()
        self._local.header = sql_header.of_node(node)
        try:
            yield
        finally:
            self._local.header = outer_header
            if txn is not None:
                self._local.txn = outer

    def transaction_for(self, node: Any) -> NodeTransaction | None:
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
        txn = new_transaction(FencedSparkRelation.create_from(self.config, node), node.unique_id)
        txn.strategy = strategy if kind == "model" else "snapshot"
        accepted = config.get("fence_accept_unverified") or []
        if isinstance(accepted, list) and all(isinstance(v, int) for v in accepted):
            txn.accepted = frozenset(accepted)  # validate.sql names a bad value, later
        txn.batch = run_batch(config.get("fence_batch_id"))
        return txn

    def runner(self, described: dict[str, tuple[int, Any]] | None = None) -> FenceSql:
        """The fence's SQL runner on this thread's connection (tests wrap it here)."""
        return FenceSql(self.connections, described)

    def fence(self) -> Fence:
        txn = self.txn()
        runner = self.runner(txn.described if txn is not None else None)
        if txn is None:
            return Fence(runner, self.connections.single_attempt, log=runner.log())
        last = self.last_runs().get(txn.node)
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

    def last_runs(self) -> dict[str, LastRun]:
        """Where the last run left each fenced table (run_results.json), read once per run."""
        invocation = str(get_invocation_id())
        with self._versions_lock:
            if self._versions is None or self._versions[0] != invocation:
                target = getattr(self.config, "project_target_path", None)
                self._versions = (invocation, last_runs(target, invocation) if target else {})
            return self._versions[1]

    def described(self, relation: Any) -> Any:
        """The node's target's DESCRIBE rows the fence sent to find its Delta log (over SQL),
        while no statement on this thread since could have changed a table: the same statement
        dbt-spark would send again, a round trip per write saved."""
        txn = self.txn()
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
        return described[1]
