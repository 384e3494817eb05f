"""One shared lakehouse (a real HDFS and a Derby network server as the metastore) for the whole
pytest run; every race here is separate `dbt run` processes, each its own Spark driver."""

import pytest

from tests.harness import hdfs


@pytest.fixture(scope="session")
def shared_lakehouse(tmp_path_factory: pytest.TempPathFactory, jars_cache: str):
    lakehouse = hdfs.start(str(tmp_path_factory.mktemp("shared_lakehouse")), jars_cache)
    yield lakehouse
    lakehouse.stop()
