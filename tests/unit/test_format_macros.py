"""The table-format macros (macros/materializations/formats/), rendered on their own: the
neutral calls reach each format's dispatched macro, and Delta's SQL is what the fence sends."""

from types import SimpleNamespace

import jinja2
import pytest

from tests.unit.macros import MACROS, Macros

FORMATS = sorted((MACROS / "materializations" / "formats").glob("*.sql"))


def test_delta_is_the_only_fenced_format():
    assert Macros(FORMATS).fence_formats() == ["delta"]


@pytest.mark.parametrize(
    ("config", "expected"), [({}, "delta"), ({"file_format": "parquet"}, "parquet")]
)
def test_the_table_format_is_file_format_delta_by_default(config, expected):
    assert Macros(FORMATS, config).fence_table_format() == expected


@pytest.mark.parametrize(("is_delta", "ok"), [(True, True), (None, True), (False, False)])
def test_only_a_table_known_not_to_be_delta_is_refused(is_delta, ok):
    relation = SimpleNamespace(is_delta=is_delta)
    assert Macros(FORMATS).fence_target_is_format("delta", relation) is ok


def test_another_format_has_no_target_check():
    with pytest.raises(jinja2.UndefinedError):
        Macros(FORMATS).fence_target_is_format("iceberg", SimpleNamespace(is_delta=False))


def test_delta_replaces_where_in_one_insert():
    sql = Macros(FORMATS).fence_format_replace_sql(
        "delta", "stage", "s.t", ["d >= 1", "d < 3"], None
    )
    assert " ".join(str(sql).split()) == (
        "insert into s.t replace where (d >= 1) and (d < 3) select `id`, `v` from stage"
    )


def test_a_microbatch_keeps_only_the_rows_of_its_window():
    sql = Macros(FORMATS).fence_format_replace_sql("delta", "stage", "s.t", ["d = 1"], ["d >= 1"])
    assert " ".join(str(sql).split()).endswith("from stage where (d >= 1)")
