"""docs/errors.md, checked: every entry's message is produced here on real Spark + Delta and
must equal the doc's block, once normalised. `UPDATE_ERRORS_DOC=1` rewrites the blocks from
the messages instead, and fails each test whose block it changed (review the diff, run again):
a generator run never passes over a changed message. The headings and the prose around them
stay hand-written. Each refusal's test also checks what the message claims of our write
against the table's history, so the doc is never a message's only check."""

import json
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from dbt.exceptions import ParsingError
from dbt.tests.util import run_dbt
from dbt_common.exceptions import CompilationError

from dbt.adapters.fenced_spark import nodes
from dbt.adapters.fenced_spark.fence import protocol
from dbt.adapters.fenced_spark.fence.delta.words import USER_METADATA
from dbt.adapters.fenced_spark.fence.history import FenceTag
from dbt.adapters.fenced_spark.fence.state import set_conf_sql
from tests.conftest import REPO
from tests.functional.lakehouse import (
    ForeignAroundWrite,
    ForeignAt,
    ForeignWriter,
    dead_run_merge,
    history,
    long_spark_job,
    ours,
    response_of,
    rows,
)
from tests.functional.test_merge_races import ORDERS
from tests.functional.test_node_transaction import COMPILE_TIME_WATERMARK
from tests.functional.test_snapshots import AUDIT_2, SHIP_1, SNAPSHOT
from tests.functional.test_strict_races import APPENDED

DOC = Path(REPO) / "docs" / "errors.md"
UPDATE = os.environ.get("UPDATE_ERRORS_DOC") == "1"

pytestmark = pytest.mark.skip_profile(
    "thrift",
    reason="the catalogue holds the session's words; over thrift, errors come wrapped by Hive",
)

HEADING = re.compile(r"^### (E\d{3}) .*$", re.M)
SECTION_END = re.compile(r"^#{1,3} ", re.M)
BLOCK = re.compile(r"^```text\n(.*?)^```\n", re.M | re.S)


def sections(doc: str) -> dict[str, tuple[int, int]]:
    """Each entry's span in the doc: from its heading to the next heading."""
    spans = {}
    for heading in HEADING.finditer(doc):
        following = SECTION_END.search(doc, heading.end())
        spans[heading.group(1)] = (heading.end(), following.start() if following else len(doc))
    return spans


def doc_blocks(doc: str) -> dict[str, str | None]:
    blocks: dict[str, str | None] = {}
    for entry, (start, end) in sections(doc).items():
        block = BLOCK.search(doc, start, end)
        blocks[entry] = block.group(1).rstrip("\n") if block else None
    return blocks


def rewrite_block(doc: str, entry: str, text: str) -> str:
    start, end = sections(doc)[entry]
    fenced = f"```text\n{text}\n```\n"
    block = BLOCK.search(doc, start, end)
    if block:
        return doc[: block.start()] + fenced + doc[block.end() :]
    body = doc[start:end].rstrip("\n")
    return doc[:start] + body + "\n\n" + fenced + "\n" + doc[end:]


# What varies per run, machine or version, and what the doc shows instead.
def normalise(text: str, schema: str, paths: dict[str, str]) -> str:
    for path, placeholder in paths.items():
        text = re.sub(r"(file:)?" + re.escape(path.rstrip("/")), placeholder, text)
    text = re.sub(re.escape(schema), "analytics", text, flags=re.I)
    text = re.sub(r"__fence_[0-9a-f]{12}", "__fence_<hash>", text)
    text = re.sub(r"invocation [0-9a-f-]{36}", "invocation <invocation_id>", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?", "<timestamp>", text)
    text = re.sub(r"(Apache-Spark|Delta-Lake)/[\w.-]+", r"\1/<version>", text)
    # A foreign commit's userName: none on the session ("an unnamed writer"), the client's
    # user over thrift. Our own commits say "dbt-fenced-spark <node>".
    text = re.sub(r" by (?!dbt-fenced-spark )(.+?) via ", " by <user> via ", text)
    # Spark's words may end in a line of spaces (a plan's last): no trailing blank line.
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).rstrip("\n")


COVERED: set[str] = set()


def produces(*entries: str) -> Callable:
    COVERED.update(entries)
    return lambda test: test


@pytest.fixture
def catalogue(project, lakehouse) -> Callable[[str, str], None]:
    """check(entry, message): the normalised message must be the doc's block for `entry`."""
    paths = {lakehouse: "<lakehouse>", str(project.project_root): "<project>"}

    def check(entry: str, message: str) -> None:
        actual = normalise(message, project.test_schema, paths)
        doc = DOC.read_text()
        blocks = doc_blocks(doc)
        assert entry in blocks, f"docs/errors.md has no `### {entry} ...` heading: add one"
        if UPDATE and blocks[entry] != actual:
            DOC.write_text(rewrite_block(doc, entry, actual))
            pytest.fail(f"{entry}: docs/errors.md rewritten; review its diff, then run again")
        assert actual == blocks[entry], (
            f"{entry}'s message changed; if that is intended, re-run with UPDATE_ERRORS_DOC=1 "
            "and review the diff of docs/errors.md"
        )

    return check


def model(config: str, sql: str = "select id, 'v' as v from range(1, 3)") -> str:
    return f"{{{{ config(materialized='incremental', {config}) }}}}\n{sql}"


def table_exists(spark, table: str) -> bool:
    schema, name = table.split(".")
    return bool(spark.sql(f"show tables in {schema} like '{name}'").collect())


def message_of(results) -> str:
    [result] = results.results
    assert str(result.status) == "error"
    return result.message


def our_write(message: str) -> str:
    """What a refusal says became of our write (its `this run's write:` line)."""
    found = re.search(r"^\s*this run's write: (.*)$", message, re.M)
    assert found, f"no `this run's write:` line in:\n{message}"
    return found.group(1)


def run_vars(**values) -> list[str]:
    return ["--vars", json.dumps(values)]


# Config errors: fence_validate_config, before any SQL runs, on every run.
CONFIG_ERRORS = {
    "E101": ("no_key", "incremental_strategy='insert'"),
    "E102": (
        "parquet_merge",
        "incremental_strategy='merge', unique_key='id', file_format='parquet'",
    ),
    "E103": (
        "bad_predicates",
        "incremental_strategy='merge', unique_key='id', incremental_predicates={'a': 1}",
    ),
    "E104": ("bad_strategy", "incremental_strategy='upsert', unique_key='id'"),
    "E105": ("bad_fenced", "incremental_strategy='merge', unique_key='id', fenced='no'"),
    "E106": ("no_predicate", "incremental_strategy='replace_where'"),
    "E107": ("bad_retries", "incremental_strategy='append', fence_retries=-1"),
    "E108": ("unfenced_cas", "incremental_strategy='append_if_unchanged', fenced=false"),
    "E115": (
        "bad_accept",
        "incremental_strategy='merge', unique_key='id', fence_accept_unverified='v7'",
    ),
    "E117": ("bad_batch", "incremental_strategy='append', fence_batch_id=['2026-01-02']"),
    "E122": (
        "sync_merge",
        "incremental_strategy='merge', unique_key='id', not_matched_by_source_action='delete'",
    ),
    "E123": ("delete_insert", "incremental_strategy='delete+insert', unique_key='id'"),
}
COVERED.update(CONFIG_ERRORS)

# One merge model for the races: every knob a var, so each test states its race.
RACED = """
{{ config(
    materialized='incremental',
    incremental_strategy=var('strategy', 'merge'),
    unique_key='id',
    on_schema_change=var('on_schema_change', 'ignore'),
    fence_retries=var('retries', 0),
    fence_accept_unverified=var('accept', none),
    pre_hook=var('pre_hooks', []),
) }}
select id, status, amount
from values {{ var('batch', "(1, 'open', 10), (2, 'open', 20), (3, 'open', 30)") }}
  as batch(id, status, amount)
{% if is_incremental() and var('reads_self', true) %}
where id not in (select id from {{ this }} where status = 'never')
{% endif %}
"""
RACED_MODELS = [
    "overtaken",
    "overtaken_fenced",
    "reverted",
    "not_reverted",
    "retried",
    "replaced",
    "dropped",
    "reformatted",
    "widened",
    "unverified",
    "restore_window",
    "undo_window",
    "crashed",
]
# An idempotent reload: the pre-hook deletes what the model then writes again.
RELOADED = RACED.replace(
    "pre_hook=var('pre_hooks', [])",
    'pre_hook="{% if is_incremental() %}delete from {{ this }} where id = 3{% endif %}"',
)
SHIP_1_AND_ADD_4 = "(1, 'shipped', 11), (4, 'open', 40)"
NEW_TABLE = "select 7 as id, 'new' as status, 0 as amount"
REPLACED = "CREATE OR REPLACE TABLE AS SELECT"

# A project's own microbatch macro makes dbt run microbatch models without batches.
OWN_MICROBATCH_MACRO = """
{% macro get_incremental_microbatch_sql(arg_dict) %}
  {{ return(get_incremental_append_sql(arg_dict)) }}
{% endmacro %}
"""


class TestErrorsCatalogue:
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"name": "my_project"}

    @pytest.fixture(scope="class")
    def macros(self):
        return {"own_microbatch.sql": OWN_MICROBATCH_MACRO}

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"orders_snap.sql": SNAPSHOT}

    @pytest.fixture(scope="class")
    def models(self):
        config_errors = {f"{name}.sql": model(config) for name, config in CONFIG_ERRORS.values()}
        return {
            **config_errors,
            "legacy.sql": model("incremental_strategy='safeappend'"),
            "unbatched.sql": model(
                "incremental_strategy='microbatch', event_time='ts', batch_size='day', "
                "begin='2026-01-01'",
                "select id, timestamp'2026-01-01 00:00:00' as ts from range(1, 3)",
            ),
            "was_parquet.sql": model("incremental_strategy='merge', unique_key='id'"),
            # A header that opens the query (no `;`) before a query with a WITH of its own.
            "header_with.sql": model(
                "incremental_strategy='merge', unique_key='id'",
                "{% call set_sql_header(config) %}with extra as (select 1 as n){% endcall %}"
                "with base as (select id from range(1, 3)) select id, 'v' as v from base",
            ),
            # A header statement that Spark refuses: a table that is not there.
            "header_fails.sql": model(
                "incremental_strategy='merge', unique_key='id'",
                "{% call set_sql_header(config) %}cache table no_such_table;{% endcall %}"
                "select id, 'v' as v from range(1, 3)",
            ),
            "key_not_selected.sql": model("incremental_strategy='merge', unique_key=['id', 'ID2']"),
            "key_not_selected_raced.sql": model(
                "incremental_strategy='merge', unique_key=['id', 'ID2'], fence_retries=2"
            ),
            # Duplicate keys only once the table has grown: attempt 1 has none, its retry does.
            "dupes_on_retry.sql": model(
                "incremental_strategy='merge', unique_key='id', fence_retries=1",
                "select 1 as id, 'a' as v union all select 1 as id, 'b' as v from {{ this }} "
                "where (select count(*) from {{ this }}) > 1",
            ),
            **{f"{name}.sql": RACED for name in RACED_MODELS},
            "reloaded.sql": RELOADED,
            "conflicted.sql": ORDERS,
            "appended.sql": APPENDED,
            # A user's own idempotent-write confs, set in a pre-hook (after the first run's).
            "own_txn.sql": model(
                "incremental_strategy='merge', unique_key='id', pre_hook=["
                '"{% if is_incremental() %}SET spark.databricks.delta.write.txnAppId=nightly'
                '{% endif %}", '
                '"{% if is_incremental() %}SET spark.databricks.delta.write.txnVersion=5'
                '{% endif %}"]'
            ),
            "dupes.sql": model(
                "incremental_strategy='merge', unique_key='id'",
                "select 1 as id, 'a' as v union all select 1 as id, 'b' as v",
            ),
            "outside.sql": model(
                "incremental_strategy='replace_where', incremental_predicates=['id >= 2']",
                "select id, 'v' as v from range(1, 3)",
            ),
            "compile_time.sql": COMPILE_TIME_WATERMARK,
            "double_fired.sql": model(
                "incremental_strategy='append', fence_batch_id=var('ds', '2026-01-01')",
                'select \'{{ var("ds", "2026-01-01") }}\' as ds, id from range(1, 3)',
            ),
        }

    def fresh(self, project, spark, name: str) -> tuple[str, int]:
        """The model's table, created anew: versions in the messages start from v0 each time."""
        table = f"{project.test_schema}.{name}"
        spark.sql(f"drop table if exists {table}")
        run_dbt(["run", "--select", name])
        return table, history(spark, table)[-1].version

    # -- E1xx: config and target checks, before any write ----------------------------------

    @pytest.mark.parametrize("entry", list(CONFIG_ERRORS))
    def test_config_error(self, project, spark, catalogue, entry):
        name, _ = CONFIG_ERRORS[entry]
        results = run_dbt(["run", "--select", name], expect_pass=False)
        catalogue(entry, message_of(results))
        assert not table_exists(spark, f"{project.test_schema}.{name}")

    @produces("E109")
    def test_safeappend_warns(self, project, spark, catalogue):
        warnings = []

        def collect(event) -> None:
            if event.info.name == "JinjaLogWarning":
                warnings.append(event.info.msg)

        run_dbt(["run", "--select", "legacy"], callbacks=[collect])
        catalogue("E109", "\n".join(warnings))
        assert history(spark, f"{project.test_schema}.legacy")[-1].operation.startswith("CREATE")

    @produces("E116")
    def test_snapshot_config_error(self, project, spark, catalogue):
        table = f"{project.test_schema}.orders_snap"
        spark.sql(f"drop table if exists {table}")
        results = run_dbt(["snapshot", *run_vars(retries=-1)], expect_pass=False)
        catalogue("E116", message_of(results))
        assert not table_exists(spark, table)

    @produces("E111")
    def test_microbatch_without_batches(self, project, spark, catalogue):
        table, vb = self.fresh(project, spark, "unbatched")
        results = run_dbt(["run", "--select", "unbatched"], expect_pass=False)
        catalogue("E111", message_of(results))
        assert history(spark, table)[-1].version == vb

    @produces("E113")
    def test_existing_non_delta_table(self, project, spark, catalogue):
        table = f"{project.test_schema}.was_parquet"
        spark.sql(f"drop table if exists {table}")
        spark.sql(f"create table {table} using parquet as select 1 as id, 'x' as v")
        results = run_dbt(["run", "--select", "was_parquet"], expect_pass=False)
        catalogue("E113", message_of(results))
        assert rows(spark, f"select * from {table}") == [(1, "x")]

    @produces("E120")
    def test_header_with_before_a_query_with(self, project, spark, catalogue):
        results = run_dbt(["run", "--select", "header_with"], expect_pass=False)
        catalogue("E120", message_of(results))
        assert not table_exists(spark, f"{project.test_schema}.header_with")

    @produces("E121")
    def test_a_header_statement_fails(self, project, spark, catalogue):
        results = run_dbt(["run", "--select", "header_fails"], expect_pass=False)
        catalogue("E121", message_of(results))
        assert not table_exists(spark, f"{project.test_schema}.header_fails")

    @produces("E114")
    def test_unique_key_not_selected(self, project, spark, catalogue):
        table = f"{project.test_schema}.key_not_selected"
        spark.sql(f"drop table if exists {table}")
        spark.sql(f"create table {table} using delta as select 1 as id, 'x' as v")
        before = history(spark, table)
        results = run_dbt(["run", "--select", "key_not_selected"], expect_pass=False)
        catalogue("E114", message_of(results))
        assert history(spark, table) == before
        response = response_of(project, "key_not_selected")
        assert (response["fence_outcome"], response["standing"]) == ("never_written", [])

    def test_unique_key_not_selected_on_the_first_run(self, project, spark):
        # Before dbt-spark's CREATE (which never uses the key): E114's words, from another macro.
        table = f"{project.test_schema}.key_not_selected"
        spark.sql(f"drop table if exists {table}")
        results = run_dbt(["run", "--select", "key_not_selected"], expect_pass=False)
        message = normalise(message_of(results), project.test_schema, {})
        words = doc_blocks(DOC.read_text())["E114"]
        assert words is not None
        assert message.split("\n\n  > ")[0] == words.split("\n\n  > ")[0]
        assert "> called by macro fence_validate_first_build" in message
        assert not table_exists(spark, table)

    def test_unique_key_not_selected_after_a_foreign_commit(self, project, spark, monkeypatch):
        # Another writer's UPDATE after vB: the pre-check's join of the model's rows on the key
        # fails before the write can. The model's error, not a conflict, and no retry.
        waits: list[float] = []
        monkeypatch.setattr(
            protocol.Fence, "wait_turns", lambda self, state, turns, slot: waits.append(turns)
        )
        table, vb, message = self.raced_on_one_row(
            project,
            spark,
            monkeypatch,
            "key_not_selected_raced",
            "update {t} set v = 'y'",
            "UPDATE",
        )
        assert "`unique_key` names ID2, which the model does not select" in message
        assert "Nothing was written." in message
        assert waits == []
        assert rows(spark, f"select id, v from {table}") == [(1, "y")]
        response = response_of(project, "key_not_selected_raced")
        assert response["fence_outcome"] == "never_written"
        assert (response["read_version"], response["standing"]) == (vb, [])

    # -- E2xx: the fence refuses (FenceViolation) ---------------------------------------------

    def raced(self, project, spark, monkeypatch, name: str, foreign: list[str], **race):
        """Run `name` once more with `race` (vars), after a fresh first run; another session
        commits `foreign` right after the run captured vB."""
        table, vb = self.fresh(project, spark, name)
        writer = ForeignAt(monkeypatch, spark, "vb", [sql.format(t=table) for sql in foreign])
        results = run_dbt(["run", "--select", name, *run_vars(**race)], expect_pass=False)
        assert writer.fired == 1
        return table, vb, results

    def raced_on_one_row(
        self, project, spark, monkeypatch, name: str, foreign: str, operation: str
    ) -> tuple[str, int, str]:
        """`name` run on a table of one row (1, 'x'), made by hand; another session commits
        `foreign` right after the run captured vB, and lands (read back): the run's message."""
        table = f"{project.test_schema}.{name}"
        spark.sql(f"create or replace table {table} using delta as select 1 as id, 'x' as v")
        vb = history(spark, table)[-1].version
        writer = ForeignAt(monkeypatch, spark, "vb", foreign.format(t=table))
        results = run_dbt(["run", "--select", name], expect_pass=False)
        assert writer.fired == 1
        after = self.landed_after(spark, table, vb)
        assert [(e.operation, e.tag) for e in after] == [(operation, None)]
        return table, vb, message_of(results)

    def landed_after(self, spark, table: str, vb: int):
        return [e for e in history(spark, table) if e.version > vb]

    @produces("E201")
    def test_foreign_commit_before_the_write(self, project, spark, monkeypatch, catalogue):
        table, vb, results = self.raced(
            project,
            spark,
            monkeypatch,
            "overtaken",
            ["update {t} set status = 'cancelled' where id = 1"],
            batch=SHIP_1_AND_ADD_4,
        )
        after = self.landed_after(spark, table, vb)
        assert [(e.operation, e.tag) for e in after] == [("UPDATE", None)]  # the race fired
        assert our_write(message_of(results)).startswith("never written")
        assert response_of(project, "overtaken") == {
            "_message": "MERGE refused",
            "fence_outcome": "never_written",
            "read_version": vb,
            "landed": [after[0].version],
            "conflicts": [after[0].version],
            "tolerated": [],
            "steps": [],
            "standing": [],
            "rolled_back": [],
        }
        catalogue("E201", message_of(results))
        assert rows(spark, f"select status from {table} order by id") == [
            ("cancelled",),
            ("open",),
            ("open",),
        ]

    @produces("E202")
    def test_foreign_commit_during_a_strict_write(self, project, spark, catalogue):
        table, vb = self.fresh(project, spark, "appended")
        writer = ForeignWriter(spark)
        writer.when(long_spark_job(spark, 1.0), f"insert into {table} values (100)")
        race = run_vars(lo=3, hi=5, slow_ms=5000)
        results = run_dbt(["run", "--select", "appended", *race], expect_pass=False)
        writer.join()
        after = self.landed_after(spark, table, vb)
        assert [(e.operation, e.tag) for e in after] == [("WRITE", None)]
        assert our_write(message_of(results)).startswith("never written")
        catalogue("E202", message_of(results))
        assert rows(spark, f"select id from {table} order by id") == [(0,), (1,), (2,), (100,)]

    @produces("E203")
    def test_foreign_commit_during_a_merge(self, project, spark, catalogue):
        table, vb = self.fresh(project, spark, "conflicted")
        writer = ForeignWriter(spark)
        cancel = f"update {table} set status = 'cancelled' where id = 1"
        writer.when(long_spark_job(spark, 1.0), cancel)
        race = run_vars(batch=SHIP_1_AND_ADD_4, slow_ms=6000)
        results = run_dbt(["run", "--select", "conflicted", *race], expect_pass=False)
        writer.join()
        after = self.landed_after(spark, table, vb)
        assert [(e.operation, e.tag) for e in after] == [("UPDATE", None)]
        message = message_of(results)
        assert f"v{after[0].version} UPDATE" in message and "DELTA_CONCURRENT" in message
        assert our_write(message).startswith("never written")
        catalogue("E203", message)
        # As it says: their cancel stands, none of our batch (ship 1, add 4) is in.
        assert rows(spark, f"select id, status from {table} order by id") == rows(
            spark, f"select id, status from {table} version as of {after[0].version} order by id"
        )
        assert rows(spark, f"select status from {table} where id = 1") == [("cancelled",)]

    @produces("E218")
    def test_another_fenced_write_overtook_it(self, project, spark, monkeypatch, catalogue):
        table, vb = self.fresh(project, spark, "overtaken_fenced")
        # Another fenced writer, as its session stands during its write: its tag and the
        # fence's SetTransaction (a version above any this table holds).
        tag = FenceTag("other-run", "model.test.overtaken_fenced", "merge", vb, 1, "write", vb)
        writer = ForeignWriter(spark, tag=tag.to_json())
        writer.sql("set spark.databricks.delta.write.txnAppId=dbt-fenced-spark")
        writer.sql("set spark.databricks.delta.write.txnVersion=1000000")
        runners = self.around_the_write(
            monkeypatch,
            spark,
            lambda _: f"update {table} set status = 'cancelled' where id = 1",
            writer=writer,
        )
        race = run_vars(batch=SHIP_1_AND_ADD_4)
        results = run_dbt(["run", "--select", "overtaken_fenced", *race], expect_pass=False)
        assert sum(r.fired for r in runners) == 1
        after = self.landed_after(spark, table, vb)
        # The race fired: theirs landed after our pre-check; Delta skipped ours, no commit.
        assert [(e.operation, e.tag and e.tag["invocation_id"]) for e in after] == [
            ("UPDATE", "other-run")
        ]
        message = message_of(results)
        assert our_write(message).startswith("never written")
        assert "another fenced write committed after this one's pre-check" in message
        assert response_of(project, "overtaken_fenced")["standing"] == []
        catalogue("E218", message)
        assert rows(spark, f"select status from {table} where id = 1") == [("cancelled",)]

    def around_the_write(
        self, monkeypatch, spark, before, after=None, before_restore=None, writer=None
    ) -> list[ForeignAroundWrite]:
        """Every fence runner of the next dbt run commits `before(n)` right before its write
        statement starts (after the pre-check), `after` right after it lands, and
        `before_restore` right before a revert's RESTORE starts."""
        writer = writer or ForeignWriter(spark)
        runners: list[ForeignAroundWrite] = []

        def runner(connections, described=None):
            runners.append(
                ForeignAroundWrite(
                    connections,
                    writer,
                    before,
                    after,
                    before_restore=before_restore,
                    described=described,
                )
            )
            return runners[-1]

        monkeypatch.setattr(nodes, "FenceSql", runner)
        return runners

    @produces("E204")
    def test_written_then_reverted(self, project, spark, monkeypatch, catalogue):
        table, vb = self.fresh(project, spark, "reverted")
        runners = self.around_the_write(
            monkeypatch, spark, lambda _: f"update {table} set status = 'cancelled' where id = 1"
        )
        race = run_vars(batch=SHIP_1_AND_ADD_4)
        results = run_dbt(["run", "--select", "reverted", *race], expect_pass=False)
        assert sum(r.fired for r in runners) == 1
        after = self.landed_after(spark, table, vb)
        assert [e.operation for e in after] == ["UPDATE", "MERGE", "RESTORE"]
        assert after[0].tag is None and after[1].read_version == after[0].version
        assert our_write(message_of(results)).startswith(
            f"written as v{after[1].version}, then reverted by RESTORE (v{after[2].version})"
        )
        response = response_of(project, "reverted")
        assert response["fence_outcome"] == "written_and_reverted"
        assert (response["read_version"], response["conflicts"]) == (vb, [after[0].version])
        assert (response["commit_version"], response["revert_version"]) == (
            after[1].version,
            after[2].version,
        )
        assert response["standing"] == []
        catalogue("E204", message_of(results))
        assert rows(spark, f"select id, status from {table} order by id") == [
            (1, "cancelled"),
            (2, "open"),
            (3, "open"),
        ]

    @produces("E205")
    def test_written_not_reverted(self, project, spark, monkeypatch, catalogue):
        table, vb = self.fresh(project, spark, "not_reverted")
        runners = self.around_the_write(
            monkeypatch,
            spark,
            lambda _: f"update {table} set status = 'cancelled' where id = 1",
            after=f"insert into {table} values (9, 'late', 90)",
        )
        race = run_vars(batch=SHIP_1_AND_ADD_4)
        results = run_dbt(["run", "--select", "not_reverted", *race], expect_pass=False)
        assert sum(r.fired for r in runners) == 1
        after = self.landed_after(spark, table, vb)
        assert [e.operation for e in after] == ["UPDATE", "MERGE", "WRITE"]
        assert ours(after) == [after[1]] and after[2].tag is None  # landed on top of ours
        assert our_write(message_of(results)).startswith(
            f"written as v{after[1].version} and NOT reverted"
        )
        response = response_of(project, "not_reverted")
        assert response["fence_outcome"] == "written_not_reverted"
        assert (response["commit_version"], response["conflicts"]) == (
            after[1].version,
            [after[0].version],
        )
        assert response["standing"] == [after[1].version] and "revert_version" not in response
        catalogue("E205", message_of(results))
        assert rows(spark, f"select id, status from {table} order by id") == [
            (1, "shipped"),
            (2, "open"),
            (3, "open"),
            (4, "open"),
            (9, "late"),
        ]

    @produces("E212")
    def test_a_commit_after_our_pre_hook_step(self, project, spark, monkeypatch, catalogue):
        table, vb = self.fresh(project, spark, "reloaded")
        # Key 3, which the reload writes: a conflict.
        late = f"insert into {table} values (3, 'late', 90)"
        writer = ForeignAt(monkeypatch, spark, "staging", late)  # after the pre-hook's DELETE
        results = run_dbt(["run", "--select", "reloaded"], expect_pass=False)
        assert writer.fired == 1
        after = self.landed_after(spark, table, vb)
        steps = [(e.operation, e.tag and e.tag["step"]) for e in after]
        assert steps == [("DELETE", "pre_hook"), ("WRITE", None)]
        catalogue("E212", message_of(results))
        # The response says the same as the message: never written, but our DELETE stands.
        response = response_of(project, "reloaded")
        assert response["fence_outcome"] == "never_written"
        assert response["steps"] == [f"v{after[0].version} DELETE (pre_hook)"]
        assert response["standing"] == [after[0].version]
        assert response["conflicts"] == [after[1].version]
        # As the message says: our DELETE stands, and their row.
        assert rows(spark, f"select id, status from {table} order by id") == [
            (1, "open"),
            (2, "open"),
            (3, "late"),
        ]

    def race_the_revert(self, project, spark, monkeypatch, name, late_rows):
        """A MERGE refused by an UPDATE that landed before it, with one of `late_rows`
        inserted right before each of the revert's RESTOREs: the run's results, the commits
        after vB, and the rows the message says stand."""
        table, vb = self.fresh(project, spark, name)
        runners = self.around_the_write(
            monkeypatch,
            spark,
            lambda _: f"update {table} set status = 'cancelled' where id = 1",
            before_restore=[f"insert into {table} values {row}" for row in late_rows],
        )
        race = run_vars(batch=SHIP_1_AND_ADD_4)
        results = run_dbt(["run", "--select", name, *race], expect_pass=False)
        assert sum(r.fired for r in runners) == 1
        after = self.landed_after(spark, table, vb)
        assert our_write(message_of(results)).startswith(
            f"written as v{after[1].version} and NOT reverted"
        )
        # Ours and the first late row stand, whatever the undo took.
        assert rows(spark, f"select id, status from {table} order by id") == [
            (1, "shipped"),
            (2, "open"),
            (3, "open"),
            (4, "open"),
            (9, "late"),
        ]
        return results, after

    def next_run_refuses(self, project, name, merge):
        """Our write stands below the fence's own RESTOREs: the node's next run refuses to
        build on it (E213), as the message's "fix the table by hand" warns."""
        run_dbt(["run", "--select", name, *run_vars(batch=SHIP_1_AND_ADD_4)], expect_pass=False)
        response = response_of(project, name)
        assert response["fence_outcome"] == "earlier_run_unresolved"
        assert response["unresolved_version"] == merge.version

    @produces("E214")
    def test_a_commit_just_before_the_revert(self, project, spark, monkeypatch, catalogue):
        results, after = self.race_the_revert(
            project, spark, monkeypatch, "restore_window", ["(9, 'late', 90)"]
        )
        assert [e.operation for e in after] == ["UPDATE", "MERGE", "WRITE", "RESTORE", "RESTORE"]
        assert after[2].tag is None and after[3].read_version == after[2].version
        catalogue("E214", message_of(results))
        self.next_run_refuses(project, "restore_window", after[1])

    @produces("E217")
    def test_a_commit_just_before_the_undo(self, project, spark, monkeypatch, catalogue):
        results, after = self.race_the_revert(
            project, spark, monkeypatch, "undo_window", ["(9, 'late', 90)", "(10, 'later', 100)"]
        )
        operations = ["UPDATE", "MERGE", "WRITE", "RESTORE", "WRITE", "RESTORE"]
        assert [e.operation for e in after] == operations
        _, _, late, restore, later, undo = after
        assert restore.read_version == late.version and later.read_version == restore.version
        assert undo.read_version == later.version
        catalogue("E217", message_of(results))
        response = response_of(project, "undo_window")
        assert (response["fence_outcome"], response["rolled_back"]) == (
            "written_not_reverted",
            [later.version],
        )
        # The commit the message names as missing holds the later row.
        table = f"{project.test_schema}.undo_window"
        assert (10, "later") in rows(
            spark, f"select id, status from {table} version as of {later.version}"
        )
        self.next_run_refuses(project, "undo_window", after[1])

    @produces("E215")
    def test_a_snapshot_refused(self, project, spark, monkeypatch, catalogue):
        table = f"{project.test_schema}.orders_snap"
        spark.sql(f"drop table if exists {table}")
        run_dbt(["snapshot"])
        vb = history(spark, table)[-1].version
        writer = ForeignAt(monkeypatch, spark, "staged", AUDIT_2.format(t=table))
        results = run_dbt(["snapshot", *run_vars(rows=SHIP_1)], expect_pass=False)
        assert writer.fired == 1
        assert [e.operation for e in self.landed_after(spark, table, vb)] == ["UPDATE"]
        catalogue("E215", message_of(results))

    @produces("E216")
    def test_another_run_applied_the_batch(self, project, spark, monkeypatch, catalogue):
        table, vb = self.fresh(project, spark, "double_fired")
        # The same job fired twice: the other run commits the batch after this one read vB.
        twin = FenceTag(
            str(uuid.uuid4()),
            "model.my_project.double_fired",
            "append",
            vb,
            1,
            "write",
            vb,
            batch="2026-01-02",
        )
        writer = ForeignAt(
            monkeypatch,
            spark,
            "vb",
            [
                set_conf_sql(USER_METADATA, twin.to_json()),
                f"insert into {table} select '2026-01-02', id from range(1, 3)",
            ],
        )
        results = run_dbt(
            ["run", "--select", "double_fired", *run_vars(ds="2026-01-02")], expect_pass=False
        )
        assert writer.fired == 1
        after = self.landed_after(spark, table, vb)
        assert [(e.version, e.tag and e.tag["batch"]) for e in after] == [(vb + 1, "2026-01-02")]
        message = message_of(results)
        assert our_write(message).startswith("never written")
        response = response_of(project, "double_fired")
        assert (response["fence_outcome"], response["conflicts"]) == ("never_written", [vb + 1])
        assert rows(spark, f"select ds, count(*) from {table} group by ds order by ds") == [
            ("2026-01-01", 2),
            ("2026-01-02", 2),
        ]
        catalogue("E216", message)

    @produces("E213")
    def test_an_earlier_run_left_an_unverified_commit(self, project, spark, catalogue):
        table, vb = self.fresh(project, spark, "crashed")
        ForeignWriter(spark).sql(f"update {table} set status = 'cancelled' where id = 1")
        # A dead run's MERGE on top of the foreign commit.
        dead_run_merge(
            spark,
            "model.my_project.crashed",
            vb,
            f"merge into {table} t using (select 1 as id, 'shipped' as status, 11 as amount) s "
            "on s.id = t.id when matched then update set *",
        )
        results = run_dbt(["run", "--select", "crashed"], expect_pass=False)
        after = self.landed_after(spark, table, vb)
        assert [(e.operation, e.tag and e.tag["step"]) for e in after] == [
            ("UPDATE", None),
            ("MERGE", "write"),
        ]  # nothing of the refused run
        assert response_of(project, "crashed") == {
            "_message": "MERGE refused",
            "fence_outcome": "earlier_run_unresolved",
            "read_version": after[1].version,
            "unresolved_version": after[1].version,
            "conflicts": [after[0].version],
        }
        catalogue("E213", message_of(results))
        # A RESTORE that undoes only a later commit leaves that commit in the table: the
        # next run is still refused, naming it.
        merged = after[1].version
        ForeignWriter(spark).sql(f"insert into {table} values (9, 'open', 90)")
        ForeignWriter(spark).sql(f"restore table {table} to version as of {merged}")
        assert [e.operation for e in self.landed_after(spark, table, merged)] == [
            "WRITE",
            "RESTORE",
        ]
        again = run_dbt(["run", "--select", "crashed"], expect_pass=False)
        assert f"its commit: v{merged} MERGE" in message_of(again)
        # Once the user accepts that commit (or undoes it), runs go on.
        run_dbt(["run", "--select", "crashed", *run_vars(accept=merged)])
        assert self.landed_after(spark, table, after[1].version)[-1].tag["step"] == "write"

    @produces("E206")
    def test_fence_retries_exhausted(self, project, spark, monkeypatch, catalogue):
        table, vb = self.fresh(project, spark, "retried")
        monkeypatch.setattr(protocol, "backoff_turns", lambda *args, **kwargs: 0.0)
        runners = self.around_the_write(
            monkeypatch, spark, lambda n: f"insert into {table} values ({100 + n}, 'x', 0)"
        )
        race = run_vars(strategy="append_if_unchanged", retries=1)
        results = run_dbt(["run", "--select", "retried", *race], expect_pass=False)
        assert sum(r.fired for r in runners) == 2  # the race fired before each attempt
        after = self.landed_after(spark, table, vb)
        assert [e.operation for e in after] == ["WRITE", "WRITE", "RESTORE"] * 2
        assert [e.tag["attempt"] for e in ours(after)] == [1, 2]
        message = message_of(results)
        assert "attempts: 2 (fence_retries: 1), all refused:" in message
        # A foreign WRITE landed before each of ours (the history above): so the advice says.
        assert "Each of its 2 attempts was refused after commits landed" in message
        assert our_write(message).startswith(f"written as v{after[4].version}, then reverted")
        catalogue("E206", message)
        assert rows(spark, f"select count(*) from {table} where status = 'x'") == [(2,)]
        assert rows(spark, f"select count(*) from {table}") == [(5,)]

    @produces("E207")
    def test_target_replaced(self, project, spark, monkeypatch, catalogue):
        table, vb, results = self.raced(
            project,
            spark,
            monkeypatch,
            "replaced",
            [f"create or replace table {{t}} using delta as {NEW_TABLE}"],
        )
        after = self.landed_after(spark, table, vb)
        assert [(e.operation, e.tag) for e in after] == [(REPLACED, None)]
        catalogue("E207", message_of(results))
        assert rows(spark, f"select id, status from {table}") == [(7, "new")]

    @produces("E208")
    def test_target_dropped(self, project, spark, monkeypatch, catalogue):
        table, vb, results = self.raced(project, spark, monkeypatch, "dropped", ["drop table {t}"])
        response = response_of(project, "dropped")
        assert (response["fence_outcome"], response["read_version"]) == ("never_written", vb)
        assert (response["table_gone"], response["conflicts"]) == ("dropped", [])
        catalogue("E208", message_of(results))
        assert not table_exists(spark, table)

    @produces("E209")
    def test_target_recreated_as_parquet(self, project, spark, monkeypatch, catalogue):
        table, _, results = self.raced(
            project,
            spark,
            monkeypatch,
            "reformatted",
            ["drop table {t}", f"create table {{t}} using parquet as {NEW_TABLE}"],
            reads_self=False,  # no pinned read fails first: the pre-check finds it
        )
        catalogue("E209", message_of(results))
        assert rows(spark, f"select id, status from {table}") == [(7, "new")]

    @produces("E210")
    @pytest.mark.parametrize("on_schema_change", ["ignore", "append_new_columns"])
    def test_schema_changed_concurrently(
        self, project, spark, monkeypatch, catalogue, on_schema_change
    ):
        table, vb, results = self.raced(
            project,
            spark,
            monkeypatch,
            "widened",
            ["alter table {t} add columns (note string)"],
            on_schema_change=on_schema_change,
        )
        after = self.landed_after(spark, table, vb)
        assert [(e.operation, e.tag) for e in after] == [("ADD COLUMNS", None)]
        catalogue("E210", message_of(results))
        assert rows(spark, f"select count(*) from {table}") == [(3,)]

    @produces("E211")
    def test_history_unreadable_after_the_write(self, project, spark, monkeypatch, catalogue):
        table, vb = self.fresh(project, spark, "unverified")
        # A key the run does not touch lands first, so our MERGE commits above it: Delta's
        # record of the session's commit is then not the version right above vB, and only
        # the log can say what stands; the table is dropped before it is read.
        runners = self.around_the_write(
            monkeypatch,
            spark,
            lambda _: f"insert into {table} values (99, 'open', 990)",
            after=f"drop table {table}",
        )
        race = run_vars(batch=SHIP_1_AND_ADD_4)
        results = run_dbt(["run", "--select", "unverified", *race], expect_pass=False)
        assert sum(r.fired for r in runners) == 1
        assert not table_exists(spark, table)  # dropped between our write and its verification
        assert response_of(project, "unverified") == {
            "_message": "MERGE unverified",
            "fence_outcome": "unverified",
            "read_version": vb,
        }
        catalogue("E211", message_of(results))

    @produces("E118")
    def test_a_session_with_its_own_txn_app_id(self, project, spark, catalogue):
        table, vb = self.fresh(project, spark, "own_txn")
        before = history(spark, table)
        results = run_dbt(["run", "--select", "own_txn"], expect_pass=False)
        catalogue("E118", message_of(results))
        assert history(spark, table) == before  # the write was not sent
        assert response_of(project, "own_txn") == {
            "_message": "MERGE failed",
            "fence_outcome": "never_written",
            "read_version": vb,
            "steps": [],
            "standing": [],
        }

    # -- E3xx: Delta refuses the write ---------------------------------------------------------

    @produces("E301")
    def test_duplicate_source_keys(self, project, spark, catalogue):
        table = f"{project.test_schema}.dupes"
        spark.sql(f"create or replace table {table} using delta as select 1 as id, 'x' as v")
        before = history(spark, table)
        results = run_dbt(["run", "--select", "dupes"], expect_pass=False)
        catalogue("E301", message_of(results))
        assert history(spark, table) == before
        assert response_of(project, "dupes") == {
            "_message": "MERGE failed",
            "fence_outcome": "never_written",
            "read_version": before[-1].version,
            "steps": [],
            "standing": [],
        }

    def test_a_refused_retry_says_so_of_its_own_attempt(self, project, spark, monkeypatch):
        # Attempt 1 is refused by the pre-check (nothing written); Delta refuses its retry.
        table, vb, message = self.raced_on_one_row(
            project,
            spark,
            monkeypatch,
            "dupes_on_retry",
            "insert into {t} values (2, 'y')",
            "WRITE",
        )
        assert (
            "the write of its last attempt was never written, and nothing of the earlier "
            "attempts stands." in message
        ), message
        assert "attempts: 2 (fence_retries: 1); a failure is not retried:" in message
        assert f"1. read v{vb}; v{vb + 1} WRITE landed; never written" in message
        assert f"2. read v{vb + 1}; failed, nothing written" in message
        assert "Delta said:" in message and "DELTA_MULTIPLE_SOURCE_ROW" in message
        assert rows(spark, f"select id, v from {table} order by id") == [(1, "x"), (2, "y")]
        assert response_of(project, "dupes_on_retry") == {
            "_message": "MERGE failed",
            "fence_outcome": "never_written",
            "read_version": vb + 1,
            "steps": [],
            "standing": [],
        }

    @produces("E302")
    def test_rows_outside_replace_where(self, project, spark, catalogue):
        table, vb = self.fresh(project, spark, "outside")
        results = run_dbt(["run", "--select", "outside"], expect_pass=False)
        catalogue("E302", message_of(results))
        assert history(spark, table)[-1].version == vb

    # -- E4xx: reads the fence cannot pin ------------------------------------------------------

    @produces("E401")
    def test_compile_time_read(self, project, spark, monkeypatch, catalogue):
        table, vb = self.fresh(project, spark, "compile_time")
        # A double-fired job appends after the node read its watermark at compile time.
        writer = ForeignAt(monkeypatch, spark, "compiled", f"insert into {table} values (3), (4)")
        race = run_vars(hi=5, strategy="append", retries=2)
        results = run_dbt(["run", "--select", "compile_time", *race], expect_pass=False)
        assert writer.fired == 1
        after = self.landed_after(spark, table, vb)
        assert [(e.operation, e.tag) for e in after] == [("WRITE", None)]
        catalogue("E401", message_of(results))
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(5)]


class ParseErrorEntry:
    """An entry raised while dbt parses the project: it does not load, nothing runs."""

    entry: str
    name: str
    config: str
    error: type[Exception]

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"name": "my_project"}

    @pytest.fixture(scope="class")
    def models(self):
        return {f"{self.name}.sql": model(self.config)}

    def test_parse_error(self, project, spark, catalogue):
        with pytest.raises(self.error) as raised:
            run_dbt(["run"])
        catalogue(self.entry, str(raised.value))
        assert not table_exists(spark, f"{project.test_schema}.{self.name}")


@produces("E110")
class TestMicrobatchWithoutEventTime(ParseErrorEntry):
    """dbt-core's own."""

    entry, name, error = "E110", "no_event_time", ParsingError
    config = "incremental_strategy='microbatch', batch_size='day', begin='2026-01-01'"


@produces("E119")
class TestMisspeltFenceKey(ParseErrorEntry):
    """The adapter's own, where dbt names the model's relation as it parses."""

    entry, name, error = "E119", "fence_typo", CompilationError
    config = "incremental_strategy='merge', unique_key='id', fence_retry=3"


def test_every_entry_has_a_test_and_every_test_an_entry():
    assert sorted(doc_blocks(DOC.read_text())) == sorted(COVERED)


def test_doc_blocks_are_found_and_rewritten_in_place():
    doc = "### E999 demo\n\nWhen.\n\n```text\nold words\n```\n\n### E998 next\n"
    assert doc_blocks(doc) == {"E999": "old words", "E998": None}
    updated = rewrite_block(rewrite_block(doc, "E999", "new words"), "E998", "more")
    assert doc_blocks(updated) == {"E999": "new words", "E998": "more"}
    assert "When." in updated
