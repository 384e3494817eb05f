"""How statements reach the server. Over Thrift, metadata statements are answered inside the
ExecuteStatement call and others are polled (connections.py); a refusal reads the same either
way. Runs on every profile: the session and Connect have one path, and must agree too."""

import pytest
from dbt_common.exceptions import DbtRuntimeError

MISSING = "fenced_no_such_schema.fenced_no_such_table"


class TestARefusalReadsTheSameAnsweredAtOnceOrPolled:
    def refusal(self, adapter, sql: str) -> list[str]:
        with adapter.connection_named("_statements"), pytest.raises(DbtRuntimeError) as refused:
            adapter.execute(sql)
        return str(refused.value).splitlines()

    def test_describe_and_select_of_a_missing_table(self, project):
        described = self.refusal(project.adapter, f"describe extended {MISSING}")  # at once
        selected = self.refusal(project.adapter, f"select * from {MISSING}")  # polled
        for lines in (described, selected):
            assert any("TABLE_OR_VIEW_NOT_FOUND" in line for line in lines), lines

        def framing(lines: list[str]) -> list[str]:
            # dbt's wrapping above Spark's own words
            return lines[: next(i for i, line in enumerate(lines) if "TABLE_OR_VIEW" in line)]

        assert framing(described) == framing(selected)
