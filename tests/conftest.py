"""Profiles are chosen here: one embedded Spark + Delta JVM, one Spark Thrift Server or one
Spark Connect server for the whole pytest process; with --cluster the server's executors run
on a Spark standalone cluster (other JVMs) started for the run."""

import getpass
import os

import pytest

pytest_plugins = ["dbt.tests.fixtures.project"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


PROFILES = ("session", "thrift", "connect")
SERVERS = ("thrift", "connect")

# Tables in tests are tiny: Spark's 200 shuffle partitions and Delta's 50 snapshot
# partitions make every commit's state rebuild a 50-task job, which halves the suite's speed
# on 2 cores. Both profiles (embedded session and Thrift server) get these.
#
# One JVM serves the whole run, and it touches thousands of tables: Delta keeps a DeltaLog (its
# snapshot's plans and encoders) for each of up to 10,000 tables, and Spark keeps 1,000 jobs,
# stages and SQL executions. That kept the heap's old generation about 85% full and G1 marking
# it every few seconds: a sixth of the JVM's CPU time. The suite's tables are done with when
# their test ends.
TEST_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.default.parallelism": "2",
    "spark.databricks.delta.delta.log.cacheSize": "64",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "1000",
    "spark.sql.ui.retainedExecutions": "100",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--profile",
        action="store",
        default="session",
        choices=PROFILES,
        help="session: embedded Spark + Delta; thrift / connect: a Spark Thrift Server / Spark "
        "Connect server started for the run",
    )
    parser.addoption(
        "--cluster",
        action="store_true",
        help="run the server's executors on a Spark standalone cluster (master + worker JVMs)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "skip_profile(*profiles, reason): skip on these profiles, for this reason"
    )
    config.addinivalue_line("markers", "cluster: runs only with --cluster (a standalone cluster)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    profile = config.getoption("--profile")
    cluster = config.getoption("--cluster")
    for item in items:
        if item.get_closest_marker("cluster") and not cluster:
            reason = "needs a standalone cluster: run with --cluster"
            item.add_marker(pytest.mark.skip(reason=reason))
        for marker in item.iter_markers("skip_profile"):
            reason = marker.kwargs.get("reason")
            if not reason:
                raise pytest.UsageError(f"{item.nodeid}: skip_profile needs a written reason")
            unknown = set(marker.args) - set(PROFILES)
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: unknown profiles {sorted(unknown)}")
            if profile in marker.args:
                item.add_marker(pytest.mark.skip(reason=f"{profile}: {reason}"))


@pytest.fixture(autouse=True)
def _disarm_foreign_writers():
    """A foreign writer armed to fire on "a Spark job has run for 1 s" must not outlive its
    test: if the test failed before join(), it would commit into whatever runs next."""
    from tests.harness.writer import disarm_all

    try:
        yield
    finally:
        disarm_all()


@pytest.fixture(scope="session")
def dbt_profile_name(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--profile")


@pytest.fixture(scope="session")
def lakehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("lakehouse"))


@pytest.fixture(scope="session")
def reliability_records(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where the crash and soak tests leave their records: RELIABILITY_RECORDS when
    `make reliability` asks for them (docs/reliability.md), else the run's temp folder, so a
    test run never writes into the clone."""
    folder = os.environ.get("RELIABILITY_RECORDS") or str(tmp_path_factory.mktemp("reliability"))
    os.makedirs(folder, exist_ok=True)
    return folder


# The cache the user exported (`make` passes it on), else the clone's: one download, not two.
JARS_CACHE = os.environ.get("DBT_FENCED_SPARK_JARS_CACHE", os.path.join(REPO, ".cache", "ivy"))


@pytest.fixture(scope="session")
def jars_cache() -> str:
    return JARS_CACHE


@pytest.fixture(scope="session")
def spark(dbt_profile_name: str, request: pytest.FixtureRequest):
    """The lakehouse as tests read and race it: the embedded JVM's root session, or a plain
    SQL client of the server. Foreign writers are its `newSession()`s."""
    if dbt_profile_name in SERVERS:
        return request.getfixturevalue("spark_server").client()
    if request.config.getoption("--cluster"):
        raise pytest.UsageError("--cluster runs a server's executors: use --profile thrift/connect")

    from dbt.adapters.fenced_spark import session
    from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials

    # Race tests park the write's tasks in Thread.sleep; spare task slots (not cores) let the
    # foreign writer's job run meanwhile instead of queueing behind ours.
    creds = FencedSparkCredentials(
        schema="default",
        folder=request.getfixturevalue("lakehouse"),
        jars_cache=request.getfixturevalue("jars_cache"),
        server_side_parameters={"spark.master": "local[6]", **TEST_CONF},
    )
    return session.root_session(creds)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A standalone master and worker (their own JVMs) for the whole run."""
    from tests.harness import cluster

    started = cluster.start(str(tmp_path_factory.mktemp("cluster")))
    yield started
    started.stop()


@pytest.fixture(scope="session")
def spark_server(
    dbt_profile_name: str, request: pytest.FixtureRequest, tmp_path_factory, jars_cache: str
):
    """One server of the profile's kind (its own JVM, metastore and warehouse) for the run."""
    from tests.harness import servers

    master = None
    if request.config.getoption("--cluster"):
        master = request.getfixturevalue("spark_cluster").master_url
    server = servers.start(
        dbt_profile_name,
        str(tmp_path_factory.mktemp(dbt_profile_name)),
        jars_cache,
        extra_conf=TEST_CONF,
        master=master,
    )
    yield server
    server.stop()


@pytest.fixture(scope="class")
def dbt_profile_target(request: pytest.FixtureRequest) -> dict:
    return profile_target(request)


@pytest.fixture(scope="class")
def profile_user(dbt_profile_target: dict) -> str:
    """The owner Spark records on new tables: the Thrift client's user, or the OS user that
    runs the embedded session or the Connect server."""
    return dbt_profile_target.get("user") or getpass.getuser()


def profile_target(request: pytest.FixtureRequest, adapter: str = "fenced_spark") -> dict:
    """The target of the chosen profile; `adapter="spark"` gives stock dbt-spark on the same
    JVM or server (Thrift only: dbt-spark has no Connect method)."""
    profile = request.config.getoption("--profile")
    if profile in SERVERS:
        if adapter == "spark" and profile == "connect":
            pytest.skip("stock dbt-spark has no Spark Connect method (dbt-labs/dbt-adapters#493)")
        return request.getfixturevalue("spark_server").profile(adapter)
    request.getfixturevalue("spark")
    if adapter == "spark":
        # Stock dbt-spark's session cursor picks up the running session.
        return {
            "type": "spark",
            "method": "session",
            "host": "localhost",
            "schema": "analytics",
            "threads": 1,
        }
    return {
        "type": "fenced_spark",
        "method": "session",
        "schema": "analytics",
        "folder": request.getfixturevalue("lakehouse"),
        "jars_cache": request.getfixturevalue("jars_cache"),
        "threads": 1,
    }


class StockSparkProfile:
    """Mixin: the class's dbt commands run on stock dbt-spark, Delta, the same JVM or server."""

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, request: pytest.FixtureRequest) -> dict:
        return profile_target(request, adapter="spark")

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+file_format": "delta"}}
