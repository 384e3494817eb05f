"""One embedded Spark + Delta JVM for the whole pytest process; profiles are chosen here."""

import os

import pytest

pytest_plugins = ["dbt.tests.fixtures.project"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--profile", action="store", default="session", help="session (embedded) or thrift"
    )


@pytest.fixture(scope="session")
def dbt_profile_name(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--profile")


@pytest.fixture(scope="session")
def lakehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("lakehouse"))


@pytest.fixture(scope="session")
def jars_cache() -> str:
    return os.environ.get("DBT_FENCED_SPARK_JARS_CACHE", os.path.join(REPO, ".cache", "ivy"))


@pytest.fixture(scope="session")
def spark(lakehouse: str, jars_cache: str):
    """The process's root session; tests take `newSession()`s of it as foreign writers."""
    from dbt.adapters.fenced_spark import session
    from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials

    # Race tests park the write's tasks in Thread.sleep; spare task slots (not cores) let the
    # foreign writer's job run meanwhile instead of queueing behind ours.
    creds = FencedSparkCredentials(
        schema="default",
        folder=lakehouse,
        jars_cache=jars_cache,
        server_side_parameters={"spark.master": "local[6]"},
    )
    return session.root_session(creds)


@pytest.fixture(scope="class")
def dbt_profile_target(dbt_profile_name: str, lakehouse: str, jars_cache: str, spark):
    if dbt_profile_name == "session":
        return session_target(lakehouse, jars_cache)
    raise pytest.UsageError(f"unknown --profile {dbt_profile_name}")


def session_target(lakehouse: str, jars_cache: str) -> dict:
    return {
        "type": "fenced_spark",
        "method": "session",
        "schema": "analytics",
        "folder": lakehouse,
        "jars_cache": jars_cache,
        "threads": 1,
    }


class StockSparkProfile:
    """Mixin: the class's dbt commands run on stock dbt-spark, Delta, the same JVM."""

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, spark):
        return stock_spark_target()

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+file_format": "delta"}}


def stock_spark_target() -> dict:
    """Stock dbt-spark on the same JVM (its session cursor picks up the running session)."""
    return {
        "type": "spark",
        "method": "session",
        "host": "localhost",
        "schema": "analytics",
        "threads": 1,
    }
