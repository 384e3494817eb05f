"""A fenced write is never replayed by dbt-spark's query_retries, and fence_retries waits its
turn between attempts."""

from contextlib import contextmanager, nullcontext
from types import SimpleNamespace

import pytest

from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager
from dbt.adapters.fenced_spark.fence.delta.words import LAST_COMMIT
from dbt.adapters.fenced_spark.fence.errors import FenceViolation
from dbt.adapters.fenced_spark.fence.protocol import (
    BACKOFF_CAP_SECONDS,
    Fence,
    FenceState,
    backoff_turns,
)
from tests.unit.delta_fake import FakeTable


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


def test_backoff_window_doubles_per_retry_up_to_sixteen_turns():
    top = lambda: 1.0  # noqa: E731  the largest jitter draw
    assert [backoff_turns(r, top) for r in (1, 2, 3, 4, 5, 10)] == [2, 4, 8, 16, 16, 16]
    assert backoff_turns(3, lambda: 0.25) == 2.0
    assert backoff_turns(3, lambda: 0.0) == 0.0


class FakeTime:
    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.now += seconds


class FakeLog:
    """The table's latest version as a function of the fake time; each read costs `cost`."""

    def __init__(self, time, versions, cost=0.0, broken=False):
        self.time, self.versions, self.cost, self.broken = time, versions, cost, broken
        self.reads = 0

    def latest_version(self, table, known=None):
        self.reads += 1
        self.time.now += self.cost
        if self.broken:
            raise RuntimeError("history unreadable")
        return self.versions(self.time.now)


def waited(turns, slot, versions=lambda now: 7, cost=0.0, broken=False):
    time = FakeTime()
    log = FakeLog(time, versions, cost, broken)
    fence = Fence(object(), nullcontext, sleep=time.sleep, log=log, clock=time.clock)
    fence.wait_turns(FenceState("a.t", "a.t", "append_if_unchanged", 7, 7, "i", "n"), turns, slot)
    return time.now, log.reads


def test_on_a_quiet_table_a_turn_is_one_attempt_long():
    seconds, _ = waited(turns=3, slot=2.0)
    assert seconds == pytest.approx(6.0)


def test_each_commit_that_lands_ends_a_turn():
    # One commit per second, attempts of 4 s: three commits end three turns after 3 s, not 12.
    seconds, _ = waited(turns=3, slot=4.0, versions=lambda now: 7 + int(now))
    assert 3.0 <= seconds < 4.0


def test_the_commits_that_refused_the_attempt_are_turns_taken():
    # The refused attempt expected v7; v8 and v9 landed during it.
    seconds, _ = waited(turns=2.5, slot=1.0, versions=lambda now: 9 if now < 0.3 else 10)
    assert seconds == pytest.approx(0.5)  # the next poll after the third commit
    seconds, reads = waited(turns=2, slot=1.0, versions=lambda now: 9)
    assert seconds == 0.0 and reads == 1


def test_the_wait_is_capped():
    seconds, _ = waited(turns=16, slot=30.0)
    assert seconds == pytest.approx(BACKOFF_CAP_SECONDS)


def test_a_costly_history_read_is_polled_less():
    _, cheap = waited(turns=4, slot=2.0)
    _, costly = waited(turns=4, slot=2.0, cost=0.5)
    assert (cheap, costly) == (16, 2)


def test_no_read_once_the_wait_is_over():
    # The retry's recapture reads the version next: 8 s at one read per 0.5 s is 16 reads.
    assert waited(turns=4, slot=2.0) == (pytest.approx(8.0), 16)
    assert waited(turns=0, slot=2.0) == (0.0, 0)


def test_an_unreadable_history_waits_out_the_time_and_leaves_the_error_to_the_retry():
    seconds, reads = waited(turns=2, slot=1.0, broken=True)
    assert seconds == pytest.approx(2.0) and reads > 1


class Recorded(FakeTable):
    """Each statement with whether it was sent inside the fence's single attempt."""

    def __init__(self):
        super().__init__()
        self.once = False
        self.sent: list[tuple[str, bool]] = []

    @contextmanager
    def single_attempt(self):
        self.once = True
        try:
            yield
        finally:
            self.once = False

    def execute(self, sql):
        self.sent.append((sql, self.once))
        super().execute(sql)


def test_only_the_write_and_the_revert_restores_are_sent_once():
    table = Recorded()
    fence = Fence(table, table.single_attempt, rng=lambda: 0.0)
    read = FenceState("`a`.`t`", "a.t", "append_if_unchanged", 0, 0, "inv", "model.p.t")
    table.before = lambda sql: table.foreign("theirs")  # a blind append during our write
    with pytest.raises(FenceViolation):
        fence.write(read, "insert into t select 1")
    once = [sql.split()[0] for sql, inside in table.sent if inside]
    assert once == ["insert", "RESTORE"]  # the RESTORE puts theirs back: nothing else is
    assert (f"RESET {LAST_COMMIT}", False) in table.sent  # a conf, sent with the retries
