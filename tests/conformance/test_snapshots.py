"""dbt's snapshot adapter tests. Their fixture SQL is Postgres; what Spark SQL or Delta cannot
run is rewritten below, and nothing else.

The rewrites, each named where it is used:
- Spark has no database above the schema: dbt-spark's `database` is None, so the fixtures'
  `{database}.{schema}` and `{{target.database}}.{{target.schema}}` would name a catalog `None`.
- Spark has no `text` type (UNSUPPORTED_DATATYPE); `string` is its name.
- A `create table` without `using` makes a parquet table in Spark 4, and the tests then UPDATE
  and DELETE from it, which only Delta supports; so the tables are `using delta`.
- Spark runs one statement per call; two Postgres statements in one string run as a Spark 4 SQL
  script (`BEGIN ... END`).
- Delta refuses a DEFAULT in ALTER TABLE ADD COLUMN on an existing table (see
  `SparkFact.add_fact_column` and `ADD_COLUMN_WITH_VALUE`).
"""

import datetime
import re

import pytest
from dbt.tests.adapter.simple_snapshot import fixtures
from dbt.tests.adapter.simple_snapshot import new_record_dbt_valid_to_current as valid_to_current
from dbt.tests.adapter.simple_snapshot import new_record_timestamp_mode as timestamp_mode
from dbt.tests.adapter.simple_snapshot import test_ephemeral_snapshot_hard_deletes as ephemeral
from dbt.tests.adapter.simple_snapshot import test_various_configs as various_configs
from dbt.tests.adapter.simple_snapshot.new_record_check_mode import (
    BaseSnapshotNewRecordCheckMode,
)
from dbt.tests.adapter.simple_snapshot.new_record_dbt_valid_to_current import (
    BaseSnapshotNewRecordDbtValidToCurrent,
)
from dbt.tests.adapter.simple_snapshot.new_record_timestamp_mode import (
    BaseSnapshotNewRecordTimestampMode,
)
from dbt.tests.adapter.simple_snapshot.test_ephemeral_snapshot_hard_deletes import (
    BaseSnapshotEphemeralHardDeletes,
    BaseSnapshotNewColumnSpecificCheckCols,
    BaseSnapshotNewColumnTimestampStrategy,
    BaseSnapshotNewColumnWithDeletes,
)
from dbt.tests.adapter.simple_snapshot.test_snapshot import BaseSimpleSnapshot, BaseSnapshotCheck
from dbt.tests.adapter.simple_snapshot.test_various_configs import (
    BaseSnapshotColumnNames,
    BaseSnapshotColumnNamesFromDbtProject,
    BaseSnapshotDbtValidToCurrent,
    BaseSnapshotInvalidColumnNames,
    BaseSnapshotMultiUniqueKey,
)
from dbt.tests.util import (
    check_relations_equal,
    relation_from_name,
    run_dbt,
    run_sql_with_adapter,
)


def spark_sql(sql: str) -> str:
    """A Postgres fixture statement as Spark SQL: no database, no `text`, Delta tables."""
    sql = sql.replace("{database}.{schema}", "{schema}")
    sql = sql.replace("{{target.database}}.{{target.schema}}", "{{ target.schema }}")
    sql = sql.replace("::text", "::string").replace(" TEXT", " STRING")
    if sql.lstrip().lower().startswith("create table"):
        sql = re.sub(r"\)\s*;?\s*$", ") using delta", sql)
    return sql


def script(sql: str) -> str:
    """Several statements in one string, run by Spark as one SQL script."""
    return f"BEGIN\n{spark_sql(sql)}\nEND"


# --- test_snapshot.py: `fact` is cloned from the seed and changed by UPDATE/DELETE/ALTER ---


class SparkFact:
    def create_fact_from_seed(self, where: str | None = None):
        # Spark SQL: common.clone_table's `create table ... as select` is parquet; fact is
        # updated and deleted from below, which needs Delta.
        fact = relation_from_name(self.project.adapter, "fact")
        seed = relation_from_name(self.project.adapter, "seed")
        self.project.run_sql(f"drop table if exists {fact}")
        self.project.run_sql(
            f"create table {fact} using delta as select * from {seed} where {where or '1 = 1'}"
        )

    def add_fact_column(self, column: str | None = None, definition: str | None = None):
        # Delta: "DEFAULT values are not supported when adding new columns to previously
        # existing Delta tables" (WRONG_COLUMN_DEFAULTS_FOR_DELTA_ALTER_TABLE_ADD_COLUMN_NOT_
        # SUPPORTED); a column added without one is null in every row, as `default null` is.
        super().add_fact_column(column, definition.replace(" default null", ""))


class TestSimpleSnapshot(SparkFact, BaseSimpleSnapshot):
    pass


class TestSnapshotCheck(SparkFact, BaseSnapshotCheck):
    pass


# --- test_various_configs.py: the tests run their module's SQL constants directly ---

VARIOUS_CONFIGS_SQL = {
    "create_seed_sql": spark_sql(fixtures.create_seed_sql),
    "create_snapshot_expected_sql": spark_sql(fixtures.create_snapshot_expected_sql),
    "populate_snapshot_expected_sql": spark_sql(fixtures.populate_snapshot_expected_sql),
    "populate_snapshot_expected_valid_to_current_sql": spark_sql(
        fixtures.populate_snapshot_expected_valid_to_current_sql
    ),
    "invalidate_sql": script(fixtures.invalidate_sql),
    "update_sql": spark_sql(fixtures.update_sql),
    "update_with_current_sql": spark_sql(fixtures.update_with_current_sql),
    "create_multi_key_seed_sql": spark_sql(fixtures.create_multi_key_seed_sql),
    "create_multi_key_snapshot_expected_sql": spark_sql(
        fixtures.create_multi_key_snapshot_expected_sql
    ),
    "populate_multi_key_snapshot_expected_sql": spark_sql(
        fixtures.populate_multi_key_snapshot_expected_sql
    ),
    "invalidate_multi_key_sql": script(fixtures.invalidate_multi_key_sql),
    "update_multi_key_sql": spark_sql(fixtures.update_multi_key_sql),
}


class SparkVariousConfigsSql:
    """These base tests read Postgres SQL from test_various_configs' module globals, not from
    fixtures; the Spark versions above stand in for them while the class runs, so the test
    bodies and their assertions are dbt's own."""

    @pytest.fixture(scope="class", autouse=True)
    def spark_fixture_sql(self):
        with pytest.MonkeyPatch.context() as patch:
            for name, sql in VARIOUS_CONFIGS_SQL.items():
                patch.setattr(various_configs, name, sql)
            yield


class SparkSnapshotActual(SparkVariousConfigsSql):
    @pytest.fixture(scope="class")
    def snapshots(self):
        # Spark SQL: no database above the schema.
        return {"snapshot.sql": spark_sql(fixtures.snapshot_actual_sql)}


class TestSnapshotColumnNames(SparkSnapshotActual, BaseSnapshotColumnNames):
    pass


class TestSnapshotColumnNamesFromDbtProject(
    SparkSnapshotActual, BaseSnapshotColumnNamesFromDbtProject
):
    pass


class TestSnapshotInvalidColumnNames(SparkSnapshotActual, BaseSnapshotInvalidColumnNames):
    pass


VALID_TO_CURRENT = datetime.datetime(2099, 12, 31, 0, 0)


class TestSnapshotDbtValidToCurrent(SparkSnapshotActual, BaseSnapshotDbtValidToCurrent):
    @pytest.mark.skip(
        reason="it picks rows 0, 9 and 20 of a `select` with no `order by` and expects "
        "Postgres' heap order (unchanged rows, closed rows, new rows); Delta's MERGE rewrites "
        "the snapshot's file in its sort-merge join's order, by test_scd_id, so row 9 is "
        "id 8's current row (2099-12-31), not id 10's closed one. The same checks, rows "
        "named by id, run in test_valid_to_current_by_id"
    )
    def test_valid_to_current(self, project):
        super().test_valid_to_current(project)

    def test_valid_to_current_by_id(self, project):
        """dbt's test_valid_to_current, step for step; its rows 0, 9 and 20 are, on Postgres,
        id 1, id 10 before the update and id 10 after it."""
        project.run_sql(various_configs.create_seed_sql)
        project.run_sql(various_configs.create_snapshot_expected_sql)
        project.run_sql(various_configs.seed_insert_sql)
        project.run_sql(various_configs.populate_snapshot_expected_valid_to_current_sql)

        results = run_dbt(["snapshot"])
        assert len(results) == 1
        valid_to = self.valid_to_by_id(project)
        assert valid_to[1] == [VALID_TO_CURRENT]
        assert valid_to[10] == [VALID_TO_CURRENT]

        project.run_sql(various_configs.invalidate_sql)
        project.run_sql(various_configs.update_with_current_sql)

        results = run_dbt(["snapshot"])
        assert len(results) == 1
        valid_to = self.valid_to_by_id(project)
        assert valid_to[1] == [VALID_TO_CURRENT]
        # id 10's original row is closed at its update; its new row is current
        assert valid_to[10] == [datetime.datetime(2016, 8, 20, 16, 44, 49), VALID_TO_CURRENT]

        check_relations_equal(project.adapter, ["snapshot_actual", "snapshot_expected"])

    @staticmethod
    def valid_to_by_id(project) -> dict[int, list[datetime.datetime]]:
        rows = run_sql_with_adapter(
            project.adapter,
            "select id, test_valid_to from {schema}.snapshot_actual order by id, test_valid_from",
            "all",
        )
        valid_to: dict[int, list[datetime.datetime]] = {}
        for id_, to in rows:
            valid_to.setdefault(id_, []).append(to)
        return valid_to


class TestSnapshotMultiUniqueKey(SparkVariousConfigsSql, BaseSnapshotMultiUniqueKey):
    pass


# --- hard_deletes: new_record ---


class SparkNewRecordSql:
    @pytest.fixture(scope="class")
    def snapshots(self):
        # Spark SQL: no database above the schema.
        return {"snapshot.sql": spark_sql(timestamp_mode._snapshot_actual_sql)}

    @pytest.fixture(scope="class")
    def seed_new_record_mode_statements(self):
        # Spark SQL: no database, no `text`, Delta tables.
        return [spark_sql(sql) for sql in timestamp_mode._seed_new_record_mode_statements]

    @pytest.fixture(scope="class")
    def update_sql(self):
        # Spark SQL: no database, no `text`.
        return spark_sql(timestamp_mode._update_sql)

    @pytest.fixture(scope="class")
    def delete_sql(self):
        # Spark SQL: no database above the schema.
        return spark_sql(timestamp_mode._delete_sql)

    @pytest.fixture(scope="class")
    def reinsert_sql(self):
        # Spark SQL: no database above the schema.
        return spark_sql(timestamp_mode._reinsert_sql)


# hard_deletes: new_record reads each column of a deletion row from the snapshot only if
# get_columns_in_relation (the macro) names it; dbt-spark's returns unnamed DESCRIBE rows, so stock
# dbt-spark inserts the row with id null (dbt-labs/dbt-adapters#1401). fenced_spark's macro
# returns the adapter's parsed columns (macros/adapters/columns.sql): these pass because of it.


class TestSnapshotNewRecordTimestampMode(SparkNewRecordSql, BaseSnapshotNewRecordTimestampMode):
    pass


class TestSnapshotNewRecordCheckMode(SparkNewRecordSql, BaseSnapshotNewRecordCheckMode):
    pass


class TestSnapshotNewRecordDbtValidToCurrent(BaseSnapshotNewRecordDbtValidToCurrent):
    @pytest.fixture(scope="class")
    def snapshots(self):
        # Spark SQL: no database above the schema.
        return {"snapshot.sql": spark_sql(valid_to_current._snapshot_actual_sql)}

    @pytest.fixture(scope="class")
    def seed_new_record_mode_statements(self):
        # Spark SQL: no database, Delta table.
        return [spark_sql(sql) for sql in valid_to_current._seed_new_record_mode_statements]

    @pytest.fixture(scope="class")
    def delete_sql(self):
        # Spark SQL: no database above the schema.
        return spark_sql(valid_to_current._delete_sql)


# --- an ephemeral model as the snapshot's relation, and a column added to its source ---

# Delta: "DEFAULT values are not supported when adding new columns to previously existing Delta
# tables; please add the column without a default value first" (WRONG_COLUMN_DEFAULTS_FOR_DELTA_
# ALTER_TABLE_ADD_COLUMN_NOT_SUPPORTED). So the column is added bare and its existing rows get
# the default by UPDATE, in one script.
ADD_COLUMN_WITH_VALUE = """
alter table {schema}.src_customers add column dummy_column VARCHAR(50);
update {schema}.src_customers set dummy_column = 'dummy_value';
"""


class SparkSourceSql:
    @pytest.fixture(scope="class")
    def source_create_sql(self):
        # Spark SQL: no database, Delta table (a row is deleted from it).
        return spark_sql(ephemeral._source_create_sql)

    @pytest.fixture(scope="class")
    def source_insert_sql(self):
        # Spark SQL: no database above the schema.
        return spark_sql(ephemeral._source_insert_sql)

    @pytest.fixture(scope="class")
    def source_alter_sql(self):
        # Delta: no DEFAULT in ADD COLUMN (ADD_COLUMN_WITH_VALUE).
        return script(ADD_COLUMN_WITH_VALUE)


class TestSnapshotEphemeralHardDeletes(SparkSourceSql, BaseSnapshotEphemeralHardDeletes):
    pass


class TestSnapshotNewColumnTimestampStrategy(
    SparkSourceSql, BaseSnapshotNewColumnTimestampStrategy
):
    pass


class TestSnapshotNewColumnSpecificCheckCols(
    SparkSourceSql, BaseSnapshotNewColumnSpecificCheckCols
):
    pass


class TestSnapshotNewColumnWithDeletes(SparkSourceSql, BaseSnapshotNewColumnWithDeletes):
    @pytest.fixture(scope="class")
    def source_delete_sql(self):
        # Spark SQL: no database above the schema.
        return spark_sql(ephemeral._source_delete_sql)
