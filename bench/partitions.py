"""Part 5: K writers on K disjoint partitions of one table, with a compaction job beside them.

The table is partitioned by `p`; writer i owns `p = i`. Even writers run replace_where (each
batch replaces its own slot, `p = i AND batch_id = b`); odd writers run the self-reading append
(the batch's SQL reads the writer's own partition of the target at vB, as a watermark does).
An OPTIMIZE loop compacts the table while they write. Under "conflicts, not commits" a commit
in another partition, or a compaction, refuses nobody; Delta's own in-write conflicts (a strict
write's `maxCommitAttempts=0` raced by any commit while it runs) are counted apart. The same
writers on one shared partition must still lose or duplicate nothing.

Fenced: each batch through fence/protocol.py exactly as the materialization drives it
(pin, stage, pre-check with the conflict analysis, tagged strict write, verify, fence_retries),
its scope built as the adapter builds it (`read_filters` on the model SQL). Unfenced: the same
statements as stock dbt-spark runs them.
"""

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from bench.lakehouse import FenceRunner, Lakehouse
from dbt.adapters.fenced_spark.fence.errors import FenceViolation
from dbt.adapters.fenced_spark.fence.footprint import read_filters
from dbt.adapters.fenced_spark.fence.protocol import FenceState
from dbt.adapters.fenced_spark.fence.rewriter import pin_self_reads
from dbt.adapters.fenced_spark.fence.scope import Scope

SCHEMA = "bench_partitions"
SOURCE = f"{SCHEMA}.source"


@dataclass
class Partitions:
    mode: str  # fenced | unfenced
    writers: int
    per_writer: int
    shared: bool  # every writer on p = 0
    seconds: float = 0.0
    committed: int = 0
    failed: int = 0
    # Refused attempts, by what refused them: the fence's analysis of the vB gap, or Delta's
    # own check while the write ran.
    refused_gap: int = 0
    refused_in_write: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    optimizes: int = 0
    optimize_failures: int = 0
    lost: int = 0
    duplicated: int = 0

    @property
    def per_minute(self) -> float:
        return self.committed / (self.seconds / 60) if self.seconds else 0.0


def _model(writer: int, batch_id: int, table: str, partition: int) -> str:
    batch = f"select {partition} as p, batch_id, row, payload from {SOURCE} "
    if writer % 2 == 0:
        return f"{batch} where batch_id = {batch_id}"
    # The self-reading append: it reads its own partition of the target (a count that is
    # always >= 0, so every batch lands and the tally stays exact).
    return (
        f"{batch} where batch_id = {batch_id} and "
        f"(select count(*) from {table} where p = {partition}) >= 0"
    )


def _write_sql(writer: int, table: str, view: str, partition: int, batch_id: int) -> str:
    if writer % 2 == 0:
        return (
            f"insert into {table} replace where (p = {partition} and batch_id = {batch_id}) "
            f"select * from {view}"
        )
    return f"insert into {table} select * from {view}"


def _scope(writer: int, model: str, table: str, partition: int, batch_id: int) -> Scope:
    schema, name = table.split(".")
    reads = tuple(read_filters(model, schema, name))
    if writer % 2 == 0:
        return Scope(reads=reads, replaces=(f"p = {partition} and batch_id = {batch_id}",))
    return Scope(reads=reads)


def _fenced(
    spark: Any,
    table: str,
    writer: int,
    partition: int,
    batch_id: int,
    retries: int,
    invocation: str,
    result: Partitions,
    lock: threading.Lock,
) -> bool:
    runner = FenceRunner(spark)
    fence = runner.fence()
    schema, name = table.split(".")
    view = f"bench_p{writer}_{batch_id}__fence"
    model = _model(writer, batch_id, table, partition)
    strategy = "replace_where" if writer % 2 == 0 else "append_if_unchanged"

    def stage(state: FenceState) -> None:
        pinned = pin_self_reads(model, schema, name, state.read_version)
        runner.execute(f"create or replace temporary view {view} as {pinned}")

    write = fence.write

    def counted(state: FenceState, sql: str) -> Any:
        try:
            return write(state, sql)
        except FenceViolation as exc:
            cause = exc.report.cause or ""
            with lock:
                if cause.startswith("Delta's conflict detection"):
                    result.refused_in_write += 1
                else:
                    result.refused_gap += 1
                parts = cause.split(": ", 2)
                key = parts[0] if len(parts) == 1 else f"{parts[0]}: {parts[-1][:80]}"
                result.causes[key] = result.causes.get(key, 0) + 1
            raise

    fence.write = counted  # type: ignore[method-assign]
    read_version = fence.latest_version(table)
    state = FenceState(
        table,
        table,
        strategy,
        read_version,
        read_version,
        invocation,
        f"model.bench.p{writer}_{batch_id}",
    )
    state = replace(state, scope=_scope(writer, model, table, partition, batch_id))
    stage(state)
    try:
        fence.run(
            state, _write_sql(writer, table, view, partition, batch_id), retries, restage=stage
        )
        return True
    except FenceViolation:
        return False
    finally:
        runner.execute(f"drop view if exists {view}")


def _unfenced(spark: Any, table: str, writer: int, partition: int, batch_id: int) -> bool:
    view = f"bench_u{writer}_{batch_id}"
    try:
        spark.sql(
            f"create or replace temporary view {view} as "
            f"{_model(writer, batch_id, table, partition)}"
        )
        spark.sql(_write_sql(writer, table, view, partition, batch_id))
        return True
    except Exception:
        return False


def _race(house: Lakehouse, result: Partitions, retries: int) -> None:
    table = f"{SCHEMA}.{result.mode}_k{result.writers}_{'shared' if result.shared else 'own'}"
    house.sql(f"drop table if exists {table}")
    house.sql(
        f"create table {table} (p int, batch_id int, row bigint, payload string) "
        "using delta partitioned by (p)"
    )
    invocation = str(uuid.uuid4())
    sessions = [house.connection() for _ in range(result.writers)]
    done = threading.Event()
    lock = threading.Lock()
    start = threading.Barrier(result.writers + 1)

    def writer(index: int) -> None:
        spark = sessions[index]
        partition = 0 if result.shared else index
        start.wait()
        for j in range(result.per_writer):
            batch_id = index * result.per_writer + j
            if result.mode == "fenced":
                ok = _fenced(
                    spark, table, index, partition, batch_id, retries, invocation, result, lock
                )
            else:
                ok = _unfenced(spark, table, index, partition, batch_id)
            with lock:
                result.committed += ok
                result.failed += not ok

    def compactor() -> None:
        spark = house.connection()
        start.wait()
        while not done.wait(0.5):
            try:
                spark.sql(f"optimize {table}").collect()
                result.optimizes += 1
            except Exception:
                result.optimize_failures += 1

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(result.writers)]
    helper = threading.Thread(target=compactor)
    started = time.monotonic()
    helper.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.seconds = time.monotonic() - started
    done.set()
    helper.join()
    _check(house, table, result)


def _check(house: Lakehouse, table: str, result: Partitions) -> None:
    (rows_per_batch,) = house.sql(f"select count(*) from {SOURCE} where batch_id = 0")[0]
    copies = {
        b: n // rows_per_batch
        for b, n in house.sql(f"select batch_id, count(*) from {table} group by batch_id")
    }
    expected = result.writers * result.per_writer
    result.duplicated = sum(1 for n in copies.values() if n > 1)
    result.lost = max(0, result.committed - sum(1 for n in copies.values() if n >= 1))
    assert len(copies) <= expected


def run(
    house: Lakehouse, writers: int, per_writer: int, rows: int, retries: int
) -> list[Partitions]:
    house.sql(f"create schema if not exists {SCHEMA}")
    house.sql(f"drop table if exists {SOURCE}")
    house.sql(
        f"create table {SOURCE} using delta as "
        "select cast(b.id as int) as batch_id, r.id as row, concat('payload-', b.id, '-', r.id) "
        f"as payload from range(0, {writers * per_writer}, 1, 1) b "
        f"cross join range(0, {rows}, 1, 1) r"
    )
    out = []
    for shared in (False, True):
        for mode in ("unfenced", "fenced"):
            result = Partitions(mode, writers, per_writer, shared)
            _race(house, result, retries)
            print(
                f"  {writers} writers on {'one shared partition' if shared else 'own partitions'}"
                f" + OPTIMIZE, {mode:<8}: {result.committed}/{writers * per_writer} committed in "
                f"{result.seconds:5.1f}s = {result.per_minute:5.1f}/min; refused attempts: "
                f"{result.refused_gap} by the vB-gap analysis, {result.refused_in_write} by "
                f"Delta during the write; OPTIMIZE {result.optimizes} committed, "
                f"{result.optimize_failures} failed; lost {result.lost}, duplicated "
                f"{result.duplicated}",
                flush=True,
            )
            for cause, n in Counter(result.causes).most_common(4):
                print(f"      {n} x {cause}", flush=True)
            out.append(result)
    return out
