"""The Spark Connect session behind `method: connect`.

Every dbt connection opens its own Connect session on the server, so SQL confs (the fence's
userMetadata) and temp views never cross threads, as with the embedded session's
`newSession()`.
"""

import logging
import os
import re
import time
import warnings
from typing import TYPE_CHECKING, Any

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

if TYPE_CHECKING:
    from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials

logger = AdapterLogger("FencedSpark")

INSTALL_HINT = "pip install 'dbt-fenced-spark[connect]'"
STACKTRACE = "\n\nJVM stacktrace:\n"


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
    try:
        import grpc
    except ImportError:  # the session method needs no gRPC
        return text
    cause: BaseException | None = exc
    while cause is not None:
        # A server's error carries its RPC only as context; its words are the exception's own.
        # Without a server (unreachable), pyspark's message is the RPC's dump: say its status.
        if isinstance(cause, grpc.RpcError) and isinstance(cause, grpc.Call):
            if cause is exc or cause is exc.__cause__ or "debug_error_string" in text:
                return f"{cause.code().name}: {cause.details()}"
            return text
        cause = cause.__cause__ or cause.__context__
    return text


def open_session(creds: "FencedSparkCredentials") -> Any:
    """A new Connect session, tried `1 + connect_retries` times `connect_timeout` seconds
    apart; then one error naming the URL."""
    quiet_client()
    url = str(creds.host)
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
        apply_conf(session, creds.server_side_parameters)
        return session


def _reach(url: str) -> Any:
    from pyspark.errors import PySparkException
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession

    try:
        session = SparkSession.builder.remote(url).create()
    except PySparkException as exc:  # a malformed URL: retrying cannot help
        raise DbtRuntimeError(
            f"host {redact(url)!r} is not a Spark Connect URL ({message(exc)}); "
            "write it as sc://host:port/;token=...;use_ssl=true"
        ) from exc
    # The client's own policy retries an unreachable server for minutes; while opening,
    # connect_retries decides, then the client's default applies to the queries.
    policies = session.client.get_retry_policies()
    session.client.set_retry_policies([DefaultPolicy(max_retries=0)])
    try:
        session.version  # noqa: B018 - an RPC that reaches the server without a Spark job
    except Exception:
        session.client.close()
        raise
    session.client.set_retry_policies(policies)
    return session


def apply_conf(session: Any, conf: dict[str, str]) -> None:
    # As on the embedded session: session confs only; a static conf belongs to the server.
    for key, value in conf.items():
        if session.conf.isModifiable(key):
            session.conf.set(key, value)
        else:
            logger.debug(f"server_side_parameters: {key} is not a session conf; left alone")


def close_session(session: Any) -> None:
    # Releases the session on the server; best effort, as pyspark's own stop().
    try:
        session.stop()
    except Exception as exc:
        logger.debug(f"Spark Connect session not released: {message(exc)}")
