"""on_schema_change on the strategies dbt-spark runs it on (its own suite's variants of dbt's
setup class): append, insert_overwrite on parquet, and new columns whose names need quoting,
added by a fenced append and a fenced merge."""

import pytest
from dbt.tests.adapter.incremental.test_incremental_on_schema_change import (
    BaseIncrementalOnSchemaChangeSetup,
)
from dbt.tests.util import check_relations_equal, run_dbt


class IgnoreAndFail(BaseIncrementalOnSchemaChangeSetup):
    def test_run_incremental_ignore(self, project):
        self.run_twice_and_assert(
            "model_a incremental_ignore incremental_ignore_target",
            "incremental_ignore",
            "incremental_ignore_target",
            project,
        )

    def test_run_incremental_fail_on_schema_change(self, project):
        run_dbt(["run", "--models", "model_a incremental_fail", "--full-refresh"])
        results = run_dbt(["run", "--models", "model_a incremental_fail"], expect_pass=False)
        assert "Compilation Error" in results[1].message


class TestAppendOnSchemaChange(IgnoreAndFail):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+incremental_strategy": "append"}}


class TestInsertOverwriteOnSchemaChange(IgnoreAndFail):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "models": {
                "+file_format": "parquet",
                "+partition_by": "id",
                "+incremental_strategy": "insert_overwrite",
            }
        }


# Columns named by a keyword and with a dash: every statement must quote them.
QUOTED_SOURCE = """
{{ config(materialized='table') }}
select id, concat('v', id) as `select`, id * 10 as `field-with-dash`
from range(1, 7)
"""
QUOTED_INCREMENTAL = """
{{ config(materialized='incremental', on_schema_change='append_new_columns') }}
{% if is_incremental() %}
select id, `select`, `field-with-dash` from {{ ref('quoted_source') }}
where id > (select max(id) from {{ this }})
{% else %}
select id, `select` from {{ ref('quoted_source') }} where id <= 3
{% endif %}
"""
QUOTED_EXPECTED = """
{{ config(materialized='table') }}
select id, `select`, if(id <= 3, null, `field-with-dash`) as `field-with-dash`
from {{ ref('quoted_source') }}
"""


class QuotedNewColumns(BaseIncrementalOnSchemaChangeSetup):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "quoted_source.sql": QUOTED_SOURCE,
            "quoted_incremental.sql": QUOTED_INCREMENTAL,
            "quoted_expected.sql": QUOTED_EXPECTED,
        }

    def test_new_columns_with_names_that_need_quoting(self, project):
        run_dbt(["run"])
        results = run_dbt(["run"])
        check_relations_equal(project.adapter, ["quoted_incremental", "quoted_expected"])
        [second] = [r for r in results if r.node.name == "quoted_incremental"]
        # It reads {{ this }}: fenced on either strategy, its new column the fence's ALTER step.
        assert second.adapter_response.get("fence_outcome") == "committed"


class TestAppendOnSchemaChangeQuotedNames(QuotedNewColumns):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+incremental_strategy": "append"}}


class TestMergeOnSchemaChangeQuotedNames(QuotedNewColumns):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+incremental_strategy": "merge", "+unique_key": "id"}}
