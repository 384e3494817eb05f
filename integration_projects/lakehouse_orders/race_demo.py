"""`make demo`: build the example project on the embedded Spark + Delta session, then run the
merge race against stock dbt-spark and dbt-fenced-spark, side by side (scorecard.py).

The race: day 2's run ships order 1. Meanwhile a notebook (another SparkSession in the same
JVM) cancels order 1: once after the run has read the table and before it writes, and once
while its MERGE is running. Then two more, after the run read its table: a double-fired job
against a model that reads its watermark at compile time, and a late event against a model
whose pre-hook deletes the day it reloads.
"""

import json
import os
import shutil
import sys
import time

import scorecard


def build(day: int) -> None:
    print(f"\n== Build day {day} of the example project (dbt build, fenced_spark) ==")
    result = scorecard.dbtRunner().invoke(
        [
            "build",
            "--vars",
            json.dumps({"day": day}),
            *scorecard.day_window(day),
            "--project-dir",
            scorecard.HERE,
            "--profiles-dir",
            scorecard.HERE,
            "--target",
            "fenced",
        ]
    )
    if result.exception is not None or not result.success:
        raise SystemExit(f"dbt build of day {day} failed")


def main() -> int:
    started = time.monotonic()
    shutil.rmtree(os.path.join(scorecard.HERE, ".fenced_spark"), ignore_errors=True)
    os.chdir(scorecard.HERE)
    build(1)
    build(2)
    print("\n== The merge race, against both adapters ==")
    rc = scorecard.main(
        ["--races", "merge", "--timings", "between", "during", "--no-write"],
        say_finished=False,
    )
    print("\n== A watermark read at compile time, and a pre-hook reload, raced ==")
    rc |= scorecard.main(
        [
            "--races",
            "compile_time_watermark",
            "pre_hook_reload",
            "--timings",
            "between",
            "--no-write",
        ],
        say_finished=False,
    )
    print(f"\nDemo finished in {time.monotonic() - started:.0f}s. Every strategy and timing:")
    print("`make scorecard` (docs/scorecard.md).")
    return rc


if __name__ == "__main__":
    sys.exit(main())
