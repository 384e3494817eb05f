"""dbt's Python model tests, run in the connection's own SparkSession (python_model.py)."""

import pandas
import pyspark
import pytest
from dbt.tests.adapter.python_model.test_python_model import (
    BasePythonEmptyTests,
    BasePythonIncrementalTests,
    BasePythonMetaGetTests,
    BasePythonModelTests,
    BasePythonSampleTests,
)
from dbt.tests.adapter.python_model.test_spark import (
    PANDAS_MODEL,
    PANDAS_ON_SPARK_MODEL,
    PYSPARK_MODEL,
    BasePySparkTests,
)
from dbt.tests.util import run_dbt

pytestmark = pytest.mark.skip_profile(
    "thrift", reason="a Thrift client has no SparkSession to run Python in (test_python_models.py)"
)


class TestPythonModel(BasePythonModelTests):
    pass


class TestPythonIncremental(BasePythonIncrementalTests):
    pass


class TestPythonMetaGet(BasePythonMetaGetTests):
    pass


class TestPythonEmpty(BasePythonEmptyTests):
    pass


class TestPythonSample(BasePythonSampleTests):
    pass


class TestPySpark(BasePySparkTests):
    # The base class's fourth model imports databricks.koalas, the pandas API that became
    # pyspark.pandas in Spark 3.2 and does not run on Spark 4; pandas-on-Spark is below.
    @pytest.fixture(scope="class")
    def models(self):
        return {"pandas_df.py": PANDAS_MODEL, "pyspark_df.py": PYSPARK_MODEL}

    def test_different_dataframes(self, project):
        assert len(run_dbt(["run"])) == 2


@pytest.mark.skipif(
    int(pandas.__version__.split(".")[0]) >= 3,
    reason=f"pyspark {pyspark.__version__}'s pandas API does not import on pandas "
    f"{pandas.__version__} (it imports pandas names that pandas 3 removed; it needs pandas 2)",
)
class TestPandasOnSpark(BasePySparkTests):
    @pytest.fixture(scope="class")
    def models(self):
        return {"pandas_on_spark_df.py": PANDAS_ON_SPARK_MODEL}

    def test_different_dataframes(self, project):
        assert len(run_dbt(["run"])) == 1
