"""The harness's armed foreign writer: once disarmed (a test's end), it never fires."""

import threading
import time

from tests.harness.writer import ForeignWriter, disarm_all


class Recorder:
    """A stand-in session: what the writer would have sent to Spark."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def newSession(self) -> "Recorder":  # noqa: N802 (SparkSession's name)
        return self

    def sql(self, statement: str) -> "Recorder":
        self.statements.append(statement)
        return self

    def collect(self) -> list:
        return []


def test_a_disarmed_writer_never_fires_into_a_later_test():
    spark, later = Recorder(), threading.Event()
    writer = ForeignWriter(spark)
    writer.when(later.is_set, "insert into t values (1)")  # armed; its test failed before join()
    # "A Spark job has run for 1 s" comes true in the next test, 0.2 s from now.
    threading.Timer(0.2, later.set).start()
    assert disarm_all() == 1  # what tests/conftest.py does when every test ends
    time.sleep(0.3)
    assert spark.statements == []


def test_a_writer_that_fired_is_joined_as_before():
    spark = Recorder()
    writer = ForeignWriter(spark)
    writer.when(lambda: True, "insert into t values (2)")
    writer.join(timeout=5)
    assert spark.statements == ["insert into t values (2)"]
    assert writer.started is not None and writer.ended is not None
    assert disarm_all() == 0
