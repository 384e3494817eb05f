"""Two processes starting Spark on one fresh Ivy cache resolve into it one at a time: two Ivys
filling one cache at once break each other's files, and both JVMs exit."""

import multiprocessing
import time

from dbt.adapters.fenced_spark.session import resolving


def hold(cache: str, name: str, log: str, seconds: float) -> None:
    with resolving(
        {"spark.jars.packages": "io.delta:delta-spark_4.1_2.13:4.4.0", "spark.jars.ivy": cache}
    ):
        with open(log, "a") as f:
            f.write(f"{name} in\n")
        time.sleep(seconds)
        with open(log, "a") as f:
            f.write(f"{name} out\n")


def test_a_second_resolution_waits_for_the_first(tmp_path):
    log = str(tmp_path / "log")
    spawn = multiprocessing.get_context("spawn")
    first = spawn.Process(target=hold, args=(str(tmp_path / "ivy"), "first", log, 1.5))
    first.start()
    while not (tmp_path / "log").exists():
        time.sleep(0.05)
    second = spawn.Process(target=hold, args=(str(tmp_path / "ivy"), "second", log, 0))
    second.start()
    first.join(30)
    second.join(30)
    assert (tmp_path / "log").read_text().split("\n")[:4] == [
        "first in",
        "first out",
        "second in",
        "second out",
    ]


def test_a_start_that_resolves_nothing_takes_no_lock(tmp_path):
    with resolving({"spark.jars": "/x.jar", "spark.jars.ivy": str(tmp_path)}):
        assert not (tmp_path / "resolving.lock").exists()
