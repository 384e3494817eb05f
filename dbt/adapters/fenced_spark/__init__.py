from dbt.adapters.base import AdapterPlugin

from dbt.adapters.fenced_spark.connections import FencedSparkConnectionManager  # noqa: F401
from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials
from dbt.adapters.fenced_spark.impl import FencedSparkAdapter
from dbt.adapters.fenced_spark.relation import FencedSparkRelation  # noqa: F401
from dbt.include import fenced_spark

Plugin = AdapterPlugin(
    adapter=FencedSparkAdapter,  # type: ignore[arg-type]
    credentials=FencedSparkCredentials,
    include_path=fenced_spark.PACKAGE_PATH,
    dependencies=["spark"],
)
