"""dbt clone: dbt-spark's SHALLOW CLONE of each Delta table into another schema."""

import pytest
from dbt.tests.adapter.dbt_clone.test_dbt_clone import BaseClonePossible
from dbt.tests.util import run_dbt

NON_EMPTY_CLONE = (
    "its --full-refresh clones again over the tables it cloned: open-source Delta refuses "
    "CREATE OR REPLACE TABLE ... SHALLOW CLONE onto a non-empty table "
    "(DELTA_UNSUPPORTED_NON_EMPTY_CLONE); the SQL is dbt-spark's clone macro, unchanged here. "
    "The rest runs, and the refusal is asserted, in test_clone_then_refused_over_its_clones"
)


class TestClonePossible(BaseClonePossible):
    @pytest.fixture(autouse=True)
    def drop_other_schemas(self, project, other_schema):
        # The base's seeds schema and clone target outlive the project's own schema.
        yield
        for schema in (f"{project.test_schema}_seeds", other_schema):
            project.run_sql(f"drop schema if exists {schema} cascade")

    @pytest.mark.skip(reason=NON_EMPTY_CLONE)
    def test_can_clone_true(self, project, unique_schema, other_schema):
        super().test_can_clone_true(project, unique_schema, other_schema)

    def test_clone_then_refused_over_its_clones(self, project, other_schema):
        project.create_test_schema(other_schema)
        self.run_and_save_state(project.project_root, with_snapshot=True)
        clone = ["clone", "--state", "state", "--target", "otherschema"]
        assert len(run_dbt(clone)) == 4
        relations = project.adapter.list_relations(database=project.database, schema=other_schema)
        assert sorted(str(r.type) for r in relations) == ["table", "table", "table", "view"]
        assert all("no-op" in r.message.lower() for r in run_dbt(clone))
        refused = run_dbt([*clone, "--full-refresh"], expect_pass=False)
        failed = {r.node.name: r.message for r in refused if r.status == "error"}
        assert sorted(failed) == ["my_cool_snapshot", "seed", "table_model"]  # the view passes
        assert all("DELTA_UNSUPPORTED_NON_EMPTY_CLONE" in message for message in failed.values())
