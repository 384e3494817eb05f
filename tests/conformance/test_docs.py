"""dbt docs generate: the catalog dbt-spark reads from Spark's own metadata."""

import pytest
from dbt.tests.adapter.basic import expected_catalog
from dbt.tests.adapter.basic.test_docs_generate import BaseDocsGenerate, BaseDocsGenReferences


def spark_catalog_types() -> dict:
    return {
        "id_type": "int",
        "text_type": "string",
        "time_type": "timestamp",
        "view_type": "view",
        "table_type": "table",
        "model_stats": expected_catalog.no_stats(),
    }


class TestDocsGenerate(BaseDocsGenerate):
    @pytest.fixture(scope="class")
    def expected_catalog(self, project, profile_user):
        return expected_catalog.base_expected_catalog(
            project, role=profile_user, **spark_catalog_types()
        )


class TestDocsGenReferences(BaseDocsGenReferences):
    @pytest.fixture(scope="class")
    def expected_catalog(self, project, profile_user):
        return expected_catalog.expected_references_catalog(
            project, role=profile_user, bigint_type="bigint", **spark_catalog_types()
        )
