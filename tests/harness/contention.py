"""K overlapping runs of two fenced models on one lakehouse, and what they left: the workload of
issue 59's eight overlapping `dbt run`s, for tests (tests/functional/test_contention.py,
tests/twodrivers/test_contention.py), the reliability run and the bench alike.

- `counter`: a merge on `id = 0` that reads the counter from `{{ this }}` and writes it + 1,
  the textbook lost update: K green runs must leave it at K.
- `batches`: an `append_if_unchanged` of the run's own 10-row batch, unless `{{ this }}`
  already holds it: every green run's batch once.
"""

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

TXN_APP_ID = "dbt-fenced-spark"
BATCH_ROWS = 10


def models(retries: int, fenced: bool = True) -> dict[str, str]:
    """The two models; `fenced=False` gives stock dbt-spark's spelling of the same (append)."""
    config = f", fence_retries={retries}" if fenced else ", file_format='delta'"
    append = "append_if_unchanged" if fenced else "append"
    counter = (
        "{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id'"
        + config
        + ") }}\n"
        "{% if is_incremental() %}select 0 as id, n + 1 as n from {{ this }} where id = 0\n"
        "{% else %}select 0 as id, 0 as n{% endif %}\n"
    )
    batches = (
        "{{ config(materialized='incremental', incremental_strategy='" + append + "'"
        f"{config}) }}}}\n"
        "select '{{ var('run', 'first') }}' as run, id from range(" + str(BATCH_ROWS) + ")\n"
        "{% if is_incremental() %}where not exists (select 1 from {{ this }} b "
        "where b.run = '{{ var('run', 'first') }}'){% endif %}\n"
    )
    return {"counter.sql": counter, "batches.sql": batches}


def run_names(round_: int, k: int) -> list[str]:
    return [f"r{round_}k{i}" for i in range(k)]


@dataclass
class Tally:
    """What K runs left: read from the tables, their history and their commit files."""

    runs: dict[str, int]  # each run's exit code
    counter: int
    batches: dict[str, int]  # rows per run name, the first build's included
    operations: list[str] = field(default_factory=list)  # of both tables, oldest first
    # The fence's SetTransaction version in each fenced write commit, by table, in version
    # order (None where one had none).
    sequences: dict[str, list[int | None]] = field(default_factory=dict)

    @property
    def green(self) -> int:
        return sum(code == 0 for code in self.runs.values())

    @property
    def restores(self) -> int:
        return self.operations.count("RESTORE")

    def problems(self, rounds_before: int = 0) -> list[str]:
        """Everything that makes the result other than all green and exact. The counter
        counts every green run since the first build, `rounds_before` runs included."""
        found = []
        red = sorted(n for n, code in self.runs.items() if code)
        if red:
            found.append(f"red runs: {red}")
        if self.counter != rounds_before + self.green:
            found.append(f"counter {self.counter}, green runs {rounds_before + self.green}")
        for name, code in self.runs.items():
            if code == 0 and self.batches.get(name) != BATCH_ROWS:
                found.append(f"{name}'s batch has {self.batches.get(name, 0)} rows")
        if any(n % BATCH_ROWS for n in self.batches.values()):
            found.append(f"a partial or duplicated batch: {self.batches}")
        if self.restores:
            found.append(f"{self.restores} RESTORE commits")
        for table, chain in self.sequences.items():
            if None in chain or chain != sorted(set(chain)):
                found.append(f"{table}: SetTransaction versions not increasing: {chain}")
        return found


Rows = Callable[[str], list[dict[str, Any]]]


def dict_rows(client: Any) -> Rows:
    """A SparkSession's or a harness client's `sql`, as rows of column name to value."""

    def sql(statement: str) -> list[dict[str, Any]]:
        frame = client.sql(statement)
        return [dict(zip(frame.columns, row, strict=True)) for row in frame.collect()]

    return sql


def tally(sql: Rows, schema: str, runs: dict[str, int]) -> Tally:
    """What the runs left in `schema`, through `sql` (any engine's client, `dict_rows`)."""
    [counter] = sql(f"select n from {schema}.counter where id = 0")
    batches = sql(f"select run, count(*) as n from {schema}.batches group by run")
    result = Tally(dict(runs), int(counter["n"]), {str(b["run"]): int(b["n"]) for b in batches})
    for table in ("counter", "batches"):
        name = f"{schema}.{table}"
        location = str(sql(f"describe detail {name}")[0]["location"])
        history = sorted(sql(f"describe history {name}"), key=lambda h: int(h["version"]))
        result.operations += [str(h["operation"]) for h in history]
        # Delta's auto compaction after a write carries that write's tag but no SetTransaction:
        # not a fenced write of its own.
        fenced = [
            int(h["version"])
            for h in history
            if h["userMetadata"]
            and '"step":"write"' in str(h["userMetadata"])
            and str(h["operation"]) != "OPTIMIZE"
        ]
        result.sequences[table] = [_fence_txn(sql, location, v) for v in fenced]
    return result


def attempts(sql: Rows, schema: str) -> list[int]:
    """The attempt (fence_retries) of every fenced write that committed, both tables."""
    found = []
    for table in ("counter", "batches"):
        for h in sql(f"describe history {schema}.{table}"):
            tag = json.loads(h["userMetadata"]) if h["userMetadata"] else None
            compaction = str(h["operation"]) == "OPTIMIZE"  # auto compaction: the write's tag
            if isinstance(tag, dict) and tag.get("step") == "write" and not compaction:
                found.append(int(tag["attempt"]))
    return found


def _fence_txn(sql: Rows, location: str, version: int) -> int | None:
    path = f"{location.rstrip('/')}/_delta_log/{version:020d}.json"
    for row in sql(f"select value from text.`{path}`"):
        txn = json.loads(row["value"]).get("txn")
        if isinstance(txn, dict) and txn.get("appId") == TXN_APP_ID:
            return int(txn["version"])
    return None


def fenced_runs(
    spark: Any,
    schema: str,
    names: list[str],
    retries: int,
    disjoint: bool = False,
    writes: Sequence[str] | None = None,
) -> dict[str, int]:
    """The runs `names` at once, each in a thread with a session of its own (the embedded
    JVM, or clients of one server), each writing `counter` and then `batches` through the fence
    as the materialization drives it: vB captured, the model SQL pinned, the tagged write with
    `fence_retries`. `disjoint`: each run merges instead its own partition of `parts` (made by
    `make_parts`), reading only that partition. `writes` names the models each run writes, in
    order, in place of those. A run's code is 0 when all it wrote committed, else 1 (its error
    in `errors`)."""
    import uuid

    def run(session: Any, name: str) -> None:
        invocation = invocations[name] = str(uuid.uuid4())
        for model in _writes(disjoint, writes):
            _write(session, schema, model, invocation, retries, name)

    return _at_once(spark, names, run)


def stock_runs(
    spark: Any,
    schema: str,
    names: list[str],
    disjoint: bool = False,
    writes: Sequence[str] | None = None,
) -> dict[str, int]:
    """The same runs as stock dbt-spark sends them: each model's SQL unpinned (it reads the
    target at whatever version Spark resolves), as a plain MERGE on its unique_key (an INSERT
    for `batches`, dbt-spark's `append`), once, with no retries. A run's code is 1 when Delta
    refused a write (its error in `errors`); an update the run reported but the table lost is
    found afterwards, from the table (`counter_settled`, `parts_settled`)."""

    def run(session: Any, name: str) -> None:
        for model in _writes(disjoint, writes):
            template, _, keys = _MODELS[model]
            table = f"{schema}.{model}"
            session.sql(_statement(table, template.format(t=table, run=name), keys))

    return _at_once(spark, names, run)


def _writes(disjoint: bool, writes: Sequence[str] | None) -> Sequence[str]:
    if writes is not None:
        return writes
    return ("parts",) if disjoint else ("counter", "batches")


def _at_once(spark: Any, names: list[str], body: Callable[[Any, str], None]) -> dict[str, int]:
    """`body(session, name)` for each name, each in a thread named `name` with a session of its
    own, all let go at once. A run's code is 0 when `body` returned, else 1."""
    import threading

    start = threading.Barrier(len(names))
    codes: dict[str, int] = {}

    def run(name: str) -> None:
        session = spark.newSession()
        start.wait()
        try:
            body(session, name)
            codes[name] = 0
        except Exception as exc:  # counted: the tally names the red runs
            errors[name] = exc
            codes[name] = 1

    threads = [threading.Thread(target=run, args=(n,), name=n) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=1800)
    return codes


def make_counter(sql: Rows, schema: str) -> None:
    """`counter` as the model's first build leaves it, for runs without a dbt project."""
    sql(f"create or replace table {schema}.counter (id int, n int) using delta")
    sql(f"insert into {schema}.counter values (0, 0)")


def counter_settled(green: int, before: int, after: int) -> tuple[int, int]:
    """Lost and duplicated updates of `counter` over runs that moved it from `before` to
    `after`: green runs it does not count (a lost update), and increments beyond the green
    runs' (a refused run's write that stands). Where both happened they cancel: this sees
    only the difference."""
    moved = after - before
    return max(0, green - moved), max(0, moved - green)


def parts_settled(codes: dict[str, int], rows: Rows, schema: str) -> tuple[int, int]:
    """Lost and duplicated writes of disjoint runs (`make_parts`), each of which merges n = 1
    into its own new partition: a green run whose partition is not exactly one row with n = 1 is
    lost (missing) or duplicated (more); a red run whose partition holds a row is duplicated."""
    names = ", ".join(f"'{name}'" for name in codes)
    found: dict[str, list[int]] = {}
    for row in rows(f"select p, n from {schema}.parts where p in ({names})"):
        found.setdefault(str(row["p"]), []).append(int(row["n"]))
    return settled_parts(codes, found)


def settled_parts(codes: dict[str, int], found: dict[str, list[int]]) -> tuple[int, int]:
    """`parts_settled` on the rows found, as each partition's values of n."""
    lost = duplicated = 0
    for name, code in codes.items():
        values = found.get(name, [])
        if code == 0 and not values:
            lost += 1
        elif values != ([1] if code == 0 else []):
            duplicated += 1
    return lost, duplicated


# The fence's log lines (fence/protocol.py) that `fence_lines` counts.
SENT_AGAIN = "sending it again"  # Delta refused a write for what conflicts with nothing
RETRIED = "retrying from the new version"  # fence_retries: an attempt refused


@contextmanager
def fence_lines() -> Iterator[dict[str, Counter[str]]]:
    """While inside: the fence's log lines saying a write was sent again (`SENT_AGAIN`) or an
    attempt retried (`RETRIED`), counted per thread, which `fenced_runs` names by run."""
    from dbt_common.events.functions import get_event_manager

    found: dict[str, Counter[str]] = defaultdict(Counter)

    def seen(msg: Any) -> None:
        for line in (SENT_AGAIN, RETRIED):
            if line in msg.info.msg:
                found[msg.info.thread][line] += 1

    manager = get_event_manager()
    manager.add_callback(seen)
    try:
        yield found
    finally:
        with suppress(ValueError):
            manager.callbacks.remove(seen)


def make_parts(sql: Rows, schema: str) -> None:
    """The table of `fenced_runs(disjoint=True)`: one counter row per partition p."""
    sql(
        f"create or replace table {schema}.parts (id int, n int, p string) using delta "
        "partitioned by (p)"
    )
    sql(f"insert into {schema}.parts values (0, 0, 'seed')")


# Each red thread run's exception, by run name (the dbt runs' are in their output).
errors: dict[str, BaseException] = {}
# Each thread run's invocation id (the one in its tags), by run name: what a ledger (the soak's)
# matches its commits by.
invocations: dict[str, str] = {}


# Each model as its SQL, its strategy and its unique_key (None: an append).
_MODELS = {
    "counter": ("select 0 as id, n + 1 as n from {t} where id = 0", "merge", ("id",)),
    "batches": (
        "select '{run}' as run, id from range(" + str(BATCH_ROWS) + ") "
        "where not exists (select 1 from {t} b where b.run = '{run}')",
        "append_if_unchanged",
        None,
    ),
    "parts": (
        "select 0 as id, coalesce(max(n), 0) + 1 as n, '{run}' as p from {t} where p = '{run}'",
        "merge",
        ("id", "p"),
    ),
}


def _write(session: Any, schema: str, model: str, invocation: str, retries: int, run: str) -> None:
    from contextlib import nullcontext
    from dataclasses import replace

    from dbt.adapters.fenced_spark.fence.delta.history import SqlHistory
    from dbt.adapters.fenced_spark.fence.delta.log_tail import LogTail
    from dbt.adapters.fenced_spark.fence.footprint import read_filters
    from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState
    from dbt.adapters.fenced_spark.fence.rewriter import pin_self_reads
    from dbt.adapters.fenced_spark.fence.scope import Scope
    from tests.harness.runner import SessionRunner

    table = f"{schema}.{model}"
    runner = SessionRunner(session)
    log = LogTail(session, fallback=SqlHistory(runner)) if hasattr(session, "_jvm") else None
    fence = Fence(runner, nullcontext, log=log)
    template, strategy, keys = _MODELS[model]
    sql = template.format(t=table, run=run)

    def staged(state: FenceState) -> tuple[FenceState, str]:
        pinned = pin_self_reads(sql, schema, model, state.pinned)
        reads = tuple(read_filters(sql, schema, model))
        if keys:
            scope = Scope(reads=reads, keys=keys, source=f"SELECT * FROM ({pinned})")
        else:
            why = "append_if_unchanged is refused by any change to the rows of its table"
            scope = Scope(reads=reads, any_change=True, why_any=why)
        return replace(state, scope=scope), _statement(table, pinned, keys)

    vb = fence.latest_version(table)
    node = f"model.contention.{model}"
    state, write = staged(FenceState(table, table, strategy, vb, vb, invocation, node))
    fence.run(state, write, retries, restage=staged)


def _statement(table: str, source: str, keys: tuple[str, ...] | None) -> str:
    """The write of `source` into `table`: a MERGE on `keys` as dbt-spark's merge writes it, or
    an INSERT (its append)."""
    if not keys:
        return f"insert into {table} select * from ({source})"
    on = " AND ".join(f"DBT_INTERNAL_SOURCE.{k} = DBT_INTERNAL_DEST.{k}" for k in keys)
    return (
        f"merge into {table} as DBT_INTERNAL_DEST using ({source}) as DBT_INTERNAL_SOURCE on {on} "
        "when matched then update set * when not matched then insert *"
    )
