"""dbt's incremental adapter tests: every one runs through the fenced materialization."""

import pytest
from dbt.tests.adapter.incremental.test_incremental_merge_exclude_columns import (
    BaseMergeExcludeColumns,
)
from dbt.tests.adapter.incremental.test_incremental_microbatch import BaseMicrobatch
from dbt.tests.adapter.incremental.test_incremental_on_schema_change import (
    BaseIncrementalOnSchemaChange,
)
from dbt.tests.adapter.incremental.test_incremental_predicates import BaseIncrementalPredicates
from dbt.tests.adapter.incremental.test_incremental_unique_id import BaseIncrementalUniqueKey
from dbt.tests.util import run_dbt

# The Spark Thrift Server turns on spark.sql.datetime.java8API.enabled in every session
# (SparkSQLSessionManager), and Delta's metadata-only rewrite of `max(date_col)` then casts
# the LocalDate to java.sql.Date: ClassCastException (delta-io/delta#4201, unfixed in 4.4.1),
# with or without our VERSION AS OF, so stock dbt-spark fails the same. The base models'
# watermark is `max(last_visit_date)`; on thrift they run with that rewrite off.
DELTA_4201_WORKAROUND = "set spark.databricks.delta.optimizeMetadataQuery.enabled = false"


class TestIncrementalUniqueKey(BaseIncrementalUniqueKey):
    @pytest.fixture(scope="class")
    def project_config_update(self, dbt_profile_name):
        models = {"+incremental_strategy": "merge"}
        if dbt_profile_name == "thrift":
            models["+pre-hook"] = DELTA_4201_WORKAROUND
        return {"models": models}


# The base model is Postgres delete+insert; on Spark the same check runs as a merge, and
# merge needs bigint keys on both sides to match id 2's row.
PREDICATES_MODEL = """
{{ config(materialized='incremental', unique_key='id') }}
{% if not is_incremental() %}
select cast(1 as bigint) as id, 'hello' as msg, 'blue' as color
union all
select cast(2 as bigint) as id, 'goodbye' as msg, 'red' as color
{% else %}
-- id 2 is excluded by the predicate, so its new row is inserted next to the old one
select cast(1 as bigint) as id, 'hey' as msg, 'blue' as color
union all
select cast(2 as bigint) as id, 'yo' as msg, 'green' as color
union all
select cast(3 as bigint) as id, 'anyway' as msg, 'purple' as color
{% endif %}
"""


class TestIncrementalPredicatesMerge(BaseIncrementalPredicates):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "models": {
                "+incremental_predicates": ["dbt_internal_dest.id != 2"],
                "+incremental_strategy": "merge",
            }
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {"delete_insert_incremental_predicates.sql": PREDICATES_MODEL}


class TestPredicatesMerge(BaseIncrementalPredicates):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "models": {
                "+predicates": ["dbt_internal_dest.id != 2"],
                "+incremental_strategy": "merge",
            }
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {"delete_insert_incremental_predicates.sql": PREDICATES_MODEL}


class TestMergeExcludeColumns(BaseMergeExcludeColumns):
    pass


class TestIncrementalOnSchemaChange(BaseIncrementalOnSchemaChange):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+incremental_strategy": "merge", "+unique_key": "id"}}

    @pytest.mark.skip(
        reason="its second half drops a column from the model: Delta's MERGE `insert *` "
        "cannot fill the target column the source lacks (DELTA_MERGE_UNRESOLVED_EXPRESSION), "
        "as with stock dbt-spark; the first half runs in test_append_new_columns"
    )
    def test_run_incremental_append_new_columns(self, project):
        super().test_run_incremental_append_new_columns(project)

    def test_append_new_columns(self, project):
        self.run_incremental_append_new_columns(project)

    @pytest.mark.skip(
        reason="sync_all_columns removes columns, which dbt-spark's "
        "spark__alter_relation_add_remove_columns refuses on Delta; the refusal is asserted "
        "in test_sync_all_columns_refuses_to_drop"
    )
    def test_run_incremental_sync_all_columns(self, project):
        super().test_run_incremental_sync_all_columns(project)

    def test_sync_all_columns_refuses_to_drop(self, project):
        select = "model_a incremental_sync_all_columns incremental_sync_all_columns_target"
        run_dbt(["run", "--models", select, "--full-refresh"])
        results = run_dbt(["run", "--models", select], expect_pass=False)
        failed = [r for r in results if r.status == "error"]
        assert [r.node.name for r in failed] == ["incremental_sync_all_columns"]
        assert "does not support dropping columns" in failed[0].message


class TestMicrobatch(BaseMicrobatch):
    pass
