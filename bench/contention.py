"""Part 4: throughput under contention (issue 59, item 7). K runs at once on one table, stock
dbt-spark's and fenced_spark's taking turns in one JVM, each run in its own thread with its own
session (as each dbt connection gets one). The workload is tests/harness/contention.py's, the
one the contention tests race:

- `row`: the `counter` merge. Every run reads row 0 of `{{ this }}` and writes n + 1: the
  textbook lost update, one row every run writes.
- `partitions`: the `parts` merge. Every run reads its own partition of `{{ this }}` (a new one
  per run) and merges n + 1 into it: no run reads or writes what another does.

Fenced: the fence as the materialization drives it (`contention.fenced_runs`: vB, the SQL
pinned, the tagged MERGE with its SetTransaction, verification, `fence_retries`). Stock: the
same MERGE as stock dbt-spark sends it (`contention.stock_runs`: the SQL unpinned, once, no
retries). Both are timed from the K runs' start to the last one's end; dbt's per-run overhead
(parse, compile, introspection) is left out on both sides. Afterwards the table says what was
lost or duplicated (`contention.counter_settled`, `contention.parts_settled`).
"""

import itertools
import os
import re
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from bench.lakehouse import Lakehouse
from bench.pairs import carryover_balanced
from dbt.adapters.fenced_spark.fence.delta.words import conflict_name
from dbt.adapters.fenced_spark.fence.errors import FenceViolation
from dbt.adapters.fenced_spark.fence.outcome import reason
from dbt.adapters.fenced_spark.fence.protocol import Fence
from tests.harness import contention
from tests.harness.runner import SessionRunner

SCHEMA = "bench_contention"
MODES = ("stock", "fenced")
# Each workload's table in tests/harness/contention.py and whether its runs are disjoint.
WORKLOADS = {"row": ("counter", False), "partitions": ("parts", True)}


@dataclass
class Contention:
    workload: str  # row | partitions
    mode: str  # stock | fenced
    threads: int  # K
    retries: int  # fenced: fence_retries; stock has none
    rounds: int = 0
    seconds: float = 0.0  # the rounds' wall time, summed
    codes: list[int] = field(default_factory=list)  # each run's: 0 committed, 1 refused
    attempts: list[int] = field(default_factory=list)  # each run's: 1 + fence_retries used
    sends: list[int] = field(default_factory=list)  # each run's writes sent again
    # Each run's seconds in the fence's steps (`PHASES`), by step, a run a value.
    phases: dict[str, list[float]] = field(default_factory=dict)
    # CPU seconds the bench's JVM and Python process got during the rounds (the machine is
    # shared: a busy neighbour stretches the rounds' wall time, not this); None where /proc
    # cannot say.
    cpu_seconds: float | None = 0.0
    loads: list[float] = field(default_factory=list)  # the 1-minute load at each round's end
    lost: int = 0  # reported committed, yet not in the table
    duplicated: int = 0  # in the table beyond what the committed runs wrote
    restores: int = 0  # RESTORE commits in the table's history
    errors: list[str] = field(default_factory=list)  # each refused run's, versions as N

    @property
    def runs(self) -> int:
        return len(self.codes)

    @property
    def committed(self) -> int:
        return self.codes.count(0)

    @property
    def refused(self) -> int:
        return self.runs - self.committed

    @property
    def per_minute(self) -> float:
        return self.committed / (self.seconds / 60) if self.seconds else 0.0

    @property
    def cpu_per_run(self) -> float | None:
        """CPU seconds per committed run."""
        if self.cpu_seconds is None or not self.committed:
            return None
        return self.cpu_seconds / self.committed

    def phase(self, name: str) -> float | None:
        """Seconds a run spent in the fence's step `name`, on average (None: not timed)."""
        values = self.phases.get(name)
        return statistics.mean(values) if values else None

    @property
    def exact(self) -> bool:
        """What issue 59 asks of fenced runs: every one committed, nothing lost or duplicated,
        no RESTORE."""
        return not (self.refused or self.lost or self.duplicated or self.restores)

    def line(self) -> str:
        return (
            f"  K={self.threads} {self.workload:<10} {self.mode:<6}: {self.committed}/{self.runs}"
            f" committed in {self.seconds:5.1f}s = {self.per_minute:5.1f}/min, refused "
            f"{self.refused}, lost {self.lost}, duplicated {self.duplicated}, RESTOREs "
            f"{self.restores}, attempts mean {statistics.mean(self.attempts):.2f} max "
            f"{max(self.attempts)}, sends {sum(self.sends)}, CPU {self.cpu_per_run or 0:.1f}s"
            " per committed run; a run's "
            + ", ".join(f"{p} {self.phase(p) or 0:.1f}s" for p in PHASES)
        )


def cause(error: BaseException) -> str:
    """A refused run's error in a line, versions and ids as N, so that alike ones count
    together: the fence's cause and outcome, or Delta's error class."""
    if isinstance(error, FenceViolation):
        report = error.report
        text = f"{report.cause}; {report.what_happened().split(' Inspect ')[0]}"
    else:
        text = conflict_name(error) or reason(error, 200)
    return re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}|\d+", "N", text)


def _schema(mode: str, workload: str, k: int) -> str:
    return f"{SCHEMA}_{mode}_{workload}_k{k}"


def _prepare(house: Lakehouse, schema: str, workload: str) -> None:
    rows = contention.dict_rows(house.connection())
    rows(f"create schema if not exists {schema}")
    if WORKLOADS[workload][1]:
        contention.make_parts(rows, schema)
    else:
        contention.make_counter(rows, schema)


def _race(house: Lakehouse, result: Contention, names: list[str], schema: str) -> None:
    """One round: the K runs `names` at once on `schema`'s table, then what it says of them."""
    table, disjoint = WORKLOADS[result.workload]
    spark = house.connection()
    rows = contention.dict_rows(spark)
    writes = (table,)

    def counter() -> int:
        return int(rows(f"select n from {schema}.counter where id = 0")[0]["n"])

    before = 0 if disjoint else counter()
    timing = _phases() if result.mode == "fenced" else nullcontext(None)
    with contention.fence_lines() as lines, timing as phases:
        cpu = cpu_seconds(house)
        started = time.monotonic()
        if result.mode == "fenced":
            codes = contention.fenced_runs(spark, schema, names, result.retries, disjoint, writes)
        else:
            codes = contention.stock_runs(spark, schema, names, disjoint, writes)
        seconds = time.monotonic() - started
        cpu_after = cpu_seconds(house)
    result.seconds += seconds
    result.loads.append(os.getloadavg()[0])
    if result.cpu_seconds is not None and cpu is not None and cpu_after is not None:
        result.cpu_seconds += cpu_after - cpu
    else:
        result.cpu_seconds = None
    result.rounds += 1
    green = sum(code == 0 for code in codes.values())
    if disjoint:
        lost, duplicated = contention.parts_settled(codes, rows, schema)
    else:
        lost, duplicated = contention.counter_settled(green, before, counter())
    result.lost += lost
    result.duplicated += duplicated
    print(
        f"    K={len(names)} {result.workload} {result.mode}: {green}/{len(names)} committed in "
        f"{seconds:.1f}s, lost {lost}, duplicated {duplicated}, CPU "
        f"{'?' if cpu is None or cpu_after is None else f'{cpu_after - cpu:.1f}s'}, load "
        f"{result.loads[-1]:.1f}",
        flush=True,
    )
    for name in names:
        result.codes.append(codes.get(name, 1))
        result.attempts.append(1 + lines[name][contention.RETRIED])
        result.sends.append(lines[name][contention.SENT_AGAIN])
        for phase in PHASES if phases is not None else ():
            result.phases.setdefault(phase, []).append(phases[name][phase])
        if codes.get(name, 1):
            error = contention.errors.get(name)
            result.errors.append(cause(error) if error else "the run did not end")
            if result.mode == "fenced":  # what issue 59 says never happens: shown whole
                print(f"    {name} refused:\n{error}", flush=True)
    history = rows(f"describe history {schema}.{table}")
    result.restores = [str(h["operation"]) for h in history].count("RESTORE")


def cpu_seconds(house: Lakehouse) -> float | None:
    """The CPU seconds this process and its Spark JVM have had so far (user and system), or
    None where /proc does not say."""
    try:
        pid = house.spark.sparkContext._gateway.proc.pid
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (AttributeError, OSError):
        return None
    return jvm_cpu(fields) + time.process_time()


def jvm_cpu(fields: list[str]) -> float:
    """utime + stime in seconds, from /proc/<pid>/stat's fields after the command's ")"."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The fence's steps a fenced run's time is split into, each timed by wrapping its method in
# this process (as part 1 times `LogTail`'s reads): the write statement (`SessionRunner.execute`,
# which the fence calls only for its write, and for a RESTORE, which verify's time holds too),
# the pre-check before each send, verification after it, and the back-off before a retry or a
# send (`Fence.wait_turns`).
PHASES = {
    "write": (SessionRunner, "execute"),
    "pre-check": (Fence, "precheck"),
    "verify": (Fence, "verify"),
    "back-off": (Fence, "wait_turns"),
}


@contextmanager
def _phases() -> Iterator[dict[str, Counter[str]]]:
    """While inside: the seconds each thread (a run, in `contention.fenced_runs`) spends in
    each of `PHASES`, by thread name."""
    spent: dict[str, Counter[str]] = defaultdict(Counter)
    originals = {phase: getattr(cls, name) for phase, (cls, name) in PHASES.items()}

    def timed(phase: str, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return method(*args, **kwargs)
            finally:
                spent[threading.current_thread().name][phase] += time.monotonic() - started

        return call

    for phase, (cls, name) in PHASES.items():
        setattr(cls, name, timed(phase, originals[phase]))
    try:
        yield spent
    finally:
        for phase, (cls, name) in PHASES.items():
            setattr(cls, name, originals[phase])


def run(house: Lakehouse, ks: tuple[int, ...], rounds: int, retries: int) -> list[Contention]:
    """For each K and workload, `rounds` rounds of K runs at once, stock's and fenced's taking
    turns (A B, B A, ...: `pairs.carryover_balanced`), each on a table of its own. A warm-up
    round of each, at the smallest K, goes first and is not reported."""
    races = itertools.count()

    def names(k: int) -> list[str]:
        # Unique run names across the part: the partition a disjoint run writes is its name.
        return contention.run_names(next(races), k)

    for workload in WORKLOADS:
        for mode in MODES:
            warm = _schema(mode, workload, 0)  # the warm-up's tables: K = 0's
            _prepare(house, warm, workload)
            _race(house, Contention(workload, mode, min(ks), retries), names(min(ks)), warm)
    out = []
    for k in ks:
        for workload in WORKLOADS:
            results = {mode: Contention(workload, mode, k, retries) for mode in MODES}
            for mode in MODES:
                _prepare(house, _schema(mode, workload, k), workload)
            for round_ in range(rounds):
                for mode in carryover_balanced(MODES, round_ + 1):
                    _race(house, results[mode], names(k), _schema(mode, workload, k))
            for mode in MODES:
                print(results[mode].line(), flush=True)
                out.append(results[mode])
    causes = Counter(e for c in out for e in c.errors)
    for error, n in causes.most_common(6):
        print(f"  {n} x {error}", flush=True)
    return out
