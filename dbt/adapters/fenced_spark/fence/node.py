"""A fenced node is one read-modify-write transaction on its target: from its first read of
the target (a compile-time `run_query`, a pre-hook, or the model SQL) to its last write.

The adapter keeps one `NodeTransaction` per thread while dbt runs a node. Its phase decides
what a statement on the target is: a read is pinned to vB, a write in a pre-hook or a schema
change is a strict step of ours, a post-hook write is tagged for the audit trail.
"""

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.state import FenceState
from dbt.adapters.fenced_spark.fence.statements import (
    OPAQUE,
    READ,
    UNPINNED,
    WRITE,
    leaves_state,
    pin_statement,
    statement_kind,
)


class Phase(Enum):
    COMPILE = "compile"  # dbt renders the node: reads pinned; writes are strict steps of ours
    MATERIALIZE = "materialize"  # the materialization decides how to run: nothing is touched
    PRE_HOOK = "pre_hook"  # reads pinned; writes to the target are strict steps of ours
    MODEL = "model"  # staging and the write run through the fence's own; sql_header reads pinned
    SCHEMA_CHANGE = "schema_change"  # writes to the target (ALTERs) are strict steps of ours
    POST_HOOK = "post_hook"  # after the verdict: writes to the target are tagged, not strict
    DONE = "done"


# What to do with one statement. COUNT: a read no pin reaches, run as written and counted in
# the footprint; STEP_READ: a step that also reads the whole table (a SQL script).
PIN, COUNT, STEP, STEP_READ, TAG = "pin", "count", "step", "step_read", "tag"


@dataclass
class NodeTransaction:
    schema: str
    identifier: str
    table: str  # always quoted, for the fence's own statements
    display: str
    node: str
    invocation_id: str
    phase: Phase = Phase.COMPILE
    state: FenceState | None = None  # set at the first read or write of the target: vB
    # Statements on the target at compile time, reads and writes (a DELETE reads too): such a
    # node is a read-modify-write, and a retry would reuse what they saw.
    compile_reads: list[str] = field(default_factory=list)
    # Every statement that read the target (compile time, pre-hooks, sql_header), pinned or
    # not, for the conflict analysis (footprint.statement_reads).
    reads: list[str] = field(default_factory=list)
    # Those of a pre-hook or the sql_header that keep what they read in the session (SET VAR,
    # CACHE TABLE, a temp view): a retry of the write alone would reuse it.
    kept_reads: list[str] = field(default_factory=list)
    # A pre-hook or schema change wrote the target: a retry of the write alone would skip it.
    stepped: bool = False
    # The target could not be read as a Delta table at its first read (missing, not Delta):
    # nothing to pin; the materialization decides what to do with it.
    unfenced: bool = False
    # The table's location, for ``delta.`<location>` `` reads; looked up only for SQL that
    # has one (`names_a_path`), since it costs a statement.
    location: str | None = None
    # Over SQL, where the fence's reads found the table's Delta log (fence/delta/sql_log.py): a
    # pre-check reuses it instead of asking the catalog again.
    logs: dict[str, str | None] = field(default_factory=dict)
    # Over SQL, the catalog's DESCRIBE of the table those reads sent, by table, with the
    # thread's count of statements that could change a table when it was read: while that
    # count stands, it answers dbt-spark's DESCRIBE of the target (impl.py).
    described: dict[str, tuple[int, Any]] = field(default_factory=dict)
    # The session's current schema, for SQL that names the table bare (after a hook's `USE`);
    # looked up only for such SQL (`names_bare`), since it costs a statement.
    current_schema: str | None = None
    # The model's language: a Python model runs at staging (python_model.py).
    language: str = "sql"
    # The connection handle whose session holds the staging view: a reconnect opens another.
    staged_on: Any = None
    # The pinned model SQL as the write's own source, where no staging view is made (fence_stage)
    source: str | None = None
    # The thread's statement count right after the capture read the head (fence_begin): the
    # write skips its pre-check only if no statement ran since (verify._just_read).
    sent_at_capture: int | None = None
    # As configured, for what compile time commits or refuses; fence_begin has the last word.
    strategy: str = "unknown"
    # The model's fence_accept_unverified, as configured, for a check made at compile time.
    accepted: frozenset[int] = frozenset()
    # An earlier run's unverified commit was looked for (before a compile-time step).
    checked: bool = False
    # vB is the node's last run's verified commit and nothing landed since: no earlier run
    # left anything to look for (capture.capture).
    settled: bool = False
    # The model's fence_batch_id, and this node's commit of that batch when the table holds
    # one already: then nothing of the node writes the target (fence/batch.py).
    batch: str | None = None
    applied: Commit | None = None
    # A first run or full refresh with fence_batch_id: what tags its CREATE (fence_tag_build).
    build: FenceState | None = None

    def action(self, sql: str) -> str | None:
        if self.unfenced or self.phase not in _ACTING:
            return None
        kind = statement_kind(sql, self.schema, self.identifier, self.location, self.current_schema)
        if kind in (READ, UNPINNED) and self.phase in _READING:
            return PIN if kind == READ else COUNT
        if kind in (WRITE, OPAQUE) and self.phase in _STEPPING:
            return STEP if kind == WRITE else STEP_READ
        if kind == OPAQUE and self.phase == Phase.MODEL:
            return COUNT  # no step in the model's phase: its commit would be a foreign one
        if kind in (WRITE, OPAQUE) and self.phase == Phase.POST_HOOK:
            return TAG
        return None

    def count(self, sql: str) -> None:
        """A read of the target that runs as written: in the footprint all the same."""
        if self.phase == Phase.COMPILE:
            self.compile_reads.append(sql)
        elif leaves_state(sql):
            self.kept_reads.append(sql)
        self.reads.append(sql)

    def pin(self, sql: str) -> str:
        assert self.state is not None
        self.count(sql)
        return pin_statement(
            sql,
            self.schema,
            self.identifier,
            self.state.pinned,
            self.location,
            self.current_schema,
        )

    def start(self, strategy: str, read_version: int) -> FenceState:
        self.state = FenceState(
            table=self.table,
            display=self.display,
            strategy=strategy,
            read_version=read_version,
            expected_version=read_version,
            invocation_id=self.invocation_id,
            node=self.node,
            batch=self.batch,
        )
        return self.state

    def fenced_as(self, strategy: str) -> FenceState:
        """The materialization now knows the strategy; vB may already be set."""
        assert self.state is not None
        self.state = replace(self.state, strategy=strategy)
        return self.state

    @property
    def step(self) -> str:
        return self.phase.value


_ACTING = (Phase.COMPILE, Phase.PRE_HOOK, Phase.MODEL, Phase.SCHEMA_CHANGE, Phase.POST_HOOK)
# Where a read of the target is the node's: before its write (the model phase: its
# sql_header, run when the model is staged).
_READING = (Phase.COMPILE, Phase.PRE_HOOK, Phase.MODEL)
_STEPPING = (Phase.COMPILE, Phase.PRE_HOOK, Phase.SCHEMA_CHANGE)


def names_a_path(sql: str) -> bool:
    return "delta.`" in sql.lower()
