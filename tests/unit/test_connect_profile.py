"""`method: connect` profile checks and error words, without a server."""

import grpc
import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import connect
from dbt.adapters.fenced_spark.credentials import FencedConnectionMethod, FencedSparkCredentials


def creds(host: str | None, **extra) -> FencedSparkCredentials:
    return FencedSparkCredentials(method="connect", host=host, schema="analytics", **extra)


def test_connect_is_a_method_and_dbt_sparks_still_compare_equal():
    from dbt.adapters.spark.connections import SparkConnectionMethod

    assert creds("sc://h:15002").method == FencedConnectionMethod.CONNECT
    thrift = FencedSparkCredentials(method="thrift", host="h", schema="a")
    assert thrift.method == SparkConnectionMethod.THRIFT  # dbt-spark's open() compares so


@pytest.mark.parametrize("host", [None, "h:15002", "http://h:15002", "sc//h"])
def test_host_must_be_a_connect_url(host):
    with pytest.raises(DbtRuntimeError, match="method: connect takes Spark Connect's URL"):
        creds(host)


@pytest.mark.parametrize("host", ["sc://h:15002/;session_id=abc", "sc://h/;token=t;SESSION_ID=x"])
def test_a_url_naming_a_session_is_refused(host):
    # One session for every dbt connection would carry one thread's commit tag into another's.
    with pytest.raises(DbtRuntimeError, match="Remove session_id") as raised:
        creds(host)
    assert "token=t" not in str(raised.value)


def test_token_never_shown():
    url = "sc://h:443/;token=s3cr3t;use_ssl=true"
    profile = creds(url)
    assert profile.url == "sc://h:443/;token=***;use_ssl=true"
    assert "url" in profile._connection_keys() and "host" not in profile._connection_keys()
    assert connect.redact("sc://h:1/;user_id=a;Token=x") == "sc://h:1/;user_id=a;Token=***"


class FakeRpcError(grpc.RpcError, grpc.Call):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "failed to connect to all addresses"

    def __str__(self):
        return "<_MultiThreadedRendezvous ... debug_error_string = ...>"

    # grpc.Call's other abstract methods; never called here
    initial_metadata = trailing_metadata = time_remaining = None  # type: ignore[assignment]
    is_active = cancel = add_callback = None  # type: ignore[assignment]


def test_message_is_the_rpc_status_not_grpcs_dump():
    wrapped = RuntimeError("retries exceeded")
    wrapped.__cause__ = FakeRpcError()
    assert connect.message(wrapped) == "UNAVAILABLE: failed to connect to all addresses"


def test_message_drops_the_jvm_stack():
    error = Exception("[DELTA_CONCURRENT_APPEND] ... retry.\n\nJVM stacktrace:\norg.apache...")
    assert connect.message(error) == "[DELTA_CONCURRENT_APPEND] ... retry."


def test_unreachable_server_wrapped_by_pyspark_gives_the_status():
    # pyspark raises SparkConnectGrpcException(str(rpc_error)) from None when no server answered
    rpc = FakeRpcError()
    wrapped = RuntimeError("<_InactiveRpcError ... debug_error_string = ...>")
    wrapped.__context__, wrapped.__suppress_context__ = rpc, True
    assert connect.message(wrapped) == "UNAVAILABLE: failed to connect to all addresses"


def test_server_error_keeps_its_own_words_over_the_rpc_context():
    error = RuntimeError("[UNRESOLVED_COLUMN] no_such_column")
    error.__context__, error.__suppress_context__ = FakeRpcError(), True
    assert connect.message(error) == "[UNRESOLVED_COLUMN] no_such_column"
