"""A Connect session kept for the next node (connect.py): which statements end its reuse, and
what is sent to make it new. The functional proof is test_connect.py over a real server."""

from types import SimpleNamespace

import grpc
import pytest

from dbt.adapters.fenced_spark import connect


class FakeSession:
    def __init__(self, temp_views=(), fails=None):
        self.sent: list[str] = []
        self.dropped: list[str] = []
        self.stopped = False
        self.fails = fails
        self.temp_views = list(temp_views)
        self.catalog = SimpleNamespace(dropTempView=self._drop)
        self.conf = SimpleNamespace(
            isModifiable=lambda key: True, set=lambda k, v: self.sent.append(f"conf {k}={v}")
        )
        self.policies = ["the client's own"]
        self.reattachable = True  # pyspark's default
        self.plain: list[str] = []  # statements sent without reattachable execution
        self.client = SimpleNamespace(
            get_retry_policies=lambda: self.policies,
            set_retry_policies=lambda p: setattr(self, "policies", p),
            disable_reattachable_execute=lambda: setattr(self, "reattachable", False),
            enable_reattachable_execute=lambda: setattr(self, "reattachable", True),
        )

    def _plain(self, call: str) -> None:
        if not self.reattachable:
            self.plain.append(call)

    def _drop(self, view: str) -> None:
        self._plain(f"drop {view}")
        self.dropped.append(view)

    def sql(self, statement):
        self._plain(statement)
        if self.fails is not None:
            raise self.fails
        self.sent.append(statement)
        rows = [
            SimpleNamespace(namespace="", viewName=v, isTemporary=True) for v in self.temp_views
        ]
        rows.append(SimpleNamespace(namespace="global_temp", viewName="g", isTemporary=True))

        def collect():
            self._plain(f"collect {statement}")
            return rows

        return SimpleNamespace(collect=collect)

    def stop(self):
        self.stopped = True


class LostStream(grpc.RpcError, grpc.Call):
    """What pyspark's client raises from when the server does not answer."""

    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code

    def details(self):
        return "lost"

    def initial_metadata(self):
        return None

    def trailing_metadata(self):
        return None

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def add_callback(self, callback):
        return False


def raised_from(cause):
    try:
        try:
            raise cause
        except Exception as inner:
            raise RuntimeError("[SPARK] the call failed") from inner
    except RuntimeError as exc:
        return exc


@pytest.fixture(autouse=True)
def no_kept_sessions():
    connect.release_kept()
    yield
    connect.release_kept()


def creds(url="sc://h:15002"):
    return SimpleNamespace(host=url, server_side_parameters={"spark.sql.shuffle.partitions": "4"})


@pytest.mark.parametrize(
    "sql",
    [
        "use analytics",
        "/* dbt */ USE CATALOG spark_catalog",
        "set catalog spark_catalog",
        "SET /* x */ CATALOG other",
        "SET VAR x = 1",
        "declare x int default 1",
        "create temporary function f as 'com.example.F'",
        "CREATE /* */ TEMPORARY\n FUNCTION f AS 'com.example.F'",
        "create or replace temp function f(x int) returns int return x + 1",
        "create temporary variable v int",
        "add jar /tmp/x.jar",
        "execute immediate 'select 1'",
        "begin select 1; end",
        "lbl: BEGIN USE x; END",
        "set spark.sql.catalog.other=org.apache.iceberg.spark.SparkCatalog",
    ],
)
def test_state_a_reset_cannot_clear_ends_reuse(sql):
    leftovers = connect.Leftovers("sc://h")
    leftovers.saw(sql)
    assert not leftovers.reusable


@pytest.mark.parametrize(
    "sql",
    [
        "set spark.sql.shuffle.partitions = 3",
        "set spark.sql.caseSensitive=true",
        "reset",
        "merge into t using s on t.id = s.id when matched then update set *",
        "create or replace table t using delta as select 1",
        "create or replace temporary view v as select 1",
        "cache table c as select 1",
        "create function f as 'com.example.F'",  # the catalog's, not the session's
        "select 'use' as word",
        "describe extended t",
    ],
)
def test_confs_views_and_data_statements_keep_it_reusable(sql):
    leftovers = connect.Leftovers("sc://h")
    leftovers.saw(sql)
    assert leftovers.reusable


def test_a_replayed_use_is_replayed_alike_into_the_next_connection():
    leftovers = connect.Leftovers("sc://h")
    leftovers.replaying = True
    leftovers.saw("use analytics")
    assert leftovers.reusable
    leftovers.saw("create temporary function f as 'com.example.F'")  # would fail a second time
    assert not leftovers.reusable


def test_temp_views_are_dropped_by_their_listed_names_before_the_reset():
    session = FakeSession(temp_views=["Staged__fence_0a", "cached"])
    connect.release(session, connect.Leftovers("sc://h:15002"))
    assert not session.stopped
    assert connect.open_session(creds()) is session
    # Listed under the node's case rule, dropped before RESET restores Spark's; never
    # global_temp's `g`, which is no session's.
    assert session.sent == [
        "conf spark.sql.caseSensitive=true",
        "SHOW VIEWS IN global_temp",
        "RESET",
        "conf spark.sql.shuffle.partitions=4",  # the profile's, again
    ]
    assert session.dropped == ["Staged__fence_0a", "cached"]
    assert session.policies == ["the client's own"]  # given back after the reset
    # No job, nothing long: one plain stream each, and reattachable execution given back.
    assert session.plain == [
        "SHOW VIEWS IN global_temp",
        "collect SHOW VIEWS IN global_temp",
        "drop Staged__fence_0a",
        "drop cached",
        "RESET",
    ]
    assert session.reattachable


def test_a_session_that_does_not_answer_is_closed_at_once_and_a_new_one_opened(monkeypatch):
    dead, new = FakeSession(fails=raised_from(LostStream(grpc.StatusCode.UNAVAILABLE))), None
    new = FakeSession()
    retried = []
    real = dead.client.set_retry_policies

    def policies(p):
        retried.append(p)
        real(p)

    dead.client.set_retry_policies = policies
    monkeypatch.setattr(connect, "_open", lambda url, c: new)
    connect.release(dead, connect.Leftovers("sc://h:15002"))
    assert connect.open_session(creds()) is new
    assert dead.stopped
    # No client retries (minutes against a server that is gone): connect_retries decide.
    assert retried[0][0].max_retries == 0


def test_an_unreusable_session_is_closed_and_kept_ones_end_with_the_invocation(monkeypatch):
    spoilt, kept, other_url = FakeSession(), FakeSession(), FakeSession()
    leftovers = connect.Leftovers("sc://h:15002")
    leftovers.saw("use analytics")
    connect.release(spoilt, leftovers)
    assert spoilt.stopped
    connect.release(kept, connect.Leftovers("sc://h:15002"))
    # A session is only ever reused for its own URL (its token is in it).
    monkeypatch.setattr(connect, "_open", lambda url, c: other_url)
    assert connect.open_session(creds("sc://other:15002")) is other_url
    connect.release_kept()
    assert kept.stopped
    # Never collected in this process: its __del__ would shut down the release thread pool
    # that every session's reattachable execution shares.
    assert any(s is spoilt for s in connect._closed) and any(s is kept for s in connect._closed)


@pytest.mark.parametrize(
    "code, ends", [("UNAVAILABLE", True), ("CANCELLED", True), ("INTERNAL", False)]
)
def test_a_statement_that_got_no_answer_ends_reuse_the_servers_own_error_does_not(code, ends):
    from dbt.adapters.fenced_spark.handles import ConnectHandle

    failing = FakeSession(fails=raised_from(LostStream(getattr(grpc.StatusCode, code))))
    handle = ConnectHandle(failing, "sc://h:15002")
    with pytest.raises(RuntimeError, match="the call failed"):
        handle.cursor().execute("select 1")
    # With no answer it may still run on the server: closing the session interrupts it.
    assert handle.leftovers.reusable is not ends


def test_an_interrupt_ends_reuse_a_client_side_error_does_not():
    interrupted = connect.Leftovers("sc://h")
    interrupted.failed(KeyboardInterrupt())
    assert not interrupted.reusable
    unsent = connect.Leftovers("sc://h")
    unsent.failed(ValueError("raised before anything was sent"))
    assert unsent.reusable


@pytest.mark.parametrize(
    "sql, fence_short, plain",
    [
        ("describe extended s.t", False, True),
        ("SET spark.sql.shuffle.partitions", False, True),
        ("EXPLAIN SELECT path FROM binaryFile.`/t/_delta_log/{0.json}`", True, True),
        # the write, the model's SQL, a DESCRIBE of a query: may run long, stay reattachable
        ("merge into s.t using v on s.t.id = v.id when matched then update set *", False, False),
        ("select * from s.t", False, False),
        ("describe query select * from s.t", False, False),
    ],
)
def test_only_short_statements_leave_reattachable_execution(sql, fence_short, plain):
    from dbt.adapters.fenced_spark.handles import ConnectHandle

    session = FakeSession()
    handle = ConnectHandle(session, "sc://h:15002")
    handle.read_at_once = fence_short
    cursor = handle.cursor()
    cursor.execute(sql)
    handle.read_at_once = False  # the manager's at_once has ended: the fetch is the statement's
    cursor.fetchall()
    assert session.plain == ([sql, f"collect {sql}"] if plain else [])
    assert session.reattachable


def test_reattachable_execution_comes_back_after_a_short_statement_fails():
    from dbt.adapters.fenced_spark.handles import ConnectHandle

    failing = FakeSession(fails=RuntimeError("the server said no"))
    with pytest.raises(RuntimeError):
        ConnectHandle(failing, "sc://h:15002").cursor().execute("describe s.t")
    assert failing.plain == ["describe s.t"] and failing.reattachable


def test_the_fences_short_reads_are_short_over_connect_too():
    from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager
    from dbt.adapters.fenced_spark.handles import ConnectHandle, FencedSessionConnectionWrapper

    handle = ConnectHandle(FakeSession(), "sc://h:15002")
    manager = FencedSparkConnectionManager.__new__(FencedSparkConnectionManager)
    connection = SimpleNamespace(handle=FencedSessionConnectionWrapper(handle))  # type: ignore[arg-type]
    manager.get_thread_connection = lambda: connection  # type: ignore[method-assign]
    manager.prime = lambda: None  # type: ignore[method-assign]
    with manager.at_once():
        assert handle.read_at_once
        with manager.at_once(False):
            assert not handle.read_at_once
    assert not handle.read_at_once


def test_a_client_without_reattachable_execution_is_left_without_it():
    from dbt.adapters.fenced_spark.handles import ConnectHandle

    session = FakeSession()
    session.client._use_reattachable_execute = False  # as a Python model may leave it
    session.reattachable = False
    ConnectHandle(session, "sc://h:15002").cursor().execute("describe s.t")
    assert not session.reattachable
