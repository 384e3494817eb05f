"""What a node read of its target and what it writes (its Scope, carried in its tag), and the
conflict analysis's verdict on one foreign commit (Judgement)."""

import json
from collections.abc import Sequence
from dataclasses import dataclass

from dbt.adapters.fenced_spark.fence.footprint import ReadFilter
from dbt.adapters.fenced_spark.fence.history import Commit


@dataclass(frozen=True)
class Scope:
    """What the node read of its target and what it writes there."""

    reads: tuple[ReadFilter, ...] = ()
    # merge, insert: the unique_key columns, and the rows whose keys it writes: the staged
    # source before the write, the rows its own commit changed after it; and its
    # incremental_predicates on the target, which narrow the keys it can touch.
    keys: tuple[str, ...] = ()
    source: str | None = None
    source_verb: str = "writes"
    key_predicates: tuple[str, ...] = ()
    # replace_where, microbatch: the predicates of the range it replaces (ANDed).
    replaces: tuple[str, ...] = ()
    # Refused by any data change: append_if_unchanged by its name, and whatever this module
    # cannot bound (snapshots, our own pre-hook steps, whose writes are arbitrary SQL).
    any_change: bool = False
    why_any: str = ""


def scope_json(scope: Scope) -> str:
    """The scope as the write's tag records it, for a later run to judge the commits that
    landed while the write ran (its verdict is not in the log)."""
    data = {
        "reads": [r.predicate for r in scope.reads],
        "replaces": list(scope.replaces),
        "keys": list(scope.keys),
        "key_predicates": list(scope.key_predicates),
        "any_change": scope.any_change,
        "why_any": scope.why_any,
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def scope_from_json(text: str) -> Scope:
    data = json.loads(text)
    return Scope(
        reads=tuple(ReadFilter(p) for p in data.get("reads") or ()),
        replaces=tuple(data.get("replaces") or ()),
        keys=tuple(data.get("keys") or ()),
        key_predicates=tuple(data.get("key_predicates") or ()),
        any_change=bool(data.get("any_change")),
        why_any=str(data.get("why_any") or ""),
    )


# Until the write says what it touches, and for the node's own pre-hook and schema-change
# statements (arbitrary SQL), any data change conflicts.
STEPS = Scope(
    any_change=True,
    why_any="this run's own pre-hook or schema-change steps write the table, rows unknown",
)


@dataclass(frozen=True)
class Judgement:
    commit: Commit
    conflict: bool
    why: str
    # Its rows could not be compared with what the node read or writes: the query failed,
    # which may be the model SQL's own fault (a unique_key it lacks).
    undecided: bool = False

    def describe(self) -> str:
        return f"v{self.commit.version} {self.commit.operation}: {self.why}"


def first_conflict(judgements: Sequence[Judgement]) -> Judgement | None:
    return next((j for j in judgements if j.conflict), None)
