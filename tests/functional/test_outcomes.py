"""After the write statement, the outcome comes from the log, never from the exception: a write
that committed and then failed is reported committed, and its re-run does not double it."""

import json
import os
import shutil

import pytest
from dbt.tests.util import run_dbt

from tests.functional.lakehouse import history, ours, rows

APPENDED = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged') }}
select id from range({{ var('lo', 0) }}, {{ var('hi', 3) }})
"""


class TestPostCommitHookFailure:
    @pytest.fixture(scope="class")
    def models(self):
        return {"manifested.sql": APPENDED}

    def test_a_failed_post_commit_hook_is_reported_as_committed(self, project, spark):
        run_dbt(["run"])
        table = f"{project.test_schema}.manifested"
        spark.sql(
            f"alter table {table} set tblproperties "
            "('delta.compatibility.symlinkFormatManifest.enabled' = 'true')"
        )
        location = spark.sql(f"describe detail {table}").collect()[0]["location"]
        manifest = os.path.join(location.removeprefix("file:"), "_symlink_format_manifest")
        # A file where Delta's hook makes its directory: the commit lands, then the hook fails.
        shutil.rmtree(manifest, ignore_errors=True)
        with open(manifest, "w") as blocker:
            blocker.write("not a directory")
        vb = history(spark, table)[-1].version

        results = run_dbt(["run", "--vars", json.dumps({"lo": 3, "hi": 5})], expect_pass=False)

        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE"] and ours(after) == after
        message = results.results[0].message
        assert f"the write committed as v{after[0].version} (verified: based on v{vb})" in message
        assert "DELTA_POST_COMMIT_HOOK_FAILED" in message or "manifest" in message.lower()
        assert f"committed as v{after[0].version}; it stands" in message
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(5)]
