"""Seed values as the session cursor renders them into SQL."""

import pytest

from dbt.adapters.fenced_spark.handles import FencedSessionConnectionWrapper


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
    fixed = FencedSessionConnectionWrapper._fix_binding(value)
    # The type too: 3 == 3.0, so an int passed through unchanged would pass `==` alone.
    assert (type(fixed), fixed) == (type(literal), literal)
