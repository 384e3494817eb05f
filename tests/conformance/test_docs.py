"""dbt docs generate: the catalog dbt-spark reads from Spark's own metadata."""

import os

import pytest
from dbt.tests.adapter.basic import expected_catalog
from dbt.tests.adapter.basic.test_docs_generate import BaseDocsGenerate, BaseDocsGenReferences
from dbt.tests.util import AnyInteger, get_artifact, get_connection, run_dbt

from dbt.adapters.fenced_spark.catalog import DETAIL_STATS


def spark_catalog_types() -> dict:
    return {
        "id_type": "bigint",  # dbt-spark seeds a whole-number column as bigint
        "text_type": "string",
        "time_type": "timestamp",
        "view_type": "view",
        "table_type": "table",
        "model_stats": expected_catalog.no_stats(),
    }


def delta_stats() -> dict:
    """A Delta table's stats: its size and files from DESCRIBE DETAIL (catalog.py)."""
    stats = {
        key: {
            "id": key,
            "label": label,
            "value": AnyInteger(),
            "description": text,
            "include": True,
        }
        for key, label, text in DETAIL_STATS.values()
    }
    has = {**expected_catalog.no_stats()["has_stats"], "value": True}
    return {**stats, "has_stats": has}


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


class DeltaStatsAsDetailSays:
    """The seed's size and files in catalog.json are what DESCRIBE DETAIL says of the table."""

    def test_delta_stats_are_describe_details(self, project):
        run_dbt(["seed"])
        run_dbt(["docs", "generate"])
        catalog = get_artifact(os.path.join(project.project_root, "target", "catalog.json"))
        stats = catalog["nodes"]["seed.test.seed"]["stats"]
        with get_connection(project.adapter):
            sql = f"describe detail {project.test_schema}.seed"
            _, table = project.adapter.execute(sql, fetch=True)
        detail = dict(zip(table.column_names, table.rows[0], strict=True))
        assert detail["sizeInBytes"] > 0 and detail["numFiles"] > 0
        assert stats["bytes"]["value"] == detail["sizeInBytes"]
        assert stats["files"]["value"] == detail["numFiles"]


class TestDocsGenerate(DeltaStatsAsDetailSays, CatalogAsDbtExpects, BaseDocsGenerate):
    @pytest.fixture(scope="class")
    def expected_catalog(self, project, profile_user):
        # Its models are views; the seed is a Delta table.
        return expected_catalog.base_expected_catalog(
            project, role=profile_user, **spark_catalog_types(), seed_stats=delta_stats()
        )


class TestDocsGenReferences(BaseDocsGenReferences):
    @pytest.fixture(scope="class")
    def expected_catalog(self, project, profile_user):
        # The seed and ephemeral_summary are Delta tables; view_summary is a view.
        types = {**spark_catalog_types(), "model_stats": delta_stats()}
        return expected_catalog.expected_references_catalog(
            project,
            role=profile_user,
            bigint_type="bigint",
            **types,
            seed_stats=delta_stats(),
            view_summary_stats=expected_catalog.no_stats(),
        )
