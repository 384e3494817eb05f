"""Part 8: several models in one run over the servers. dbt opens a connection for each node,
and a new connection used to be a new session: over Spark Connect Spark compiles a session's
query code in that session's own class loader (SPARK-44795), so every node compiled its MERGE
anew; over Thrift each node paid the session's opening and closing. fenced_spark now keeps a
node's session for the next node (dbt/adapters/fenced_spark/connect.py, thrift.py). Here one
`dbt run` of four copies of bench_merge on one thread, per batch: stock over Thrift, fenced
over Thrift and over Connect, each also with a new session per node (each kept session closed
instead, as before). The time of each node, in the order it ran, and of the whole run."""

import json
import statistics
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from bench.lakehouse import Lakehouse, build_source, rows_label
from bench.pairs import carryover_balanced, model_seconds
from dbt.adapters.fenced_spark import connect, thrift

MODELS = tuple(f"bench_node_{i}" for i in range(1, 5))
STOCK = "stock over Thrift"
# Run -> (target, a new Connect session per node). Each run has its own tables: a table's
# batch applies once.
RUNS = {
    STOCK: ("stock_thrift", False),
    "fenced over Thrift": ("fenced_thrift", False),
    "fenced over Thrift, a new session per node": ("fenced_thrift", True),
    "fenced over Connect": ("fenced_connect", False),
    "fenced over Connect, a new session per node": ("fenced_connect", True),
}
# Each method's run with kept sessions, and the same with a new session per node.
KEPT_AND_NEW = (
    ("Thrift", "fenced over Thrift", "fenced over Thrift, a new session per node"),
    ("Connect", "fenced over Connect", "fenced over Connect, a new session per node"),
)
REUSED = "session reused for connection"


@dataclass
class NodesRun:
    run: str  # a key of RUNS
    batch: int
    nodes: list[float]  # each node's execution_time, in the order the nodes ran
    seconds: float  # the invocation's elapsed_time
    reused: int  # connections that took a kept session

    @property
    def later(self) -> float:
        """The median time of the nodes after the first."""
        return statistics.median(self.nodes[1:])


@dataclass
class Nodes:
    rows: int
    models: int
    runs: list[NodesRun] = field(default_factory=list)
    warmup: list[NodesRun] = field(default_factory=list)

    def of(self, run: str) -> list[NodesRun]:
        return [r for r in self.runs if r.run == run]

    def later(self, run: str) -> list[float]:
        """Per batch, the median time of the nodes after the first."""
        return [r.later for r in self.of(run)]

    def ratios(self, run: str) -> list[float]:
        """Per batch, `run`'s later nodes over stock's."""
        stock = {r.batch: r.later for r in self.of(STOCK)}
        return [r.later / stock[r.batch] for r in self.of(run)]


@contextmanager
def new_session_per_node() -> Iterator[None]:
    """What fenced_spark did before it kept sessions: each node's session closed."""
    released, kept = connect.release, thrift.keep
    connect.release = lambda session, leftovers: connect.close_session(session)  # type: ignore[assignment]
    thrift.keep = lambda handle: False  # type: ignore[assignment]
    try:
        yield
    finally:
        connect.release, thrift.keep = released, kept  # type: ignore[assignment]


def _tag(rows: int, new_sessions: bool) -> str:
    return f"{rows_label(rows)}_nodes" + ("_new" if new_sessions else "")


def _measure(house: Lakehouse, run: str, batch: int, rows: int) -> NodesRun:
    target, new_sessions = RUNS[run]
    reused = []

    def count(event: Any) -> None:
        if REUSED in event.info.msg:
            reused.append(event.info.msg)

    with new_session_per_node() if new_sessions else nullcontext():
        results = house.dbt(
            "run",
            "--select",
            *MODELS,
            "--vars",
            json.dumps({"batch": batch}),
            target=target,
            tag=_tag(rows, new_sessions),
            callbacks=[count],
        )
    adapter = target.split("_")[0]
    ordered = sorted(results["results"], key=_started)
    nodes = [model_seconds({"results": [node]}, adapter) for node in ordered]
    return NodesRun(run, batch, nodes, float(results["elapsed_time"]), len(reused))


def _started(node: dict) -> str:
    return min(t["started_at"] for t in node["timing"])


def run(house: Lakehouse, rows: int, batches: int, warmup: int) -> Nodes:
    result = Nodes(rows, len(MODELS))
    for kind, tag in (
        ("thrift", _tag(rows, False)),
        ("thrift", _tag(rows, True)),
        ("connect", _tag(rows, False)),
        ("connect", _tag(rows, True)),
    ):
        build_source(
            lambda sql, kind=kind: house.server_sql(kind, sql),
            f"bench_src_{tag}",
            rows,
            warmup + batches,
        )
    for target, new_sessions in RUNS.values():
        house.dbt(
            "run",
            "--full-refresh",
            "--select",
            *MODELS,
            target=target,
            tag=_tag(rows, new_sessions),
        )
    names = list(RUNS)
    for batch in range(1, warmup + batches + 1):
        for name in carryover_balanced(names, batch):  # as part 1's server runs
            measured = _measure(house, name, batch, rows)
            (result.warmup if batch <= warmup else result.runs).append(measured)
            nodes = " ".join(f"{s:.2f}" for s in measured.nodes)
            print(
                f"  batch {batch}{' (warm-up)' if batch <= warmup else ''}, {name}: nodes {nodes},"
                f" run {measured.seconds:.2f}s, sessions reused {measured.reused}",
                flush=True,
            )
    return result
