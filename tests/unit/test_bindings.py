"""Seed values as the session cursor renders them into SQL."""

import pytest

from dbt.adapters.fenced_spark.connections import FencedSessionConnectionWrapper


@pytest.mark.parametrize(
    "value, literal",
    [
        (None, "null"),
        ("O'Brien", "'O\\'Brien'"),
        ("C:\\\\temp", "'C:\\\\\\\\temp'"),
        ("plain", "'plain'"),
        (3, 3.0),
    ],
)
def test_bindings_are_spark_literals(value, literal):
    assert FencedSessionConnectionWrapper._fix_binding(value) == literal
