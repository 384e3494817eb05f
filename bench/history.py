"""Part 2: what capturing vB and verifying the commit cost on a table with a long history.

Tables with N commits are built fast but real. Delta itself writes the first commits, among
them empty WRITE commits through its transaction API, with its own checkpoints at versions 10
and 20. Those commits leave the table's state unchanged, so each later empty commit is byte for
byte what Delta writes for it, apart from its timestamp, readVersion and txnId, and so is each
checkpoint. The bulk of the history is replicated from Delta's own files (JSON commit, .crc
checksum, checkpoint every 10 versions, Hadoop's .crc sidecars). The last 10 commits are real
INSERTs, so the latest checkpoint and the log's tail are Delta's own again. Building 10,000
commits through Delta alone takes over an hour on two cores, and the listing slows each commit.
"""

import os
import re
import statistics
import struct
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from bench.lakehouse import READERS, FenceRunner, Lakehouse, strict_append
from dbt.adapters.fenced_spark.fence.outcome import Outcome

SCHEMA = "bench_history"
TEMPLATE_VERSION = 20  # Delta's own empty commit and checkpoint, copied from here on
TAIL = 10  # real INSERTs at the end


@dataclass
class HistoryResult:
    reader: str  # bench.lakehouse.READERS
    commits: int  # before the measurement's own commits
    checkpoints: int
    log_files: int
    build_seconds: float
    capture: list[float] = field(default_factory=list)
    precheck: list[float] = field(default_factory=list)
    verify: list[float] = field(default_factory=list)
    confs: list[float] = field(default_factory=list)  # the SET/RESET around the write
    write: list[float] = field(default_factory=list)  # the INSERT itself, for scale
    capture_cold: list[float] = field(default_factory=list)
    # The SQL path's catalog lookup is dbt-spark's own DESCRIBE of the target, which a run
    # sends anyway (for its column list): kept apart from capture, whose own reads are the rest.
    describe: list[float] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(getattr(self, name))

    @property
    def capture_verify(self) -> float:
        return self.median("capture") + self.median("verify")

    @property
    def fence_total(self) -> float:
        return sum(self.median(n) for n in ("capture", "precheck", "verify", "confs"))


def _sidecar(data: bytes, chunk: int = 512) -> bytes:
    # Hadoop's ChecksumFileSystem sidecar: "crc\0", bytes per checksum, a CRC32 per chunk.
    sums = b"".join(
        struct.pack(">I", zlib.crc32(data[i : i + chunk])) for i in range(0, len(data), chunk)
    )
    return b"crc\x00" + struct.pack(">i", chunk) + sums


def _write(log_dir: str, name: str, data: bytes) -> None:
    with open(os.path.join(log_dir, name), "wb") as f:
        f.write(data)
    with open(os.path.join(log_dir, f".{name}.crc"), "wb") as f:
        f.write(_sidecar(data))


def _read(log_dir: str, name: str) -> bytes:
    with open(os.path.join(log_dir, name), "rb") as f:
        return f.read()


def _write_operation(spark: Any) -> Any:
    # DeltaOperations.Write(mode, options...) as a plain append. Its number of Option
    # parameters differs across Delta releases: every one after the mode is None.
    jvm = spark._jvm
    loader = jvm.Thread.currentThread().getContextClassLoader()
    cls = jvm.java.lang.Class.forName(
        "org.apache.spark.sql.delta.DeltaOperations$Write", True, loader
    )
    (ctor,) = cls.getConstructors()
    count = len(ctor.getParameterTypes())
    args = spark.sparkContext._gateway.new_array(jvm.java.lang.Object, count)
    args[0] = jvm.org.apache.spark.sql.SaveMode.Append
    for i in range(1, count):
        args[i] = getattr(jvm.scala, "None$").__getattr__("MODULE$")
    return ctor.newInstance(args)


def _empty_commits(spark: Any, location: str, count: int) -> None:
    """`count` commits that change nothing, written by Delta's own transaction API."""
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
    nothing = getattr(jvm.scala.collection.immutable, "Nil$").__getattr__("MODULE$")
    operation = _write_operation(spark)
    for _ in range(count):
        delta_log.startTransaction().commit(nothing, operation)


def _replicate(log_dir: str, first: int, last: int) -> None:
    """Versions first..last as Delta writes an empty commit after TEMPLATE_VERSION."""
    commit = _read(log_dir, f"{TEMPLATE_VERSION:020d}.json").decode()
    checksum = _read(log_dir, f"{TEMPLATE_VERSION:020d}.crc").decode()
    checkpoint = _read(log_dir, f"{TEMPLATE_VERSION:020d}.checkpoint.parquet")
    started_ms = int(time.time() * 1000)
    for version in range(first, last + 1):
        txn = str(uuid.uuid4())
        text = re.sub(r'"timestamp":\d+', f'"timestamp":{started_ms + version - first}', commit)
        text = re.sub(r'"readVersion":\d+', f'"readVersion":{version - 1}', text)
        text = re.sub(r'"txnId":"[^"]+"', f'"txnId":"{txn}"', text)
        _write(log_dir, f"{version:020d}.json", text.encode())
        _write(
            log_dir,
            f"{version:020d}.crc",
            re.sub(r'"txnId":"[^"]+"', f'"txnId":"{txn}"', checksum).encode(),
        )
        if version % 10 == 0:
            _write(log_dir, f"{version:020d}.checkpoint.parquet", checkpoint)


def build(house: Lakehouse, table: str, commits: int) -> str:
    """`table` with exactly `commits` commits (versions 0..commits-1); returns its location."""
    builder = house.connection()
    # Build-time only, on this session: Delta's state reconstruction for its checkpoints in
    # one partition instead of 50 (two cores). The measured sessions keep the defaults.
    builder.conf.set("spark.databricks.delta.snapshotPartitions", "1")
    jvm = builder._jvm
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(builder._jsparkSession)
    try:
        builder.sql(f"create schema if not exists {SCHEMA}")
        builder.sql(f"drop table if exists {table}")
        builder.sql(f"create table {table} (id bigint, note string) using delta")  # v0
        builder.sql(f"insert into {table} values (0, 'v1')")  # v1
        location = builder.sql(f"describe detail {table}").collect()[0].location
        location = location.removeprefix("file:")
        tail = min(TAIL, commits - 2)
        middle_last = commits - tail - 1  # the last version before the real tail
        delta_written = min(middle_last, TEMPLATE_VERSION)
        _empty_commits(builder, location, delta_written - 1)  # v2..delta_written
        if middle_last > TEMPLATE_VERSION:
            _replicate(os.path.join(location, "_delta_log"), TEMPLATE_VERSION + 1, middle_last)
        for version in range(middle_last + 1, commits):
            builder.sql(f"insert into {table} values ({version}, 'v{version}')")
    finally:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(house.spark._jsparkSession)
    return location


def check(house: Lakehouse, table: str, commits: int) -> None:
    """Delta reads every commit back, in order, and the table's rows are intact."""
    versions = sorted(r.version for r in house.sql(f"describe history {table}"))
    if versions != list(range(commits)):
        raise RuntimeError(f"{table}: history has {len(versions)} commits, expected {commits}")
    (row,) = house.sql(f"select count(*) from {table}")
    expected = 1 + min(TAIL, commits - 2)
    if row[0] != expected:
        raise RuntimeError(f"{table}: {row[0]} rows, expected {expected}")


def measure(house: Lakehouse, table: str, result: HistoryResult, reps: int) -> None:
    runner = FenceRunner(house.connection(), result.reader)
    invocation = str(uuid.uuid4())
    last: int | None = None  # the previous repetition's commit: what run_results.json says
    for rep in range(reps):
        runner.calls.clear()
        # Capture and write are separate adapter calls, each with a new Fence (and reader);
        # over SQL the second finds the table's log where the first did, as a node's steps do,
        # and the first starts from where the last run left the table, as the adapter does.
        node: dict[str, str | None] = {}
        hints = {table: last} if last is not None else None
        read_version = runner.fence(node, hints).latest_version(table)
        state = strict_append(
            table, read_version, invocation, f"model.bench.history_{result.reader}_{rep}"
        )
        written = runner.fence(node).write(
            state, f"insert into {table} values ({-rep - 1}, 'fenced')"
        )
        if written.outcome != Outcome.COMMITTED or written.commit_version != read_version + 1:
            raise RuntimeError(f"{table}: fenced write {written}")
        last = written.commit_version
        calls = runner.calls
        write_at = next(i for i, c in enumerate(calls) if c.sql.startswith("insert into"))
        # A history read's own statements (kind probe) are logged inside it, before it.
        first = next(i for i, c in enumerate(calls) if c.kind == "history")
        described = sum(c.seconds for c in calls[:first] if c.sql.startswith("describe "))
        result.capture.append(calls[first].seconds - described)
        result.describe.append(described)
        result.precheck.append(
            sum(c.seconds for c in calls[first + 1 : write_at] if c.kind == "history")
        )
        after = calls[write_at + 1 :]
        again = sum(c.seconds for c in after if c.sql.startswith("describe "))
        result.verify.append(sum(c.seconds for c in after if c.kind in ("history", "conf")) - again)
        result.describe[-1] += again
        result.confs.append(sum(c.seconds for c in calls if c.sql.split()[0] in ("SET", "RESET")))
        result.write.append(calls[write_at].seconds)
    # A new dbt process meets the table cold: Delta loads the log from its last checkpoint.
    delta_log = house.spark._jvm.org.apache.spark.sql.delta.DeltaLog
    for _ in range(min(3, reps)):
        delta_log.clearCache()
        runner.calls.clear()
        runner.fence().latest_version(table)
        cold = next(i for i, c in enumerate(runner.calls) if c.kind == "history")
        described = sum(c.seconds for c in runner.calls[:cold] if c.sql.startswith("describe "))
        result.capture_cold.append(runner.calls[cold].seconds - described)


def run(house: Lakehouse, lengths: tuple[int, ...], reps: int) -> list[HistoryResult]:
    # One pass first, not recorded: each reader's first calls in this process are slower, and
    # would land on the shortest table alone, the denominator of every ratio.
    warm = f"{SCHEMA}.commits_warmup"
    build(house, warm, lengths[0])
    for reader in READERS:
        measure(house, warm, HistoryResult(reader, lengths[0], 0, 0, 0.0), 1)
    out = []
    for commits in lengths:
        table = f"{SCHEMA}.commits_{commits}"
        started = time.monotonic()
        location = build(house, table, commits)
        check(house, table, commits)
        built = time.monotonic() - started
        log_dir = os.path.join(location, "_delta_log")
        names = [n for n in os.listdir(log_dir) if not n.startswith(".")]
        for reader in READERS:
            result = HistoryResult(
                reader=reader,
                commits=commits,
                checkpoints=sum(n.endswith(".checkpoint.parquet") for n in names),
                log_files=len(os.listdir(log_dir)),
                build_seconds=built,
            )
            measure(house, table, result, reps)
            print(
                f"  {commits:>6} commits, {reader:<9}: capture "
                f"{result.median('capture') * 1000:7.1f} ms  verify "
                f"{result.median('verify') * 1000:7.1f} ms  cold capture "
                f"{result.median('capture_cold') * 1000:7.1f} ms  "
                f"(built in {built:.0f}s, {result.log_files} log files)",
                flush=True,
            )
            out.append(result)
    return out
