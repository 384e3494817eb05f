"""dbt show: its --limit, a sql_header that opens the model's query, a query with a limit."""

import pytest
from dbt.tests.adapter.dbt_show.test_dbt_show import (
    BaseShowDoesNotHandleDoubleLimit,
    BaseShowLimit,
    BaseShowSqlHeader,
)
from dbt.tests.util import run_dbt
from dbt_common.exceptions import DbtRuntimeError


class TestShowLimit(BaseShowLimit):
    pass


class TestShowSqlHeader(BaseShowSqlHeader):
    pass


class TestShowDoesNotHandleDoubleLimit(BaseShowDoesNotHandleDoubleLimit):
    DATABASE_ERROR_MESSAGE = "[PARSE_SYNTAX_ERROR] Syntax error at or near 'limit'"

    def test_double_limit_throws_syntax_error(self, project):
        # The base looks in the exception's repr, cut to its head and tail: over Thrift the
        # tail is Hive's stack, and Spark's words are in the middle. The whole message here.
        with pytest.raises(DbtRuntimeError) as refused:
            run_dbt(["show", "--limit", "1", "--inline", "select 1 limit 1"])
        assert self.DATABASE_ERROR_MESSAGE in str(refused.value)
