"""dbt docs generate: the catalog dbt-spark reads from Spark's own metadata."""

import os

import pytest
from dbt.tests.adapter.basic import expected_catalog
from dbt.tests.adapter.basic.test_docs_generate import BaseDocsGenerate, BaseDocsGenReferences
from dbt.tests.util import get_artifact, run_dbt


def spark_catalog_types() -> dict:
    return {
        "id_type": "bigint",  # dbt-spark seeds a whole-number column as bigint
        "text_type": "string",
        "time_type": "timestamp",
        "view_type": "view",
        "table_type": "table",
        "model_stats": expected_catalog.no_stats(),
    }


class CatalogAsDbtExpects:
    """What AnyInteger lets through: columns numbered from 1, in the model's order."""

    def test_columns_numbered_from_one(self, project):
        run_dbt(["run"])
        run_dbt(["docs", "generate"])
        catalog = get_artifact(os.path.join(project.project_root, "target", "catalog.json"))
        columns = catalog["nodes"]["model.test.model"]["columns"].values()
        assert sorted((c["index"], c["name"]) for c in columns) == [
            (1, "id"),
            (2, "first_name"),
            (3, "email"),
            (4, "ip_address"),
            (5, "updated_at"),
        ]


class TestDocsGenerate(CatalogAsDbtExpects, BaseDocsGenerate):
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
