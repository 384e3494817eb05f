"""dbt's current_timestamp macros, as dbt-spark renders them."""

import pytest
from dbt.tests.adapter.utils.test_timestamps import BaseCurrentTimestamps


class TestCurrentTimestamps(BaseCurrentTimestamps):
    @pytest.fixture(scope="class")
    def expected_schema(self):
        # Spark has one timestamp type, in the session's time zone (TIMESTAMP_NTZ aside).
        return {
            "current_timestamp": "timestamp",
            "current_timestamp_in_utc_backcompat": "timestamp",
            "current_timestamp_backcompat": "timestamp",
        }

    @pytest.fixture(scope="class")
    def expected_sql(self):
        return """
select current_timestamp() as current_timestamp,
       current_timestamp::timestamp as current_timestamp_in_utc_backcompat,
       current_timestamp::timestamp as current_timestamp_backcompat
"""
