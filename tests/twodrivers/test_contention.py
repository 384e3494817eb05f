"""Issue 59's overlapping runs as separate drivers: K `dbt run` processes started at once, each
its own Spark driver (JVM), on one lakehouse on HDFS with a shared metastore, running
tests/harness/contention.py's workload (`counter`, a merge that reads the counter at vB and
writes it + 1; `batches`, an append_if_unchanged of the run's own batch), fence_retries 20.

Every run must end green, the counter equal to K, every batch once, no RESTORE in either
history, the SetTransaction versions increasing: across drivers, HDFS's log store admits one
commit N, and Delta refuses a fenced write another driver's fenced write overtook inside its
commit.

The drivers' JVMs start 10-60 s apart on this machine, longer than a write: so that they race,
each model's pre-hook sleeps until a moment all should have reached (START_SECONDS per
driver after the start), after each captured vB, and the test asserts they raced (an attempt
retried). The pre-hook reads nothing of the target: it only delays the write. Eight drivers
need about DRIVER_GB each; with less memory free than eight need, only the two-driver race runs.
"""

import time

import pytest

from tests.harness import contention
from tests.twodrivers.drivers import DbtProject
from tests.twodrivers.notebook import Notebook

RETRIES = 20
# What one `dbt run` driver (spark.driver.memory 1g, local[2]) takes here, measured from RSS
# with headroom; HDFS and Derby are already running.
DRIVER_GB = 1.5
# Each driver's JVM start on a loaded 2-core machine, with K starting at once.
START_SECONDS = 30
# On both models (dbt runs them one after the other, in an order of its own): the first waits,
# the second finds the moment passed. Each its own view: a dbt thread keeps its session.
BARRIER = (
    "cache table contention_start_{{ this.identifier }} as select "
    "reflect('java.lang.Thread', 'sleep', "
    "greatest(cast(0 as bigint), cast({{ var('start_at_ms', 0) }} as bigint) "
    "- unix_millis(current_timestamp())))"
)


def available_gb() -> float:
    with open("/proc/meminfo") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable"))
    return kib / 1024 / 1024


@pytest.mark.parametrize("drivers", [2, 8])
def test_every_run_green_and_exact(tmp_path, shared_lakehouse, drivers):
    if drivers > 2 and available_gb() < drivers * DRIVER_GB:
        pytest.skip(
            f"{drivers} drivers need about {drivers * DRIVER_GB:.0f} GB; "
            f"{available_gb():.1f} GB is available"
        )
    project = DbtProject(
        tmp_path,
        shared_lakehouse,
        contention.models(RETRIES),
        configs={"+pre-hook": BARRIER},
    )
    project.run(project.target("first"))  # the counter at 0, the batch 'first'
    names = contention.run_names(0, drivers)
    start_at = time.time() + START_SECONDS * drivers
    runs = {
        name: project.start(
            project.target(name), {"run": name, "start_at_ms": int(start_at * 1000)}
        )
        for name in names
    }
    try:
        codes = {name: run.wait(timeout=1800) for name, run in runs.items()}
    finally:
        for run in runs.values():
            run.kill()

    # A third driver (a notebook kept warm: tally reads statement by statement) reads the
    # outcome through the lakehouse.
    reader = Notebook(shared_lakehouse, str(tmp_path / "reader"), "contention-reader")
    try:

        def sql(statement: str) -> list[dict]:
            return reader.sql([statement])[0]

        result = contention.tally(sql, project.schema, codes)
        attempts = contention.attempts(sql, project.schema)
    finally:
        reader.stop()
    late = {
        n: r.timing("counter", "execute")[0] - start_at for n, r in runs.items() if not codes[n]
    }
    print(
        f"{drivers} drivers: {result.green} green, counter {result.counter}, "
        f"{result.restores} RESTOREs, attempts {sorted(attempts)}, sequences "
        f"{result.sequences}; counter started (s after the barrier) "
        f"{ {n: round(s) for n, s in late.items()} }"
    )
    red = {n: runs[n].output[-4000:] for n, code in codes.items() if code}
    assert result.problems() == [], red
    assert result.green == drivers and result.counter == drivers
    # They raced: some write was refused and retried, which only another driver's commit
    # after its vB can cause.
    assert max(attempts) > 1, attempts
