"""Part 7: the embedded session's sizing on a big table. The session sizes shuffle partitions,
Delta's snapshot partitions and file-listing parallelism to its cores (session.sized_conf),
which halves a small project's build (part 6). Here the same 1% MERGE into a 2M-row Delta
table runs under the sized settings and under Spark's and Delta's defaults, alternating, each
on its own session of the one JVM (the three settings are SQL confs, so a session may carry
either): the sizing must not make a big merge slower."""

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from bench.lakehouse import Lakehouse
from dbt.adapters.fenced_spark import session

SCHEMA = "bench_sizing"
# What the session ran with before it sized itself (bench/build.py's spark_defaults).
DEFAULTS = {
    "spark.sql.shuffle.partitions": "200",
    "spark.databricks.delta.snapshotPartitions": "50",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "10000",
}
SETTINGS = ("sized", "defaults")
CORES = os.cpu_count() or 1  # what the session sizes itself to (local[*])
SIZED = {k: v for k, v in session.sized_conf(CORES).items() if k in DEFAULTS}


@dataclass
class Sizing:
    rows: int
    batch_rows: int
    cores: int
    sized_conf: dict[str, str] = field(default_factory=dict)
    sized: list[float] = field(default_factory=list)  # seconds per MERGE
    defaults: list[float] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [s / d for s, d in zip(self.sized, self.defaults, strict=True)]


def _session(house: Lakehouse, setting: str) -> Any:
    spark = house.connection()
    for key, value in (DEFAULTS if setting == "defaults" else SIZED).items():
        spark.conf.set(key, value)
    return spark


def run(house: Lakehouse, rows: int, batch_rows: int, pairs: int) -> Sizing:
    result = Sizing(rows, batch_rows, CORES)
    result.sized_conf = dict(SIZED)
    spark = house.connection()
    spark.sql(f"create schema if not exists {SCHEMA}")
    sessions = {setting: _session(house, setting) for setting in SETTINGS}
    for setting, s in sessions.items():
        s.sql(f"drop table if exists {SCHEMA}.{setting}")
        s.sql(
            f"create table {SCHEMA}.{setting} using delta as select id, id % 1000 as k, "
            f"cast(id as string) as note from range({rows})"
        )
    for batch in range(pairs + 1):  # the first pair warms up
        order = SETTINGS if batch % 2 == 0 else SETTINGS[::-1]
        for setting in order:
            # Half updates of existing keys, half new keys: the shape of part 1's batches.
            first = rows + batch * batch_rows
            source = (
                f"select id * 2 as id, 0 as k, 'u{batch}' as note from range({batch_rows // 2})"
                f" union all select id, 1 as k, 'n{batch}' as note"
                f" from range({first}, {first + batch_rows // 2})"
            )
            started = time.perf_counter()
            sessions[setting].sql(
                f"merge into {SCHEMA}.{setting} t using ({source}) s on s.id = t.id "
                "when matched then update set * when not matched then insert *"
            )
            seconds = time.perf_counter() - started
            if batch:
                getattr(result, setting).append(seconds)
            print(f"  {rows:,} rows, batch {batch}, {setting}: {seconds:.2f}s", flush=True)
    counts = {
        s: sessions[s].sql(f"select count(*) from {SCHEMA}.{s}").collect()[0][0] for s in SETTINGS
    }
    if len(set(counts.values())) != 1:
        raise RuntimeError(f"the two tables differ after the merges: {counts}")
    print(
        f"  sized/defaults median {statistics.median(result.ratios()):.3f}",
        flush=True,
    )
    return result
