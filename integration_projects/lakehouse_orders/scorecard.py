"""The race scorecard: the same race against stock dbt-spark and dbt-fenced-spark.

For each strategy, day 2's run of a model in this project is raced by a foreign writer: a
thread with its own SparkSession in the same JVM, committing to the model's table at one of
three moments. Each race is proved from DESCRIBE HISTORY (the foreign commit is tagged and must
sit where the timing says), then judged from the table's contents.

    python scorecard.py                       # every strategy and timing; writes docs/scorecard.md
    python scorecard.py --races merge --timings between --no-write   # what `make demo` runs
    python scorecard.py --method thrift --races merge   # over one Spark Thrift Server
    python scorecard.py --method connect --cluster      # what `make cluster` runs

With `--method thrift` both adapters are clients of one Spark Thrift Server started for the run,
and the foreign writer is another client of it (a plain SQL connection, like a notebook). With
`--method connect` dbt-fenced-spark runs over a Spark Connect server and stock dbt-spark, which
has no Connect method, over a Thrift server; each race's foreign writer is another client of
its adapter's server. `--cluster` runs the servers' executors on a Spark standalone cluster.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dbt.cli.main import dbtRunner

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)  # the repo's one harness: servers, cluster, the foreign writer

from tests.harness.writer import ForeignWriter, active_jobs, job_running_for  # noqa: E402

ADAPTERS = {"stock": "stock dbt-spark (type: spark)", "fenced": "dbt-fenced-spark"}
TIMINGS = {
    "before": "before the read: the foreign commit lands, then the run starts and reads the table",
    # The first line a demo reader sees vB in: say what it is.
    "between": "between the read and the write: after the run read the table at its version"
    " (vB, the version the fence pins the run to), before it writes",
    "during": "during the write: while the run's write statement executes",
}
WRITERS = {
    "session": "a thread with its own SparkSession in the embedded session's JVM",
    "thrift": "a second client of the same Spark Thrift Server",
    "connect": "a second client of the same server: a Spark Connect session next to"
    " dbt-fenced-spark over Spark Connect, a Thrift client next to stock dbt-spark over a Thrift"
    " server of the same Spark build (dbt-spark has no Connect method)",
}
# The status of an Outcome that a scorecard did not race (grey in the picture).
NOT_RUN = "not run"
SCHEMAS = {"stock": "demo_stock", "fenced": "demo_fenced"}  # as in profiles.yml
FOREIGN_TAG = "foreign writer (scorecard)"
# Each slowed row of the write sleeps this long. The foreign commit fires once the write's job has
# run 1 s and must land before the write commits: under load (make demo next to a test run),
# 4 s was once too short for the foreign UPDATE, which then lost to our commit.
SLOW_MS = 8000


@dataclass(frozen=True)
class Race:
    name: str  # the fenced strategy
    stock_strategy: str
    model: str
    story: str
    foreign: str  # what the foreign writer commits; {t} is the table, {s} its schema
    key: str  # the column that must be unique
    effect: str  # a count query: 1 when the foreign writer's change is in the table
    flags_day: Callable[[int], tuple] = lambda day: ()
    upstream: bool = False  # its inputs are models: bring them to day 2 before the race
    command: str = "run"  # `snapshot` for a snapshot
    key_where: str = ""  # which rows `key` must be unique in
    contents: str = "select * from {t}"  # what the final tables are compared on


def day_window(day: int) -> tuple:
    start = datetime.date(2026, 1, day)
    end = start + datetime.timedelta(days=1)
    return ("--event-time-start", str(start), "--event-time-end", str(end))


RACES = {
    "merge": Race(
        "merge",
        "merge",
        "orders",
        "day 2's run ships order 1; a notebook cancels order 1",
        "update {t} set status = 'cancelled' where order_id = 1",
        "order_id",
        "select count(*) from {t} where order_id = 1 and status = 'cancelled'",
    ),
    "append": Race(
        "append (watermark read of {{ this }} in SQL: runs as append_if_unchanged)",
        "append",
        "order_events",
        "day 2's run appends the events after max(event_ts); a double-fired job appends them too",
        "insert into {t} select event_id, order_id, event_type, event_ts"
        " from {s}.raw_events where day = 2",
        "event_id",
        "select count(*) from {t} where event_id = 4",
    ),
    "compile_time_watermark": Race(
        "append (watermark read at compile time: runs as append_if_unchanged)",
        "append",
        "order_events_export",
        "day 2's run appends the events after a watermark it read with run_query while dbt"
        " compiled it; a double-fired job appends them too",
        "insert into {t} select event_id, order_id, event_type, event_ts"
        " from {s}.raw_events where day = 2",
        "event_id",
        "select count(*) from {t} where event_id = 4",
    ),
    "pre_hook_reload": Race(
        "append_if_unchanged (pre-hook deletes the day, the model re-inserts it)",
        "append",
        "order_events_reload",
        "day 2's run reloads day 2 (a pre-hook deletes it, the model inserts it); a backfill job"
        " inserts a late event for day 2",
        "insert into {t} values (100, 1, 'late', timestamp'2026-01-02 12:00:00', 2)",
        "event_id",
        "select count(*) from {t} where event_id = 100",
    ),
    "insert": Race(
        "insert (stock: merge on the key)",
        "merge",
        "order_inserts",
        "day 2's run loads the events it does not have yet; a double-fired job loads day 2's"
        " events too",
        "insert into {t} select event_id, order_id, event_type, event_ts"
        " from {s}.raw_events where day = 2",
        "event_id",
        "select count(*) from {t} where event_id = 4",
    ),
    "snapshot": Race(
        "snapshot (check strategy)",
        "snapshot",
        "orders_snapshot",
        "day 2's dbt snapshot records order 1 shipping; a notebook corrects order 1's current"
        " row in the snapshot table (amount 999)",
        "update {t} set amount = 999 where order_id = 1 and dbt_valid_to is null",
        "order_id",
        "select count(*) from {t} where order_id = 1 and amount = 999",
        command="snapshot",
        key_where="where dbt_valid_to is null",
        # dbt's ids and timestamps differ between any two runs
        contents="select order_id, status, amount, dbt_valid_to is null as is_current from {t}",
    ),
    "replace_where": Race(
        "replace_where",
        "insert_overwrite",
        "daily_order_events",
        "day 2's run replaces the days from 2026-01-02; an analyst inserts a correction row for"
        " 2026-01-02",
        "insert into {t} values ('correction', 1, date'2026-01-02')",
        "concat(event_date, event_type)",
        "select count(*) from {t} where event_type = 'correction'",
        upstream=True,
    ),
    # No conflict: a foreign commit that touches nothing the node read or writes. Both adapters
    # must commit over it (or fail in Delta's own words while the write runs), losing nothing.
    "merge_other_key": Race(
        "merge (no conflict: another key)",
        "merge",
        "orders",
        "day 2's run ships order 1; a notebook inserts order 99, which day 2 does not touch",
        "insert into {t} values (99, 'placed', 5, 2)",
        "order_id",
        "select count(*) from {t} where order_id = 99",
    ),
    "merge_optimize": Race(
        "merge (no conflict: OPTIMIZE)",
        "merge",
        "orders",
        "day 2's run ships order 1; a maintenance job compacts the table (no data change)",
        "optimize {t}",
        "order_id",
        "select 1",
    ),
    "replace_where_other_day": Race(
        "replace_where (no conflict: a row of another day)",
        "insert_overwrite",
        "daily_order_events",
        "day 2's run replaces the days from 2026-01-02; an analyst inserts a correction row for"
        " 2026-01-01, a day it neither reads nor replaces",
        "insert into {t} values ('correction', 1, date'2026-01-01')",
        "concat(event_date, event_type)",
        "select count(*) from {t} where event_type = 'correction'",
        upstream=True,
    ),
    "microbatch": Race(
        "microbatch",
        "microbatch",
        "order_events_by_batch",
        "day 2's batch replaces 2026-01-02; a backfill job inserts a late event for 2026-01-02",
        "insert into {t} values (100, 1, 'late', timestamp'2026-01-02 12:00:00', date'2026-01-02')",
        "event_id",
        "select count(*) from {t} where event_id = 100",
        flags_day=day_window,
    ),
}


class Lakehouse:
    """Where the races run: the embedded Spark + Delta session (dbt and the foreign writer share
    its JVM), or the harness's servers that dbt and the foreign writer are clients of. Over
    `connect`, stock dbt-spark (which has no Connect method) runs over a Thrift server of the same
    build; with `cluster`, the servers' executors run on a standalone cluster."""

    def __init__(self, method: str, folder: str, cluster: bool = False) -> None:
        self.method = method
        self.folder = folder
        self.servers: dict[str, Any] = {}
        self.cluster = None
        self.seeded: set[str] = set()
        if method == "session":
            return
        from tests.harness import cluster as standalone
        from tests.harness import servers

        if cluster:
            self.cluster = standalone.start(os.path.join(folder, "cluster"))
        kinds = {"thrift"} if method == "thrift" else {"thrift", "connect"}
        for kind in sorted(kinds):
            self.servers[kind] = servers.start(
                kind,
                os.path.join(folder, kind),
                os.environ.get("DBT_FENCED_SPARK_JARS_CACHE"),
                master=self.cluster.master_url if self.cluster else None,
            )
            os.environ[f"LAKEHOUSE_{kind.upper()}_PORT"] = str(self.servers[kind].port)

    def kind(self, adapter: str) -> str:
        if self.method == "connect" and adapter == "stock":
            return "thrift"
        return self.method

    def target(self, adapter: str) -> str:
        kind = self.kind(adapter)
        return adapter if kind == "session" else f"{adapter}_{kind}"

    def client(self, adapter: str):
        """A SQL client that reads history and contents, and whose newSession() writes."""
        kind = self.kind(adapter)
        if kind != "session":
            return self.servers[kind].client()
        from pyspark.sql import SparkSession

        # after dbt ran: the embedded Delta JVM, never a plain one
        return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()
        if self.cluster is not None:
            self.cluster.stop()


def dbt(*args: str, target: str, lakehouse: str, errors: list[str] | None = None):
    """Runs dbt in this process; `errors` collects the error messages dbt logs."""

    def collect(event) -> None:
        if errors is not None and event.info.level == "error":
            errors.append(event.info.msg)

    result = dbtRunner(callbacks=[collect]).invoke(
        [
            # The scorecard prints what each run said; dbt's console would add stock's JVM stack.
            "--log-level",
            "none",
            "--log-level-file",
            "debug",
            *args,
            "--project-dir",
            HERE,
            "--profiles-dir",
            HERE,
            "--target",
            target,
            "--target-path",
            os.path.join(lakehouse, "target"),
            "--log-path",
            os.path.join(lakehouse, "logs"),
        ]
    )
    if result.exception is not None:
        raise result.exception
    return result


@contextmanager
def race_window(action: Callable[[], None]) -> Iterator[None]:
    """Runs `action` when dbt executes the demo pre-hook's 'race window' statement."""
    from dbt.adapters.spark.impl import SparkAdapter

    from dbt.adapters.fenced_spark.impl import FencedSparkAdapter

    own = {cls: cls.__dict__.get("execute") for cls in (SparkAdapter, FencedSparkAdapter)}

    fired = threading.Event()

    def patch(original):
        def execute(self, sql, *args, **kwargs):
            # once: fenced_spark's execute calls dbt-spark's, and both are patched
            if "'race window'" in sql and not fired.is_set():
                fired.set()
                action()
            return original(self, sql, *args, **kwargs)

        return execute

    for cls in own:
        cls.execute = patch(cls.execute)  # the inherited one when the class has none
    try:
        yield
    finally:
        for cls, original in own.items():
            if original is None:
                del cls.execute
            else:
                cls.execute = original


@dataclass
class Commit:
    version: int
    operation: str
    writer: str
    rows: str


@dataclass
class Outcome:
    adapter: str
    status: str
    message: str
    start_version: int
    foreign_version: int | None
    window_version: int | None  # the table's version when the race window opened
    timeline: list[Commit] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    foreign_effect_present: bool = False
    duplicated: int = 0
    # The table as the foreign commit left it: a failed run must leave exactly that.
    rows_at_foreign: list[tuple] | None = None
    # The project's tests of the model after the race (and after the re-run that a failed
    # run asks for): the names of those that failed; None when they did not run.
    tests_failed: list[str] | None = None
    reran: str | None = None  # the re-run's status


def changed_rows(operation: str, metrics: dict | str) -> str:
    if isinstance(metrics, str):  # a Thrift client gets the map as JSON text
        metrics = json.loads(metrics or "{}")

    def get(key: str) -> int:
        return int(metrics.get(key, 0) or 0)

    if operation == "MERGE":
        return f"{get('numTargetRowsUpdated')} updated, {get('numTargetRowsInserted')} inserted"
    if operation == "UPDATE":
        return f"{get('numUpdatedRows')} updated"
    if operation == "DELETE":
        return f"{get('numDeletedRows')} deleted"
    if operation == "RESTORE":
        return "back to the version before"
    removed = get("numRemovedFiles")
    written = f"{get('numOutputRows')} written"
    return written + (f", {removed} file(s) replaced" if removed else "")


def who(adapter: str, row) -> str:
    metadata = row.userMetadata or ""
    if metadata == FOREIGN_TAG:
        return "foreign writer"
    if "dbt_fenced_spark" in metadata:
        step = json.loads(metadata).get("step", "write")
        return "dbt run (fenced, tagged)" if step == "write" else f"dbt run (fenced {step})"
    if row.operation == "RESTORE":
        return "dbt run (fence revert)"
    return "dbt run" if adapter == "stock" else "dbt run (untagged)"


def history(spark, table: str) -> list:
    return sorted(spark.sql(f"describe history {table}").collect(), key=lambda r: r.version)


def run_race(race: Race, timing: str, adapter: str, house: Lakehouse) -> Outcome:
    lakehouse, target = house.folder, house.target(adapter)
    schema = SCHEMAS[adapter]
    table = f"{schema}.{race.model}"
    day1 = ["--vars", json.dumps({"day": 1})]
    if target not in house.seeded:  # races never write the seeds: load them once per target
        dbt("seed", "--full-refresh", *day1, target=target, lakehouse=lakehouse)
        house.seeded.add(target)
    if race.command == "snapshot":
        # dbt never rebuilds a snapshot (not even with --full-refresh): drop it, and day 1
        # creates it anew.
        house.client(adapter).sql(f"drop table if exists {table}")
        dbt("snapshot", "--select", race.model, *day1, target=target, lakehouse=lakehouse)
    else:
        dbt(
            "run",
            "--full-refresh",
            "--select",
            f"+{race.model}",
            *day1,
            *race.flags_day(1),
            target=target,
            lakehouse=lakehouse,
        )
    root = house.client(adapter)
    start = history(root, table)[-1].version
    foreign_sql = race.foreign.format(t=table, s=schema)
    writer = ForeignWriter(root, tag=FOREIGN_TAG)
    if race.upstream:
        dbt(
            "run",
            "--select",
            f"+{race.model}",
            "--exclude",
            race.model,
            "--vars",
            json.dumps({"day": 2}),
            target=target,
            lakehouse=lakehouse,
        )
    day2 = {"day": 2, "race_window": timing != "before"}
    window_opened_at: list[int] = []  # the table's version when the run had read it

    if timing == "before":
        writer.sql(foreign_sql)
    elif timing == "during":
        day2["slow_ms"] = SLOW_MS

    def open_race_window() -> None:
        window_opened_at.append(history(root, table)[-1].version)
        if timing == "between":
            writer.sql(foreign_sql)
        else:
            # Armed only now, after every read before the write: a slow compile-time query
            # cannot pass for the write.
            writer.when(job_running_for(active_jobs(root)), foreign_sql)

    errors: list[str] = []
    try:
        with race_window(open_race_window):
            result = dbt(
                race.command,
                "--select",
                race.model,
                "--vars",
                json.dumps(day2),
                *race.flags_day(2),
                target=target,
                lakehouse=lakehouse,
                errors=errors,
            )
    except BaseException:
        writer.cancel()  # an armed writer must not fire into the next race
        raise
    if timing == "during":
        writer.join()  # raises the foreign writer's own error, if any

    node = result.result.results[0]
    outcome = Outcome(
        adapter=adapter,
        status=str(node.status),
        # a microbatch model's message is its batches' summary; the fence speaks in its log
        message=next((e for e in errors if "refused" in e), None) or node.message or "",
        start_version=start,
        foreign_version=None,
        window_version=window_opened_at[0] if window_opened_at else None,
    )
    for row in history(root, table):
        if row.version <= start:
            continue
        commit = Commit(
            row.version,
            row.operation,
            who(adapter, row),
            changed_rows(row.operation, row.operationMetrics),
        )
        outcome.timeline.append(commit)
        if commit.writer == "foreign writer":
            outcome.foreign_version = row.version
    prove_timing(race, timing, outcome)
    outcome.rows = [tuple(r) for r in root.sql(race.contents.format(t=table)).collect()]
    if outcome.foreign_version is not None:
        at_foreign = f"{table} VERSION AS OF {outcome.foreign_version}"
        outcome.rows_at_foreign = [
            tuple(r) for r in root.sql(race.contents.format(t=at_foreign)).collect()
        ]
    outcome.foreign_effect_present = root.sql(race.effect.format(t=table)).collect()[0][0] > 0
    keyed = f"select {race.key} from {table} {race.key_where}"
    keys = Counter(r[0] for r in root.sql(keyed).collect())
    outcome.duplicated = sum(n - 1 for n in keys.values() if n > 1)
    project_tests(race, outcome, target, lakehouse)
    return outcome


def project_tests(race: Race, outcome: Outcome, target: str, lakehouse: str) -> None:
    """The example project's own tests judge the raced table: after a failed run, once the
    re-run its message asks for has run (no race this time), as a user would."""
    day2 = ["--vars", json.dumps({"day": 2})]
    if outcome.status != "success":
        rerun = dbt(
            race.command,
            "--select",
            race.model,
            *day2,
            *race.flags_day(2),
            target=target,
            lakehouse=lakehouse,
        )
        outcome.reran = str(rerun.result.results[0].status)
    # Its tests and those that also read what it is built from; not those that read a model
    # built from it (daily_order_events after order_events), which the race does not rebuild.
    tests = dbt(
        "test",
        "--select",
        race.model,
        "--indirect-selection",
        "buildable",
        *day2,
        target=target,
        lakehouse=lakehouse,
    )
    outcome.tests_failed = sorted(
        r.node.name for r in tests.result.results if str(r.status) not in ("pass", "success")
    )


def prove_timing(race: Race, timing: str, outcome: Outcome) -> None:
    """The race fired where intended, read back from DESCRIBE HISTORY."""
    versions = [c.version for c in outcome.timeline]
    where = f"{race.model} ({outcome.adapter}, {timing})"
    if outcome.foreign_version is None:
        raise RuntimeError(f"{where}: the foreign commit is not in the table's history")
    if timing == "before" and outcome.foreign_version != outcome.start_version + 1:
        raise RuntimeError(f"{where}: the foreign commit is v{outcome.foreign_version}, not first")
    if timing != "before" and (
        outcome.window_version is None or outcome.foreign_version <= outcome.window_version
    ):
        raise RuntimeError(f"{where}: the foreign commit landed before the run read the table")
    # The run's write is its last commit (a pre-hook's DELETE may come before the window).
    ours = [
        c
        for c in outcome.timeline
        if c.writer.startswith("dbt run") and not c.writer.endswith("pre_hook)")
    ]
    reverted = any(c.operation == "RESTORE" for c in ours)
    writes = [c for c in ours if c.operation != "RESTORE"]
    late = writes and writes[-1].version < outcome.foreign_version
    if timing != "before" and late and not reverted:
        raise RuntimeError(f"{where}: the run committed before the foreign writer")
    assert versions == sorted(versions)


@dataclass
class Verdict:
    text: str
    lost: int
    duplicated: int
    bad: bool  # a wrong table with a green run


def judge(timing: str, outcome: Outcome) -> Verdict:
    verdict = _judge_table(timing, outcome)
    if outcome.reran is not None and outcome.reran != "success":
        verdict.text += f"; its re-run: {outcome.reran}"
        verdict.bad = True
    if outcome.tests_failed:
        verdict.text += f"; project tests failed: {', '.join(outcome.tests_failed)}"
        verdict.bad = True
    return verdict


def _judge_table(timing: str, outcome: Outcome) -> Verdict:
    ok = outcome.status == "success"
    lost = 0 if outcome.foreign_effect_present or timing == "before" else 1
    dup = outcome.duplicated
    if timing == "before":
        if dup:
            return Verdict(f"duplicated {dup} row(s)", 0, dup, ok)
        return Verdict("no race: the run builds on the foreign commit", 0, 0, False)
    if lost or dup:
        harm = ", ".join(
            part
            for part in (
                f"lost {lost} foreign row(s)" if lost else "",
                f"duplicated {dup} row(s)" if dup else "",
            )
            if part
        )
        return Verdict(f"{harm}{' with a green run' if ok else ''}", lost, dup, ok)
    if ok:
        return Verdict("succeeded, nothing lost", 0, 0, False)
    # A failed run claims nothing of it remains: the table must be as the foreign commit left it
    # (a commit that stands, not reverted, is a change nobody asked for).
    if Counter(outcome.rows) != Counter(outcome.rows_at_foreign or []):
        return Verdict("failed, yet its write stands in the table", 0, 0, True)
    if " refused: the table changed after" in outcome.message:
        return Verdict("refused, explained; nothing lost", 0, 0, False)
    if "CONCURRENT" in outcome.message.upper():
        return Verdict("failed with Delta's conflict error; nothing lost", 0, 0, False)
    return Verdict(f"failed ({first_line(outcome.message)}); nothing lost", 0, 0, False)


def first_line(message: str) -> str:
    return next((line.strip() for line in message.splitlines() if line.strip()), "no message")


def row_text(row: tuple) -> str:
    """A row as a reader writes it, not Python's repr: (1, 'shipped', 2026-01-02 08:00:00)."""

    def value(v: Any) -> str:
        return "null" if v is None else f"'{v}'" if isinstance(v, str) else str(v)

    return f"({', '.join(map(value, row))})"


def table_difference(stock: Outcome, fenced: Outcome) -> str:
    only_stock = Counter(stock.rows) - Counter(fenced.rows)
    only_fenced = Counter(fenced.rows) - Counter(stock.rows)
    if not only_stock and not only_fenced:
        return "identical"
    parts = []
    for side, only in (("stock", only_stock), ("fenced", only_fenced)):
        if only:
            parts.append(f"only in {side}: " + ", ".join(sorted(map(row_text, only.elements()))))
    return "; ".join(parts)


def block(outcome: Outcome, verdict: Verdict) -> list[str]:
    lines = [
        f"  {ADAPTERS[outcome.adapter]}",
        f"    {'version':<9}{'operation':<24}{'writer':<27}rows",
    ]
    for c in outcome.timeline:
        lines.append(f"    v{c.version:<8}{c.operation:<24}{c.writer:<27}{c.rows}")
    lines.append(f"    run: {outcome.status:<8} {verdict.text}")
    if outcome.tests_failed is not None:
        passed = f"failed: {', '.join(outcome.tests_failed)}" if outcome.tests_failed else "passed"
        if outcome.reran:
            lines.append(f"    its re-run, as the message asks: {outcome.reran}")
        lines.append(f"    the project's tests of the table: {passed}")
    return lines


def tested(outcome: Outcome) -> str:
    if outcome.tests_failed is None:
        return ""
    rerun = f"re-run as the message asks: {outcome.reran}; " if outcome.reran else ""
    passed = "failed" if outcome.tests_failed else "passed"
    return f" ({rerun}the project's tests of the table: {passed})"


def markdown(results: list, command: str, seconds: float, method: str) -> str:
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    out = [
        "# Race scorecard: stock dbt-spark vs dbt-fenced-spark",
        "",
        f"Generated by `{command}` on {now} ({platform.machine()}, Python "
        f"{platform.python_version()}, {seconds / 60:.1f} min); do not edit by hand.",
        "",
        "Each race runs day 2 of a model in `integration_projects/lakehouse_orders/` while a"
        f" foreign writer ({WRITERS[method]}) commits to the same Delta table. The foreign commit"
        " is proved from `DESCRIBE HISTORY` before the outcome is judged. After each race the"
        " project's tests of the model run (`dbt test --select <model> --indirect-selection"
        " buildable`: its own and those that also read what it is built from), after the re-run"
        " that a failed run's message asks for.",
        "",
        "## Summary",
        "",
        "| strategy | timing | stock dbt-spark | dbt-fenced-spark |",
        "|---|---|---|---|",
    ]
    for race, timing, stock, fenced in results:
        out.append(f"| {race.name} | {timing} | {stock[1].text} | {fenced[1].text} |")
    for race, timing, stock, fenced in results:
        out += [
            "",
            f"## {race.name}, {timing}",
            "",
            f"{race.story}. Timing: {TIMINGS[timing]}.",
            "",
            "| adapter | version | operation | writer | rows |",
            "|---|---|---|---|---|",
        ]
        for outcome, _ in (stock, fenced):
            for c in outcome.timeline:
                out.append(
                    f"| {outcome.adapter} | v{c.version} | {c.operation} | {c.writer} | {c.rows} |"
                )
        out += [
            "",
            f"- stock dbt-spark: run {stock[0].status}; {stock[1].text}{tested(stock[0])}",
            f"- dbt-fenced-spark: run {fenced[0].status}; {fenced[1].text}{tested(fenced[0])}",
            f"- final tables: {table_difference(stock[0], fenced[0])}",
        ]
    return "\n".join(out) + "\n"


def picture(results: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 0.45 * len(results) + 1.2))
    colours = {"bad": "#d9534f", "failed": "#f0ad4e", "ok": "#5cb85c", "not run": "#dddddd"}
    for row, (race, timing, stock, fenced) in enumerate(results):
        for col, (outcome, verdict) in enumerate((stock, fenced)):
            kind = "bad" if verdict.bad else ("ok" if outcome.status == "success" else "failed")
            if kind == "failed" and "refused" in verdict.text:
                kind = "ok"
            if outcome.status == NOT_RUN:  # a cell a cheaper scorecard leaves out (twodrivers)
                kind = "not run"
            ax.add_patch(plt.Rectangle((col, -row - 1), 1, 1, color=colours[kind], ec="white"))
            ax.text(col + 0.5, -row - 0.5, verdict.text, ha="center", va="center", fontsize=7)
        label = f"{race.name.split(' ')[0]} / {timing}"
        ax.text(-0.02, -row - 0.5, label, ha="right", va="center", fontsize=8)
    ax.set_xlim(0, 2)
    ax.set_ylim(-len(results), 0)
    ax.set_xticks([0.5, 1.5], ["stock dbt-spark", "dbt-fenced-spark"])
    ax.xaxis.tick_top()
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    title = "Red: data lost or duplicated with a green run.  Green: nothing lost."
    if any(o.status == NOT_RUN for r in results for o, _ in r[2:]):
        title += "  Grey: not raced."
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_all(races: list[str], timings: list[str], house: Lakehouse) -> list:
    results = []
    for name in races:
        race = RACES[name]
        for timing in timings:
            pair = {}
            # fenced first: its embedded session is the Delta JVM that stock's session joins
            for adapter in ("fenced", "stock"):
                outcome = run_race(race, timing, adapter, house)
                pair[adapter] = (outcome, judge(timing, outcome))
            results.append((race, timing, pair["stock"], pair["fenced"]))
            print(f"\n== {race.name}, {timing} ==")
            print(f"  {race.story}.\n  Timing: {TIMINGS[timing]}.")
            for adapter in ("stock", "fenced"):
                print("\n".join(block(*pair[adapter])))
            print(f"  final tables: {table_difference(pair['stock'][0], pair['fenced'][0])}")
            fenced_message = pair["fenced"][0].message
            if timing != "before" and fenced_message:
                print("  What dbt-fenced-spark told the user:")
                for line in fenced_message.splitlines():
                    print(f"    | {line}")
    return results


def main(argv: list[str] | None = None, say_finished: bool = True) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--races", nargs="+", choices=list(RACES), default=list(RACES))
    parser.add_argument("--timings", nargs="+", choices=list(TIMINGS), default=list(TIMINGS))
    parser.add_argument("--method", choices=list(WRITERS), default="session")
    parser.add_argument(
        "--cluster", action="store_true", help="servers' executors on a standalone cluster"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--command", default="make scorecard")
    args = parser.parse_args(argv)

    started = time.monotonic()
    lakehouse = os.path.join(HERE, ".fenced_spark")
    shutil.rmtree(os.path.join(lakehouse, "target"), ignore_errors=True)
    os.chdir(HERE)
    house = Lakehouse(args.method, lakehouse, args.cluster)
    try:
        results = run_all(args.races, args.timings, house)
    finally:
        house.close()

    seconds = time.monotonic() - started
    if say_finished:  # the demo runs races of its own and says when it finished itself
        print(f"\nScorecard finished in {seconds:.0f}s.")
    fenced_harm = [r for r in results if r[3][1].lost or r[3][1].duplicated or r[3][1].bad]
    if not args.no_write:
        docs = os.path.join(REPO, "docs")
        name = "scorecard" if args.method == "session" else f"scorecard-{args.method}"
        if args.cluster:
            name += "-cluster"
        with open(os.path.join(docs, f"{name}.md"), "w") as f:
            f.write(markdown(results, args.command, seconds, args.method))
        picture(results, os.path.join(docs, f"{name}.png"))
        print(f"wrote docs/{name}.md and docs/{name}.png")
    if fenced_harm:
        print(
            "UNEXPECTED: dbt-fenced-spark lost or duplicated rows, or a failed run of it left "
            "its write standing, above.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
