"""dbt's model contracts and constraints, as Delta supports them.

dbt-spark creates the table with `create or replace table ... using delta as select`, then
adds the constraints Delta enforces (NOT NULL, CHECK) with ALTER TABLE; primary, foreign and
unique keys are not supported by open-source Delta, so the schemas here leave them out.
"""

import pytest
from dbt.tests.adapter.constraints import fixtures
from dbt.tests.adapter.constraints.test_constraints import (
    BaseConstraintQuotedColumn,
    BaseConstraintsRollback,
    BaseConstraintsRuntimeDdlEnforcement,
    BaseIncrementalConstraintsColumnsEqual,
    BaseIncrementalConstraintsRollback,
    BaseIncrementalConstraintsRuntimeDdlEnforcement,
    BaseIncrementalContractSqlHeader,
    BaseModelConstraintsRuntimeEnforcement,
    BaseTableConstraintsColumnsEqual,
    BaseTableContractSqlHeader,
    BaseViewConstraintsColumnsEqual,
)


def spark_yml(yml: str) -> str:
    """Spark has no `text` type, and Delta no primary key."""
    return yml.replace("text", "string").replace("primary key", "")


# The statement dbt-spark runs; the NOT NULL and CHECK constraints follow as ALTER TABLEs.
CREATE_AS_SELECT = """
create or replace table <model_identifier>
    using delta
    as
select
  id,
  color,
  date_day
from
(
    -- depends_on: <foreign_key_model_identifier>
    select
    'blue' as color,
    1 as id,
    '2019-01-01' as date_day ) as model_subq
"""


class SparkTypes:
    @pytest.fixture
    def string_type(self):
        return "STRING"

    @pytest.fixture
    def int_type(self):
        return "INT"

    @pytest.fixture
    def data_types(self, int_type, string_type):
        # sql_column_value, schema_data_type, error_data_type
        return [
            ["1", "int", "INT"],
            ["'1'", "string", "STRING"],
            ["true", "boolean", "BOOLEAN"],
            ["cast('2019-01-01' as date)", "date", "DATE"],
            ["cast('2019-01-01' as timestamp)", "timestamp", "TIMESTAMP"],
            ["array('a', 'b')", "array<string>", "ARRAY<STRING>"],
            ["array(1, 2)", "array<int>", "ARRAY<INT>"],
            ["cast(6.45 as decimal(4, 2))", "decimal(4,2)", "DECIMAL(4,2)"],
        ]


class TestTableConstraintsColumnsEqual(SparkTypes, BaseTableConstraintsColumnsEqual):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "my_model_wrong_order.sql": fixtures.my_model_wrong_order_sql,
            "my_model_wrong_name.sql": fixtures.my_model_wrong_name_sql,
            "constraints_schema.yml": spark_yml(fixtures.model_schema_yml),
        }


class TestViewConstraintsColumnsEqual(SparkTypes, BaseViewConstraintsColumnsEqual):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "my_model_wrong_order.sql": fixtures.my_model_view_wrong_order_sql,
            "my_model_wrong_name.sql": fixtures.my_model_view_wrong_name_sql,
            "constraints_schema.yml": spark_yml(fixtures.model_schema_yml),
        }


class TestIncrementalConstraintsColumnsEqual(SparkTypes, BaseIncrementalConstraintsColumnsEqual):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "my_model_wrong_order.sql": fixtures.my_model_incremental_wrong_order_sql,
            "my_model_wrong_name.sql": fixtures.my_model_incremental_wrong_name_sql,
            "constraints_schema.yml": spark_yml(fixtures.model_schema_yml),
        }


class TestTableConstraintsRuntimeDdlEnforcement(BaseConstraintsRuntimeDdlEnforcement):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "my_model.sql": fixtures.my_model_wrong_order_depends_on_fk_sql,
            "foreign_key_model.sql": fixtures.foreign_key_model_sql,
            "constraints_schema.yml": spark_yml(fixtures.model_fk_constraint_schema_yml),
        }

    @pytest.fixture(scope="class")
    def expected_sql(self):
        return CREATE_AS_SELECT


class TestIncrementalConstraintsRuntimeDdlEnforcement(
    BaseIncrementalConstraintsRuntimeDdlEnforcement
):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "my_model.sql": fixtures.my_model_incremental_wrong_order_depends_on_fk_sql,
            "foreign_key_model.sql": fixtures.foreign_key_model_sql,
            "constraints_schema.yml": spark_yml(fixtures.model_fk_constraint_schema_yml),
        }

    @pytest.fixture(scope="class")
    def expected_sql(self):
        return CREATE_AS_SELECT


class DeltaViolations:
    @pytest.fixture(scope="class")
    def expected_error_messages(self):
        return [
            "DELTA_NEW_CHECK_CONSTRAINT_VIOLATION",
            "DELTA_NEW_NOT_NULL_VIOLATION",
            "DELTA_VIOLATE_CONSTRAINT_WITH_VALUES",
            "DELTA_NOT_NULL_CONSTRAINT_VIOLATED",
        ]

    def assert_expected_error_messages(self, error_message, expected_error_messages):
        # One violation is enough: Delta stops at the first constraint the data breaks.
        assert any(message in error_message for message in expected_error_messages)


class TestTableConstraintsRollback(DeltaViolations, BaseConstraintsRollback):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "my_model.sql": fixtures.my_model_sql,
            "constraints_schema.yml": spark_yml(fixtures.model_schema_yml),
        }

    # The table is replaced first and constrained after (ALTER TABLE), so the failed run
    # leaves the new rows: Delta has no multi-statement transaction to roll back.
    @pytest.fixture(scope="class")
    def expected_color(self):
        return "red"


class TestIncrementalConstraintsRollback(DeltaViolations, BaseIncrementalConstraintsRollback):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "my_model.sql": fixtures.my_incremental_model_sql,
            "constraints_schema.yml": spark_yml(fixtures.model_schema_yml),
        }


class TestModelConstraintsRuntimeEnforcement(BaseModelConstraintsRuntimeEnforcement):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "my_model.sql": fixtures.my_model_wrong_order_depends_on_fk_sql,
            "foreign_key_model.sql": fixtures.foreign_key_model_sql,
            "constraints_schema.yml": spark_yml(fixtures.constrained_model_schema_yml),
        }

    @pytest.fixture(scope="class")
    def expected_sql(self):
        return CREATE_AS_SELECT


class TestConstraintQuotedColumn(BaseConstraintQuotedColumn):
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "my_model.sql": fixtures.my_model_with_quoted_column_name_sql,
            "constraints_schema.yml": spark_yml(fixtures.model_quoted_column_schema_yml).replace(
                '"from"', "`from`"
            ),
        }

    @pytest.fixture(scope="class")
    def expected_sql(self):
        return """
create or replace table <model_identifier>
    using delta
    as
select
  id,
  `from`,
  date_day
from
(
    select
    'blue' as `from`,
    1 as id,
    '2019-01-01' as date_day ) as model_subq
"""


class TestTableContractSqlHeader(BaseTableContractSqlHeader):
    pass


class TestIncrementalContractSqlHeader(BaseIncrementalContractSqlHeader):
    pass
