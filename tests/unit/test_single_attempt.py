"""A fenced write is never replayed by dbt-spark's query_retries."""

from types import SimpleNamespace

from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager
from dbt.adapters.fenced_spark.fence.protocol import backoff_seconds


class Manager(FencedSparkConnectionManager):
    def __init__(self, handle):
        self.handle = handle

    def get_thread_connection(self):
        return SimpleNamespace(handle=self.handle)


def test_query_retries_are_zero_inside_and_restored_after():
    handle = SimpleNamespace(query_retries=3)
    with Manager(handle).single_attempt():
        assert handle.query_retries == 0
    assert handle.query_retries == 3


def test_handles_without_retries_are_left_alone():
    handle = SimpleNamespace()
    with Manager(handle).single_attempt():
        assert not hasattr(handle, "query_retries")


def test_backoff_grows_with_retries_and_attempt_time_and_is_capped():
    top = lambda: 1.0  # noqa: E731  the largest jitter draw
    assert backoff_seconds(1, 0.0, top) == 1.0
    assert backoff_seconds(2, 0.0, top) == 2.0
    assert backoff_seconds(1, 3.0, top) == 6.0
    assert backoff_seconds(10, 3.0, top) == 20.0
    assert backoff_seconds(3, 3.0, lambda: 0.0) == 0.0
