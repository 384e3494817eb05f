"""`dbt run --empty` and `dbt seed --empty`: the models' and seeds' tables with no rows."""

import pytest
from dbt.tests.adapter.empty.test_empty import (
    BaseTestEmpty,
    BaseTestEmptyInlineSourceRef,
    BaseTestEmptySeedFlag,
)
from dbt.version import __version__ as dbt_version

# `dbt seed --empty` (and `dbt build --empty` emptying seeds) came with dbt-core 1.12.0.
SEED_EMPTY = pytest.mark.skipif(
    tuple(int(n) for n in dbt_version.split(".")[:2]) < (1, 12),
    reason=f"dbt-core {dbt_version}'s `dbt seed` has no --empty (\"No such option '--empty'\"): "
    "it came in 1.12.0 (dbt-core #12716)",
)


class TestEmptyFlag(BaseTestEmpty):
    pass


class TestEmptyInlineSourceRef(BaseTestEmptyInlineSourceRef):
    pass


class TestEmptySeedFlag(BaseTestEmptySeedFlag):
    @SEED_EMPTY
    def test_seed_empty_creates_table_with_zero_rows(self, project):
        super().test_seed_empty_creates_table_with_zero_rows(project)

    @SEED_EMPTY
    def test_seed_empty_preserves_column_types(self, project):
        super().test_seed_empty_preserves_column_types(project)

    @SEED_EMPTY
    def test_build_empty_with_seed(self, project):
        super().test_build_empty_with_seed(project)
