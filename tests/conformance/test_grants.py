"""grants: dbt-spark's GRANT and REVOKE, where the metastore has privileges. The embedded
session's (and the harness servers') has none: each class asks Spark first, and is skipped
with Spark's own answer while Spark refuses a GRANT."""

import os

import pytest
from dbt.tests.adapter.grants.test_incremental_grants import BaseIncrementalGrants
from dbt.tests.adapter.grants.test_invalid_grants import BaseInvalidGrants
from dbt.tests.adapter.grants.test_model_grants import BaseModelGrants
from dbt.tests.adapter.grants.test_seed_grants import BaseSeedGrants
from dbt.tests.adapter.grants.test_snapshot_grants import BaseSnapshotGrants

NO_GRANT = (
    "open-source Spark has no GRANT or REVOKE: Spark 4.1 answers [INVALID_STATEMENT_OR_CLAUSE] "
    "The statement or clause: GRANT is not valid (and dbt-spark's `show grants on` does not "
    "parse); grants need a metastore with privileges (Databricks' Unity Catalog). Asked of Spark "
    "on every run"
)


class AskSparkFirst:
    @pytest.fixture(autouse=True)
    def spark_takes_grants(self, project):
        probe = f"{project.test_schema}.grant_probe"
        project.run_sql(f"create table {probe} (id int) using delta")
        try:
            project.run_sql(f"grant select on {probe} to `dbt_test_user_1`")
        except Exception as refused:
            if "INVALID_STATEMENT_OR_CLAUSE" not in str(refused):
                raise
            pytest.skip(NO_GRANT)
        finally:
            project.run_sql(f"drop table {probe}")
        if not os.getenv("DBT_TEST_USER_1"):
            pytest.skip("Spark takes GRANT here, but DBT_TEST_USER_1..3 name no users to grant to")


class TestModelGrants(AskSparkFirst, BaseModelGrants):
    pass


class TestIncrementalGrants(AskSparkFirst, BaseIncrementalGrants):
    pass


class TestSeedGrants(AskSparkFirst, BaseSeedGrants):
    pass


class TestSnapshotGrants(AskSparkFirst, BaseSnapshotGrants):
    pass


class TestInvalidGrants(AskSparkFirst, BaseInvalidGrants):
    pass
