"""The fenced write of one node, as the materialization asks for it: vB and an earlier run's
verdict (begin), what the node read and writes (its scope), the write with fence_retries, and
the log line and response that say what happened (docs/inspect.md)."""

import re
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import replace
from typing import Any

from dbt.adapters.events.logging import AdapterLogger

from dbt.adapters.fenced_spark import row_counts
from dbt.adapters.fenced_spark.fence.context import LOOKBACK
from dbt.adapters.fenced_spark.fence.delta.sql_log import location_of
from dbt.adapters.fenced_spark.fence.footprint import WHOLE_TABLE, statement_reads
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.node import NodeTransaction, Phase
from dbt.adapters.fenced_spark.fence.outcome import Outcome, node_kind
from dbt.adapters.fenced_spark.fence.scope import Scope
from dbt.adapters.fenced_spark.fence.state import SNAPSHOT, FenceState
from dbt.adapters.fenced_spark.nodes import Nodes, run_batch
from dbt.adapters.fenced_spark.relation import FencedSparkRelation
from dbt.adapters.fenced_spark.responses import FencedAdapterResponse, WriteRows
from dbt.adapters.fenced_spark.routing import Routing
from dbt.adapters.fenced_spark.staging import Staging

logger = AdapterLogger("FencedSpark")

_DEST = re.compile(r"\bDBT_INTERNAL_DEST\.", re.I)


def _brief(sql: str, width: int = 60) -> str:
    """A statement on one line, cut to `width`, to name it in a message."""
    line = " ".join(sql.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def already_applied(state: FenceState, commit: Commit) -> FencedAdapterResponse:
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


def no_retry_reason(txn: NodeTransaction, state: FenceState, sql: str) -> str | None:
    """Why fence_retries cannot retry this node's write: something it decided at vB would not
    be decided again."""
    node = node_kind(state.strategy)
    if txn.compile_reads:
        return (
            f"this {node} read {state.display} at compile time (run_query, statement), and "
            f"a retry would reuse what it read at v{state.read_version}; a re-run compiles "
            f"the {node} again"
        )
    if txn.source is not None and txn.source not in sql:
        return (
            "its write does not read the model SQL it was given as its source (an override "
            "of fence_write_sql), so a retry could not pin it at the new version"
        )
    if txn.kept_reads:
        return (
            f"this {node}'s pre-hooks or sql_header read {state.display} into the session "
            f"(a variable, a cache, a view: `{_brief(txn.kept_reads[0])}`), and a retry "
            f"would reuse what they read at v{state.read_version}; a re-run runs them again"
        )
    if txn.stepped:
        changes = "new columns" if node == "snapshot" else "schema changes"
        return (
            f"this {node}'s compile-time writes, pre-hooks or {changes} write "
            f"{state.display}, and a retry would redo only the write"
        )
    return None


class FencedWrite:
    def __init__(self, nodes: Nodes, routing: Routing, staging: Staging, rows: WriteRows) -> None:
        self.nodes = nodes
        self.routing = routing
        self.staging = staging
        self.rows = rows

    def begin(
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
        txn = self.nodes.txn()
        if txn is None or txn.phase != Phase.MATERIALIZE or txn.table != relation.fence_name:
            # No compile time of its own (a microbatch batch, --no-introspect): starts here.
            txn = self.nodes.restart(relation, node)
        txn.batch = run_batch(batch)
        fence = self.nodes.fence()
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
            txn.sent_at_capture = self.nodes.connections.statements_sent()
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
        return already_applied(state, txn.applied)

    def tag_build(
        self, relation: FencedSparkRelation, strategy: str, node: str, batch: str | int
    ) -> None:
        """A first run or full refresh with `fence_batch_id` builds the table from its batch:
        dbt-spark's CREATE of the table carries the batch's tag (routing.builds), so that a
        re-run finds the batch applied; its hooks' statements do not."""
        txn = self.nodes.txn()
        if txn is None or txn.table != relation.fence_name:
            txn = self.nodes.restart(relation, node)
        txn.batch = run_batch(batch)
        if txn.batch is not None:
            txn.build = replace(txn.start(strategy, -1), batch=txn.batch)
            txn.state = None  # not a fenced run: nothing is pinned

    def write(
        self,
        sql: str,
        relation: FencedSparkRelation,
        staging: FencedSparkRelation,
        compiled_code: str,
        retries: int = 0,
        scope: Mapping[str, Any] | None = None,
    ) -> FencedAdapterResponse:
        txn = self.nodes.node()
        state = self.scoped(txn, staging, compiled_code, scope or {})
        if txn.sent_at_capture != self.nodes.connections.statements_sent():
            state = replace(state, head=None)  # something ran since the capture: pre-check

        written = sql

        def restage(new: FenceState) -> tuple[FenceState, str] | None:
            # A retry recomputes from the new vB: same staging view, pinned anew; or the
            # write's own source, pinned anew, in the write and in what the analysis joins.
            nonlocal written
            before = txn.source
            self.staging.stage(relation, staging, compiled_code, new)
            if before is None or txn.source is None:
                return None
            written = written.replace(before, txn.source)
            source = replace(new.scope, source=f"SELECT * FROM {txn.source}")
            return replace(new, scope=source), written

        try:
            result = self.nodes.fence().run(
                state,
                sql,
                retries=int(retries),
                restage=restage,
                no_retry=no_retry_reason(txn, state, sql),
                vet=lambda attempt, refused: self.staging.check_unique_key(
                    relation, staging, compiled_code, attempt, refused
                ),
            )
        except BaseException:
            txn.phase = Phase.DONE
            # A lost session fails the cleanup too: it must not replace the fence's error.
            with suppress(Exception):
                self.staging.drop(staging, failed=True)
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
            **self.rows.written(state.table, result.commit_version, result.write, fenced=True),
        )
        # A post-hook or grant failing after this commit leaves dbt's response empty.
        self.rows.responses.record(txn.node, response.to_dict(omit_none=True))
        self.staging.drop(staging)
        return response

    def scoped(
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
            location, current = self.routing.location, self.routing.current_schema
            reads = [
                f
                for sql in [*txn.reads, compiled_code]
                for f in statement_reads(
                    sql, txn.schema, txn.identifier, location(sql), current(sql)
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
