"""Hostile names through the fence, on real Spark + Delta.

Each fenced strategy runs twice on a table whose schema, name, columns, location and model
name need quoting: the first run creates it, the second goes through the whole fence
(capture, pin, pre-check, tagged write, verify) and commits. A foreign commit landing just
before the write then forces the revert, so RESTORE runs with the hostile name too.

What Spark and Delta themselves refuse (Spark 4.1, Delta 4.4.1, Hive metastore on Derby),
so these tests do not use it; docs/limits.md says the same:

- Table and schema names: anything but ASCII letters, digits and `_`. Spark's session catalog
  checks every name it creates: a space, `'`, `"`, `;`, `%`, `-`, `/`, `.`, `$` or a letter
  such as `ü` or `注` fails with `[INVALID_SCHEMA_OR_RELATION_NAME] ... is not a valid name
  for tables/schemas. Valid names only contain alphabet characters, numbers and _`; a
  backquote with `[INVALID_ATTRIBUTE_NAME_SYNTAX]`, a `:` with `URISyntaxException: Relative
  path in absolute URI`. What remains hostile is a keyword (`select`, `order`), a leading
  digit, or digits only (`42`, which must be quoted).
- Column names with a space or one of `,;{}()=`, a tab or a newline: Delta refuses them
  (`[DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES]`) unless the table uses column mapping
  (`delta.columnMapping.mode = 'name'`), as these tables do.
- A column name with a backquote in a MERGE: Delta expands `update set *` / `insert *`
  (which dbt-spark's merge always writes) by re-parsing each name unescaped and fails with
  `[INVALID_ATTRIBUTE_NAME_SYNTAX]`. The append and replace_where tables have one.
"""

import json
import re
import uuid
from dataclasses import dataclass

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.fenced_spark.fence.delta.history import SqlHistory
from dbt.adapters.fenced_spark.fence.delta.log_tail import LogTail
from dbt.adapters.fenced_spark.fence.delta.sql_log import SqlLog
from dbt.adapters.fenced_spark.fence.delta.words import USER_METADATA
from dbt.adapters.fenced_spark.fence.history import FenceTag
from dbt.adapters.fenced_spark.fence.protocol import set_conf_sql
from dbt.adapters.fenced_spark.fence_sql import FenceSql
from tests.functional.lakehouse import ForeignWriter, history, rows
from tests.harness.runner import SessionRunner


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def jinja(text: str) -> str:
    """A Jinja string literal."""
    return json.dumps(text, ensure_ascii=False)


# Column names: quotes, space, semicolon and non-ASCII letters; the strict strategies' key
# also has a backquote (Delta's MERGE * refuses one, see above).
MERGE_KEY = 'it\'s "注文"; id'
KEY = "k`ey; 'ünï'"
VAL = 'say "注文" now'
DAY = "d a;y `ünï`"
COLUMN_MAPPING = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "2",
    "delta.minWriterVersion": "5",
}
# A table location with a space, a percent sign and non-ASCII letters: the session's fence
# reads the Delta log there.
LOCATION = "per%cent dir/ünï 注文"
# The race: a foreign writer's commit right before our write statement.
WRITE = re.compile(r"^\s*(merge|insert)\s+into\b", re.IGNORECASE | re.MULTILINE)

MERGE = f"""
{{{{ config(materialized='incremental', incremental_strategy='merge', alias='select',
            unique_key={jinja(q(MERGE_KEY))}) }}}}
select id as {q(MERGE_KEY)}, concat('r', '{{{{ var("round", 0) }}}}') as {q(VAL)}
from range({{{{ var('lo', 0) }}}}, {{{{ var('hi', 3) }}}})
{{% if is_incremental() %}}
where id >= (select coalesce(min({q(MERGE_KEY)}), 0) from {{{{ this }}}})
{{% endif %}}
"""

APPEND = f"""
{{{{ config(materialized='incremental', incremental_strategy='append_if_unchanged',
            alias='1st_insert') }}}}
select id as {q(KEY)}, 'a' as {q(VAL)} from range(0, {{{{ var('hi', 3) }}}})
{{% if is_incremental() %}}
where id > (select coalesce(max({q(KEY)}), -1) from {{{{ this }}}})
{{% endif %}}
"""

REPLACE = f"""
{{{{ config(materialized='incremental', incremental_strategy='replace_where', alias='42',
            incremental_predicates=[{jinja(q(DAY) + " >= ")} ~ var('since', 0)]) }}}}
select cast(id % 4 as int) as {q(DAY)}, {{{{ var('round', 0) }}}} as {q(VAL)}
from range(0, 8) where id % 4 >= {{{{ var('since', 0) }}}}
"""


@dataclass(frozen=True)
class Case:
    model: str  # the model's name, and so the `node` in the tag
    alias: str
    strategy: str
    columns: list
    batch: dict  # vars of the fenced run
    foreign: str  # values of the foreign writer's INSERT
    after: list  # rows after the fenced run
    refused: list  # rows after the raced run: the first run's and the foreign one


CASES = {
    "merge": Case(
        "merge_ünï_注文",
        "select",
        "merge",
        [MERGE_KEY, VAL],
        {"round": 1, "lo": 1, "hi": 5},
        "(100, 'foreign')",
        [(0, "r0"), (1, "r1"), (2, "r1"), (3, "r1"), (4, "r1")],
        [(0, "r0"), (1, "r0"), (2, "r0"), (100, "foreign")],
    ),
    "append_if_unchanged": Case(
        'append_it\'s_"q"_`bq`',
        "1st_insert",
        "append_if_unchanged",
        [KEY, VAL],
        {"hi": 5},
        "(100, 'foreign')",
        [(0, "a"), (1, "a"), (2, "a"), (3, "a"), (4, "a")],
        [(0, "a"), (1, "a"), (2, "a"), (100, "foreign")],
    ),
    "replace_where": Case(
        "replace_${spark.app.name}",
        "42",
        "replace_where",
        [DAY, VAL],
        {"since": 2, "round": 1},
        "(2, 9)",  # in the range it replaces: a conflict
        [(0, 0), (0, 0), (1, 0), (1, 0), (2, 1), (2, 1), (3, 1), (3, 1)],
        [(0, 0), (0, 0), (1, 0), (1, 0), (2, 0), (2, 0), (2, 9), (3, 0), (3, 0)],
    ),
}
MODELS = {"merge": MERGE, "append_if_unchanged": APPEND, "replace_where": REPLACE}


def invocation_id(project) -> str:
    with open(f"{project.project_root}/target/run_results.json") as f:
        return json.load(f)["metadata"]["invocation_id"]


@pytest.fixture
def fence_sql(monkeypatch):
    """Every statement the fence runs, and every DESCRIBE HISTORY it reads through SQL."""
    seen: dict[str, list[str]] = {"executed": [], "history": []}
    execute, read = FenceSql.execute, FenceSql.history

    def recorded_execute(self, sql):
        seen["executed"].append(sql)
        execute(self, sql)

    def recorded_history(self, table, limit):
        seen["history"].append(table)
        return read(self, table, limit)

    monkeypatch.setattr(FenceSql, "execute", recorded_execute)
    monkeypatch.setattr(FenceSql, "history", recorded_history)
    return seen


def model_sql_statements(executed: list[str]) -> list[str]:
    """The fence's statements that carry the model SQL: a staging view, or the write whose
    source it is (on_schema_change 'ignore')."""
    write = re.compile(r"^\s*(--[^\n]*\n\s*)*(merge|insert)\s+into\b", re.I)
    return [s for s in executed if "temporary view" in s or write.match(s)]


class TestHostileNames:
    """Quoting on; schema `order`; tables `select`, `1st_insert` and `42`, at a location
    with a space, a percent sign and non-ASCII letters; hostile columns and model names."""

    @pytest.fixture(scope="class")
    def unique_schema(self):
        return "order"

    @pytest.fixture(scope="class")
    def project_config_update(self, lakehouse):
        return {
            "quoting": {"database": False, "schema": True, "identifier": True},
            "models": {
                "+tblproperties": COLUMN_MAPPING,
                "+location_root": f"{lakehouse}/{LOCATION}",
            },
        }

    @pytest.fixture(scope="class")
    def models(self):
        return {f"{CASES[name].model}.sql": sql for name, sql in MODELS.items()}

    def start(self, project, spark, name):
        case = CASES[name]
        run_dbt(["run", "--full-refresh", "--select", case.model])
        table = f"{q(project.test_schema)}.{q(case.alias)}"
        return case, table, history(spark, table)[-1].version

    def contents(self, spark, case, table):
        columns = ", ".join(q(c) for c in case.columns)
        return rows(spark, f"select {columns} from {table} order by 1, 2")

    @pytest.mark.parametrize("name", list(CASES))
    def test_fenced_run_commits_and_tags(self, project, spark, dbt_profile_name, fence_sql, name):
        case, table, vb = self.start(project, spark, name)
        location = spark.sql(f"describe detail {table}").collect()[0].location
        assert location.endswith(f"/{LOCATION}/{case.alias}"), location
        fence_sql["executed"].clear()

        results = run_dbt(["run", "--select", case.model, "--vars", json.dumps(case.batch)])

        response = results.results[0].adapter_response
        assert response["fence_outcome"] == "committed", response
        assert response["read_version"] == vb and response["commit_version"] == vb + 1
        assert self.contents(spark, case, table) == case.after
        last = history(spark, table)[-1]
        assert last.version == vb + 1 and last.read_version == vb
        tag = json.loads(last.user_metadata)
        # Every write records its scope (a later run judges a strict write left standing by
        # it), hostile names as written; only replace_where lets Delta retry.
        scope = tag.pop("scope", None)
        retries = tag.pop("delta_retries", False)
        assert scope is not None, tag
        if case.strategy == "merge":
            assert len(scope["keys"]) == 1 and not retries
        elif case.strategy == "replace_where":
            assert scope["replaces"] and retries
        else:
            assert scope["any_change"] and not scope["keys"] and not retries  # strict
        assert tag == {
            "dbt_fenced_spark": 1,
            "invocation_id": invocation_id(project),
            "node": f"model.test.{case.model}",
            "strategy": case.strategy,
            "read_version": vb,
            "attempt": 1,
            "step": "write",
            "expected_version": vb,
        }
        # The model's read of {{ this }} was pinned to vB where the model SQL ran: the write.
        staged = model_sql_statements(fence_sql["executed"])
        if name != "replace_where":
            assert f"{table} VERSION AS OF {vb}" in staged[0]
        if dbt_profile_name == "session":
            assert fence_sql["history"] == []  # the log reader found the log at that location

    @pytest.mark.parametrize("name", list(CASES))
    def test_race_forces_restore_with_the_hostile_name(
        self, project, spark, fence_sql, monkeypatch, name
    ):
        case, table, vb = self.start(project, spark, name)
        writer = ForeignWriter(spark)
        foreign = f"insert into {table} values {case.foreign}"
        fired: list[str] = []
        execute = FenceSql.execute

        def racing(self, sql):
            if WRITE.search(sql) and not fired:
                fired.append(sql)
                writer.sql(foreign)
            execute(self, sql)

        monkeypatch.setattr(FenceSql, "execute", racing)

        results = run_dbt(
            ["run", "--select", case.model, "--vars", json.dumps(case.batch)], expect_pass=False
        )

        assert len(fired) == 1
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == [
            "WRITE",
            "MERGE" if name == "merge" else "WRITE",
            "RESTORE",
        ]
        landed, our, restore = after
        assert landed.tag is None and landed.version == vb + 1  # the race fired before ours
        assert our.tag["step"] == "write" and our.tag["node"] == f"model.test.{case.model}"
        assert restore.tag["step"] == "revert" and restore.read_version == our.version
        restore_sql = [s for s in fence_sql["executed"] if s.startswith("RESTORE")]
        assert restore_sql == [f"RESTORE TABLE {table} TO VERSION AS OF {vb + 1}"]
        message = results.results[0].message
        assert f"written as v{our.version}, then reverted by RESTORE (v{restore.version})" in (
            message
        )
        assert self.contents(spark, case, table) == case.refused


WATERMARK = """
{{ config(materialized='incremental', incremental_strategy='append', alias='Select') }}
select id from range(0, {{ var('hi', 3) }})
{% if is_incremental() %}
where id > (select coalesce(max(id), -1) from {{ this }})
{% endif %}
"""


class TestKeywordNamesUnquoted:
    """dbt-spark's default, no quoting: `{{ this }}` is `From.Select`, which Spark takes as
    is. The fence must still see that the model reads it, or the append would run unfenced."""

    @pytest.fixture(scope="class")
    def unique_schema(self):
        return "From"

    @pytest.fixture(scope="class")
    def models(self):
        return {"watermark.sql": WATERMARK}

    def test_append_reading_this_is_fenced(self, project, spark, fence_sql):
        run_dbt(["run", "--full-refresh"])
        table = "`from`.`select`"
        vb = history(spark, table)[-1].version
        fence_sql["executed"].clear()

        run_dbt(["run", "--vars", json.dumps({"hi": 5})])

        last = history(spark, table)[-1]
        assert last.version == vb + 1
        assert last.tag["strategy"] == "append_if_unchanged"  # fenced: it reads {{ this }}
        assert last.tag["read_version"] == vb
        staged = model_sql_statements(fence_sql["executed"])
        assert f"From.Select VERSION AS OF {vb}" in staged[0]
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(5)]


HOSTILE_TEXT = [
    "plain",
    "back`quote and ``two``",
    'it\'s "quoted"',
    "semi; colon -- dash /* comment */",
    "${spark.app.name} ${env:HOME} $x",
    "ünï 注文",
    "back\\slash \\u0024 new\nline\ttab",
    "= equals =",
]


class NoFallback:
    def history(self, table, limit):
        raise AssertionError(f"the log reader fell back to DESCRIBE HISTORY {table}")


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_tag_survives_set_and_a_commit(spark, lakehouse, text):
    """The tag through set_conf_sql and Spark's SET, then through a commit to a table at a
    hostile location, read back from DESCRIBE HISTORY and from the log reader."""
    session = spark.newSession()
    tag = FenceTag(f"inv {text}", f"model.p.{text}", "merge", 7, 2, "write")
    session.sql(set_conf_sql(USER_METADATA, tag.to_json()))
    value = {r[0]: r[1] for r in session.sql(f"SET {USER_METADATA}").collect()}[USER_METADATA]
    assert value == tag.to_json()
    assert FenceTag.parse(value) == tag

    table = "hostile_set.tagged"
    location = f"{lakehouse}/{LOCATION}/set {uuid.uuid4().hex}"
    session.sql("create schema if not exists hostile_set")
    session.sql(f"drop table if exists {table}")
    session.sql(f"create table {table} (id int) using delta location '{location}'")
    session.sql(f"insert into {table} values (1)")
    session.sql(f"RESET {USER_METADATA}")
    last = history(spark, table)[-1]
    assert last.operation == "WRITE" and FenceTag.parse(last.user_metadata) == tag

    if hasattr(session, "sparkContext"):  # the embedded session: its log reader too
        logged = LogTail(session, fallback=SqlHistory(NoFallback())).commits_since(table, 0)
        described = SqlHistory(SessionRunner(session)).commits_since(table, 0)
        assert [c.user_metadata for c in logged] == [c.user_metadata for c in described]
        assert [c.tag for c in logged] == [tag]
        # Thrift's and Connect's reader, by path, at a location the catalog prints encoded.
        by_path = SqlLog(SessionRunner(session))
        by_path.fallback = SqlHistory(NoFallback())
        assert [c.tag for c in by_path.commits_since(table, 0)] == [tag]
        assert by_path.latest_version(table) == last.version
