"""`make demo`: build the example project on the embedded Spark + Delta session, then run
the same race against stock dbt-spark and against dbt-fenced-spark, side by side.

The race: day 2's run ships order 1. Meanwhile a notebook cancels order 1; its UPDATE lands
after the run has read the table and before the run writes. (The demo injects it as the
model's pre-hook, so it lands at exactly that moment every time.)
"""

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

from dbt.cli.main import dbtRunner

HERE = os.path.dirname(os.path.abspath(__file__))
LAKEHOUSE = os.path.join(HERE, ".fenced_spark")
ADAPTERS = {"stock": "stock dbt-spark (type: spark)", "fenced": "dbt-fenced-spark"}


def dbt(*args: str, target: str, quiet: bool = True):
    flags = ["--quiet"] if quiet else []
    result = dbtRunner().invoke(
        [*flags, *args, "--project-dir", HERE, "--profiles-dir", HERE, "--target", target]
    )
    if result.exception is not None:
        raise result.exception
    return result


def spark_session():
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()


@dataclass
class Outcome:
    status: str = ""
    message: str = ""
    timeline: list = field(default_factory=list)
    order_1: str = ""


def changed_rows(operation: str, metrics: dict) -> str:
    get = lambda key: int(metrics.get(key, 0) or 0)  # noqa: E731
    if operation == "MERGE":
        return f"{get('numTargetRowsUpdated')} updated, {get('numTargetRowsInserted')} inserted"
    if operation in ("UPDATE", "DELETE"):
        return f"{get('numUpdatedRows') or get('numDeletedRows')} {operation.lower()}d"
    return f"{get('numOutputRows')} written"


def writer(user_metadata) -> str:
    if user_metadata and "dbt_fenced_spark" in user_metadata:
        return "dbt run (fenced, tagged)"
    return "the notebook"


def race(target: str) -> Outcome:
    schema = f"demo_{target}"
    table = f"{schema}.orders"
    dbt(
        "build",
        "--full-refresh",
        "--select",
        "raw_orders",
        "orders",
        "--vars",
        json.dumps({"day": 1}),
        target=target,
    )
    spark = spark_session()
    vb = spark.sql(f"describe history {table} limit 1").collect()[0].version
    notebook = f"update {table} set status = 'cancelled' where order_id = 1"
    result = dbt(
        "run",
        "--select",
        "orders",
        "--vars",
        json.dumps({"day": 2, "notebook_sql": notebook}),
        target=target,
    )
    node = result.result.results[0]
    outcome = Outcome(status=str(node.status), message=node.message or "")
    for row in sorted(spark.sql(f"describe history {table}").collect(), key=lambda r: r.version):
        if row.version > vb:
            who = (
                "dbt run"
                if target == "stock" and row.operation == "MERGE"
                else writer(row.userMetadata)
            )
            outcome.timeline.append(
                (row.version, row.operation, who, changed_rows(row.operation, row.operationMetrics))
            )
    outcome.order_1 = spark.sql(f"select status from {table} where order_id = 1").first()[0]
    return outcome


def show(name: str, outcome: Outcome) -> None:
    print(f"\n  {ADAPTERS[name]}")
    print(f"    {'version':<9}{'operation':<11}{'writer':<27}rows")
    for version, operation, who, rows in outcome.timeline:
        print(f"    v{version:<8}{operation:<11}{who:<27}{rows}")
    lost = outcome.order_1 != "cancelled"
    verdict = (
        "the notebook's cancel was LOST, and the run reported success"
        if lost
        else "the notebook's cancel is intact; this run refused to overwrite it"
    )
    print(f"    run: {outcome.status:<9} order 1 is now '{outcome.order_1}': {verdict}")


def main() -> int:
    started = time.monotonic()
    shutil.rmtree(LAKEHOUSE, ignore_errors=True)
    os.chdir(HERE)

    print("== 1. Build the example project on the embedded Spark + Delta session ==")
    dbt("build", "--vars", json.dumps({"day": 1}), target="fenced", quiet=False)
    dbt("build", "--vars", json.dumps({"day": 2}), target="fenced", quiet=False)

    print("\n== 2. The race, against both adapters ==")
    print(
        "  Day 2's run ships order 1. A notebook cancels order 1 after the run has read the\n"
        "  table and before it writes (injected as a pre-hook, so it lands there every time)."
    )
    outcomes = {name: race(name) for name in ("fenced", "stock")}
    for name in ("stock", "fenced"):
        show(name, outcomes[name])

    fenced, stock = outcomes["fenced"], outcomes["stock"]
    print("\n  What dbt-fenced-spark told the user:")
    for line in fenced.message.splitlines():
        print(f"    | {line}")
    print(f"\n  Demo finished in {time.monotonic() - started:.0f}s.")

    caught = fenced.status == "error" and fenced.order_1 == "cancelled"
    lost = stock.status == "success" and stock.order_1 != "cancelled"
    if not (caught and lost):
        print("  UNEXPECTED: the race did not play out as described above.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
