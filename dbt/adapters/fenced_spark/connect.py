"""The Spark Connect session behind `method: connect`.

Every dbt connection has a Connect session of its own, so SQL confs (the fence's userMetadata)
and temp views never cross threads, as with the embedded session's `newSession()`. A session
is not opened anew for every node, though: Spark Connect runs each session's code in a class
loader of its own, and Spark's cache of compiled code is kept per class loader (SPARK-44795),
so a new session compiles every operator of every query again (0.6 s of a MERGE's 2 s here,
docs/cluster.md). A node's session is kept for a later node instead, and made as a new one is
before that node's first statement (`clear`: its temp views dropped, its confs RESET). One in
which something ran that those do not undo (USE, a temporary function or variable, ADD JAR,
a Python model) or a statement got no answer is closed with its node, as before.
"""

import atexit
import logging
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.connections import SparkCredentials
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark.fence.delta.sql_log import SqlFileReads
from dbt.adapters.fenced_spark.run_state import leading_words

logger = AdapterLogger("FencedSpark")

INSTALL_HINT = "pip install 'dbt-fenced-spark[connect]'"
STACKTRACE = "\n\nJVM stacktrace:\n"

# Statements whose effect on the session neither a RESET nor dropping its temp views undoes,
# matched on their leading words (comments between them dropped). A catalog set by its conf
# stays loaded in the session after the RESET; a permanent function is the catalog's.
_STAYS = re.compile(
    r"(USE|DECLARE|ADD|BEGIN|EXECUTE|[\w$]+ : BEGIN)\b"
    r"|SET (CATALOG|SCHEMA|NAMESPACE|DATABASE|VAR|VARIABLE)\b|SET spark\.sql\.catalog\."
    r"|CREATE (OR REPLACE )?TEMP(ORARY)? (FUNCTION|MACRO)\b"
    r"|CREATE (OR REPLACE )?(TEMP(ORARY)? )?VARIABLE\b",
    re.I,
)
# Replayed the same into whichever connection takes the session next (run_state.py): the
# session it leaves is the one that replay makes.
_REPLAYED_ALIKE = re.compile(r"USE\b|SET CATALOG\b", re.I)
# A statement that failed this way may still run on the server (no answer came).
_IN_TRANSIT = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN"}

# Sessions kept for a later node, by URL (the token is in it), most recent last; any thread's.
_kept: dict[str, list[Any]] = {}
_kept_lock = threading.Lock()


class Leftovers:
    """Whether what ran in a session can be cleared for another node (`clear`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.reusable = True
        self.replaying = False  # the run's hook statements, replayed (connections.py)

    def saw(self, sql: str) -> None:
        # Before the statement runs: one that fails may have changed the session all the same.
        head = leading_words(sql)
        if _STAYS.match(head) and not (self.replaying and _REPLAYED_ALIKE.match(head)):
            self.reusable = False

    def failed(self, exc: BaseException) -> None:
        # Closing the session interrupts a statement still running; a kept one would let it
        # finish under another node. The server's own error means it ended.
        if in_transit(exc):
            self.reusable = False


def in_transit(exc: BaseException) -> bool:
    """Whether a call failed without the server's answer (a lost stream, an interrupt)."""
    if not isinstance(exc, Exception):
        return True
    call = _rpc_call(exc)
    # No call: raised before anything was sent.
    return call is not None and call.code().name in _IN_TRANSIT


@contextmanager
def short_call(session: Any, short: bool = True) -> Iterator[None]:
    """A statement that runs no Spark job (`answered_at_once`: SET, DESCRIBE of a table; the
    fence's EXPLAINs) in one plain ExecutePlan stream. pyspark's reattachable execution, which
    lets a long statement outlive a stream the server or a proxy ends, cost 8-13 ms more per
    statement here (docs/limits.md has what a plain stream gives up). The write and the model's
    SQL keep it. The client's flag is given back as it was (a Python model may set it)."""
    client = session.client
    if not short or not getattr(client, "_use_reattachable_execute", True):
        yield
        return
    client.disable_reattachable_execute()
    try:
        yield
    finally:
        client.enable_reattachable_execute()


def clear(session: Any) -> int:
    """The session as a new one is: no temp views, the server's confs. The views go first, by
    the names Spark lists; under case sensitivity, which RESET then undoes, since a view made
    under it is found only by its exact name (under any other rule Spark does not even call it
    temporary). global_temp is in memory, so no metastore is asked; its own views are no
    session's. The catalog's call drops only a temp view, where SQL's DROP VIEW could drop a
    table's view of the name. How many views were dropped."""
    session.conf.set("spark.sql.caseSensitive", "true")
    with short_call(session):
        rows = session.sql("SHOW VIEWS IN global_temp").collect()
        views = [r.viewName for r in rows if not r.namespace]
        for view in views:
            session.catalog.dropTempView(view)
        session.sql("RESET")
    return len(views)


T = TypeVar("T")


class OnFrames(Protocol):
    def on_frames(self, sql: str, read: Callable[[Any], T]) -> T: ...


class FrameReads:
    """The fence's reads of files by path (fence/delta/sql_log.py) through the DataFrame API.
    `spark.sql` sends a statement to be analysed and the collect sends it again to run, and a
    file source lists its files at each analysis: here one EXPLAIN took 75 ms against 26 as an
    AnalyzePlan call, a read of 16 commit files 130 against 76 as one ExecutePlan. Logged as the
    SQL each stands for (`connections.on_frames`)."""

    def __init__(self, connections: OnFrames) -> None:
        self.connections = connections

    def rows(self, source: str, path: str, columns: Sequence[str]) -> list:
        return self.connections.on_frames(
            SqlFileReads.select(source, path, columns),
            lambda spark: spark.read.format(source).load(path).selectExpr(*columns).collect(),
        )

    def plan(self, path: str) -> str:
        def explain(spark: Any) -> str:
            frame = spark.read.format("binaryFile").load(path).select("path")
            # pyspark's own text for DataFrame.explain(), which prints it instead.
            return str(frame._explain_string())

        return self.connections.on_frames(SqlFileReads.explain(path), explain)


def redact(url: str) -> str:
    """The URL as logs and `dbt debug` may show it: without its token."""
    return re.sub(r"(;\s*token=)[^;]*", r"\1***", url, flags=re.IGNORECASE)


def check_installed() -> None:
    quiet_client()
    try:
        import grpc  # noqa: F401
        import pyarrow  # noqa: F401
        from pyspark.sql.connect.session import SparkSession  # noqa: F401
    except ImportError as exc:
        raise DbtRuntimeError(
            f"method: connect needs pyspark's Spark Connect client: {INSTALL_HINT}\n\n"
            f"ImportError({exc})"
        ) from exc


def quiet_client() -> None:
    # pyspark logs every server-side error as a JSON line with the JVM stack on stderr, and
    # gRPC's C core prints its own; the error reaches the user once, through dbt.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).disabled = True


def message(exc: BaseException) -> str:
    """The server's own words (Spark's or Delta's), without the JVM stack or gRPC's dump."""
    text = str(exc).split(STACKTRACE, 1)[0]
    call = _rpc_call(exc)
    # A server's error carries its RPC only as context; its words are the exception's own.
    # Without a server (unreachable), pyspark's message is the RPC's dump: say its status.
    if call is not None and (call is exc or call is exc.__cause__ or "debug_error_string" in text):
        return f"{call.code().name}: {call.details()}"
    return text


def _rpc_call(exc: BaseException) -> Any:
    """The first gRPC call among the exception's causes and contexts; None without one, or
    without gRPC (the session method needs none)."""
    try:
        import grpc
    except ImportError:
        return None
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, grpc.RpcError) and isinstance(cause, grpc.Call):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def open_session(creds: SparkCredentials, name: str | None = None) -> Any:
    """A kept session made new, or a new Connect session, with the profile's confs."""
    quiet_client()
    url = str(creds.host)
    session = _reuse(url, name) or _open(url, creds)
    try:
        apply_conf(session, creds.server_side_parameters)
    except BaseException:
        close_session(session)
        raise
    return session


def _reuse(url: str, name: str | None) -> Any:
    while True:
        with _kept_lock:
            kept = _kept.get(url)
            if not kept:
                return None
            session = kept.pop()
        try:
            with no_retries(session):
                dropped = clear(session)
        except Exception as exc:  # expired on the server, or the server is gone
            logger.debug(f"Spark Connect session not reused: {message(exc)}")
            close_session(session)
            continue
        except BaseException:
            close_session(session)
            raise
        logger.debug(
            f"Spark Connect session reused for connection {name!r}: "
            f"{dropped} temp view(s) dropped, confs RESET"
        )
        return session


@contextmanager
def no_retries(session: Any) -> Iterator[None]:
    """The client's own policy retries an unreachable server for minutes: a kept session that
    does not answer at once is closed, and a new one opened under `connect_retries`."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    policies = session.client.get_retry_policies()
    session.client.set_retry_policies([DefaultPolicy(max_retries=0)])
    try:
        yield
    finally:
        session.client.set_retry_policies(policies)


def _open(url: str, creds: SparkCredentials) -> Any:
    """A new Connect session, tried `1 + connect_retries` times `connect_timeout` seconds
    apart; then one error naming the URL."""
    attempts = 1 + max(0, creds.connect_retries)
    attempt = 1
    while True:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pyspark's RETRIES_EXCEEDED: our error says it
                session = _reach(url)
        except Exception as exc:
            if attempt == attempts:
                raise DbtRuntimeError(
                    f"Could not reach the Spark Connect server at {redact(url)} after "
                    f"{attempts} attempt(s) ({creds.connect_timeout}s apart): {message(exc)}"
                ) from exc
            logger.warning(
                f"Spark Connect server at {redact(url)} not reachable ({message(exc)}); "
                f"retrying in {creds.connect_timeout}s ({attempt} of {creds.connect_retries})"
            )
            time.sleep(creds.connect_timeout)
            attempt += 1
            continue
        return session


def _reach(url: str) -> Any:
    from pyspark.errors import PySparkException
    from pyspark.sql.connect.session import SparkSession

    try:
        session = SparkSession.builder.remote(url).create()
    except PySparkException as exc:  # a malformed URL: retrying cannot help
        raise DbtRuntimeError(
            f"host {redact(url)!r} is not a Spark Connect URL ({message(exc)}); "
            "write it as sc://host:port/;token=...;use_ssl=true"
        ) from exc
    # While opening, connect_retries decides; then the client's default applies to the queries.
    try:
        with no_retries(session):
            session.version  # noqa: B018 - an RPC that reaches the server without a Spark job
    except Exception:
        session.client.close()
        _closed.append(session)
        raise
    return session


def apply_conf(session: Any, conf: dict[str, str]) -> None:
    # As on the embedded session: session confs only; a static conf belongs to the server.
    for key, value in conf.items():
        if session.conf.isModifiable(key):
            session.conf.set(key, value)
        else:
            logger.debug(f"server_side_parameters: {key} is not a session conf; left alone")


def release(session: Any, leftovers: Leftovers) -> None:
    """At the end of a node: kept for a later one if it can be made new, else closed."""
    if not leftovers.reusable:
        close_session(session)
        return
    with _kept_lock:
        _kept.setdefault(leftovers.url, []).append(session)


def release_kept() -> None:
    """At the end of an invocation (dbt's cleanup), and of the process."""
    with _kept_lock:
        kept = [session for sessions in _kept.values() for session in sessions]
        _kept.clear()
    for session in kept:
        close_session(session)


atexit.register(release_kept)


# Sessions closed in this process. pyspark's SparkSession.__del__ closes its client again,
# and closing any client shuts down the release thread pool that every session's reattachable
# execution shares: collected inside another session's submit to that pool, it waits on the
# pool's own lock forever (a bench run hung so, in part 8's new session per node). Kept
# referenced, a closed session is never collected before the process exits.
_closed: list[Any] = []


def close_session(session: Any) -> None:
    # Releases the session on the server; best effort, as pyspark's own stop(), and at once:
    # a server that does not answer has let it go anyway.
    _closed.append(session)
    try:
        with no_retries(session):
            session.stop()
    except Exception as exc:
        logger.debug(f"Spark Connect session not released: {message(exc)}")
