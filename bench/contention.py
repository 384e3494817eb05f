"""Part 4: K writers appending batches to one table at once, each in its own thread with its
own session (as fenced_spark gives each dbt connection).

Fenced: every batch runs the fence exactly as the materialization drives it (fence/protocol.py:
capture vB, stage the pinned SQL, pre-check, strict tagged INSERT, verify, and `fence_retries`
with its back-off, recapture and restage). Unfenced: the same INSERT as a blind append, as stock
dbt-spark runs it. Both write the same batch SQL, which does not read the target, so the
difference is the fence alone. dbt's own per-run overhead (parse, compile, introspection) is
left out on both sides: dbt cannot run one model several times at once in one process.
"""

import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.lakehouse import FenceRunner, Lakehouse, strict_append
from dbt.adapters.fenced_spark.fence.errors import FenceViolation, Outcome
from dbt.adapters.fenced_spark.fence.protocol import FenceState
from dbt.adapters.fenced_spark.fence.rewriter import pin_self_reads

SCHEMA = "bench_contention"
SOURCE = f"{SCHEMA}.source"
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


@dataclass
class Batch:
    batch_id: int
    committed: bool
    attempts: int
    outcome: str = "committed"  # or the fence's outcome of the last attempt, or "error"
    error: str | None = None


@dataclass
class Contention:
    mode: str  # fenced | unfenced
    threads: int
    per_thread: int
    # Delta's `snapshotPartitions` on the writers' sessions; None is Delta's default (50).
    snapshot_partitions: int | None = None
    seconds: float = 0.0
    batches: list[Batch] = field(default_factory=list)
    landed_once: int = 0
    lost: int = 0  # reported committed, yet not in the table
    duplicated: int = 0  # in the table more than once
    failed: int = 0  # reported failed (loudly), and not in the table
    # Reported failed with "written and NOT reverted", and in the table once: loud, and true.
    not_reverted: int = 0
    unexplained: int = 0  # reported failed otherwise, yet in the table

    @property
    def key(self) -> tuple[int, int | None]:
        return self.threads, self.snapshot_partitions

    @property
    def committed(self) -> int:
        return sum(b.committed for b in self.batches)

    @property
    def per_minute(self) -> float:
        return self.committed / (self.seconds / 60)

    @property
    def attempts(self) -> list[int]:
        return [b.attempts for b in self.batches]

    @property
    def exact(self) -> bool:
        expected = self.threads * self.per_thread
        return self.landed_once == expected and not (
            self.lost or self.duplicated or self.unexplained
        )


def _fenced(spark: Any, table: str, batch_id: int, retries: int, invocation: str) -> Batch:
    runner = FenceRunner(spark)
    fence = runner.fence()
    schema, name = table.split(".")
    view = f"bench_batch_{batch_id}__fence"
    model = f"select batch_id, row, payload from {SOURCE} where batch_id = {batch_id}"
    attempts = 0

    def stage(state: FenceState) -> None:
        nonlocal attempts
        attempts += 1
        pinned = pin_self_reads(model, schema, name, state.read_version)
        runner.execute(f"create or replace temporary view {view} as {pinned}")

    read_version = fence.latest_version(table)
    state = strict_append(table, read_version, invocation, f"model.bench.batch_{batch_id}")
    stage(state)
    try:
        fence.run(state, f"insert into {table} select * from {view}", retries, restage=stage)
        return Batch(batch_id, True, attempts)
    except FenceViolation as exc:
        report = exc.report
        reason = f"{report.cause}; {report.what_happened().split(' Inspect ')[0]}"
        return Batch(batch_id, False, attempts, report.outcome.value, re.sub(r"\d+", "N", reason))
    finally:
        runner.execute(f"drop view if exists {view}")


def _unfenced(spark: Any, table: str, batch_id: int) -> Batch:
    try:
        spark.sql(
            f"insert into {table} select batch_id, row, payload from {SOURCE} "
            f"where batch_id = {batch_id}"
        )
        return Batch(batch_id, True, 1)
    except Exception as exc:  # counted and reported, never swallowed
        return Batch(batch_id, False, 1, "error", str(exc).splitlines()[0][:200])


def _race(house: Lakehouse, result: Contention, retries: int) -> None:
    table = f"{SCHEMA}.{result.mode}_k{result.threads}_p{result.snapshot_partitions or 0}"
    house.sql(f"drop table if exists {table}")
    house.sql(f"create table {table} (batch_id int, row bigint, payload string) using delta")
    invocation = str(uuid.uuid4())
    sessions = [house.connection() for _ in range(result.threads)]
    if result.snapshot_partitions:
        for spark in sessions:
            spark.conf.set(SNAPSHOT_PARTITIONS, str(result.snapshot_partitions))
    start = threading.Barrier(result.threads)
    lock = threading.Lock()

    def writer(index: int) -> None:
        spark = sessions[index]
        start.wait()
        for j in range(result.per_thread):
            batch_id = index * result.per_thread + j
            if result.mode == "fenced":
                batch = _fenced(spark, table, batch_id, retries, invocation)
            else:
                batch = _unfenced(spark, table, batch_id)
            with lock:
                result.batches.append(batch)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(result.threads)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.seconds = time.monotonic() - started
    _check(house, table, result)


def _check(house: Lakehouse, table: str, result: Contention) -> None:
    """Every batch, row for row: in the table once, or reported failed."""
    (rows_per_batch,) = house.sql(f"select count(*) from {SOURCE} where batch_id = 0")[0]
    copies = Counter()
    for batch_id, rows in house.sql(f"select batch_id, count(*) from {table} group by batch_id"):
        if rows % rows_per_batch:
            raise RuntimeError(f"{table}: batch {batch_id} has {rows} rows, a partial write")
        copies[batch_id] = rows // rows_per_batch
    for batch in result.batches:
        n = copies.get(batch.batch_id, 0)
        if n > 1:
            result.duplicated += 1
        elif n == 1:
            result.landed_once += 1
            if not batch.committed and batch.outcome == Outcome.NOT_REVERTED.value:
                result.not_reverted += 1
            elif not batch.committed:
                result.unexplained += 1
        elif batch.committed:
            result.lost += 1
        else:
            result.failed += 1


def run(
    house: Lakehouse, ks: tuple[int, ...], per_thread: int, rows: int, retries: int, cores: int
) -> list[Contention]:
    """K = 1 is the ceiling: strict commits serialise, so K fenced writers at best commit as
    fast as one alone. K = 1 and the largest K run again with Delta's snapshot partitions at the
    core count, which makes every commit's state rebuild cheaper, to show how the ratio moves."""
    house.sql(f"create schema if not exists {SCHEMA}")
    house.sql(f"drop table if exists {SOURCE}")
    house.sql(
        f"create table {SOURCE} using delta as "
        "select cast(b.id as int) as batch_id, r.id as row, concat('payload-', b.id, '-', r.id) "
        f"as payload from range(0, {max(ks) * per_thread}, 1, 1) b "
        f"cross join range(0, {rows}, 1, 1) r"
    )
    for mode in ("unfenced", "fenced"):  # warm-up, not reported: the JVM's first INSERTs
        _race(house, Contention(mode, 1, 1), retries)
    plan = [(k, None) for k in (1, *ks)] + [(1, cores), (max(ks), cores)]
    out = []
    for k, partitions in plan:
        for mode in ("unfenced", "fenced"):
            result = Contention(mode, k, per_thread, partitions)
            _race(house, result, retries)
            attempts = result.attempts
            print(
                f"  K={k} {mode:<8} snapshot partitions {partitions or 'default'}: "
                f"{result.committed}/{k * per_thread} committed in "
                f"{result.seconds:5.1f}s = {result.per_minute:5.1f}/min, attempts "
                f"mean {sum(attempts) / len(attempts):.2f} max {max(attempts)}; "
                f"once {result.landed_once}, lost {result.lost}, duplicated "
                f"{result.duplicated}, failed {result.failed}, failed but not reverted "
                f"{result.not_reverted}, unexplained {result.unexplained}",
                flush=True,
            )
            out.append(result)
    return out
