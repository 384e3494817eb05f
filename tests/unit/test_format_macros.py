"""The table-format macros (macros/materializations/formats/), rendered on their own: the
neutral calls reach each format's dispatched macro, and Delta's SQL is what the fence sends.
dbt's `return` and `adapter.dispatch` are stood in for, as dbt's MacroGenerator does them."""

from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest

FORMATS = Path(__file__).parents[2] / "dbt/include/fenced_spark/macros/materializations/formats"


class MacroReturn(Exception):
    def __init__(self, value):
        self.value = value


def _return(value):
    raise MacroReturn(value)


def called(macro):
    """A macro called as dbt calls one: its `return` value, else what it rendered."""

    def call(*args):
        try:
            return macro(*args)
        except MacroReturn as returned:
            return returned.value

    return call


class Column:
    def __init__(self, name):
        self.quoted = f"`{name}`"


class Macros:
    def __init__(self, config=None, columns=("id", "v")):
        env = jinja2.Environment(extensions=["jinja2.ext.do"])
        source = "\n".join(p.read_text() for p in sorted(FORMATS.glob("*.sql")))
        self.module = None
        adapter = SimpleNamespace(
            dispatch=lambda name, namespace: called(getattr(self.module, f"fenced_spark__{name}")),
            get_columns_in_relation=lambda relation: [Column(c) for c in columns],
        )
        env.globals.update(
            {
                "return": _return,
                "adapter": adapter,
                "config": SimpleNamespace(get=(config or {}).get),
            }
        )
        self.module = env.from_string(source).make_module()

    def __getattr__(self, name):
        return called(getattr(self.module, name))


def test_delta_is_the_only_fenced_format():
    assert Macros().fence_formats() == ["delta"]


@pytest.mark.parametrize(
    ("config", "expected"), [({}, "delta"), ({"file_format": "parquet"}, "parquet")]
)
def test_the_table_format_is_file_format_delta_by_default(config, expected):
    assert Macros(config).fence_table_format() == expected


@pytest.mark.parametrize(("is_delta", "ok"), [(True, True), (None, True), (False, False)])
def test_only_a_table_known_not_to_be_delta_is_refused(is_delta, ok):
    relation = SimpleNamespace(is_delta=is_delta)
    assert Macros().fence_target_is_format("delta", relation) is ok


def test_another_format_has_no_target_check():
    with pytest.raises(jinja2.UndefinedError):
        Macros().fence_target_is_format("iceberg", SimpleNamespace(is_delta=False))


def test_delta_replaces_where_in_one_insert():
    sql = Macros().fence_format_replace_sql("delta", "stage", "s.t", ["d >= 1", "d < 3"], None)
    assert " ".join(str(sql).split()) == (
        "insert into s.t replace where (d >= 1) and (d < 3) select `id`, `v` from stage"
    )


def test_a_microbatch_keeps_only_the_rows_of_its_window():
    sql = Macros().fence_format_replace_sql("delta", "stage", "s.t", ["d = 1"], ["d >= 1"])
    assert " ".join(str(sql).split()).endswith("from stage where (d >= 1)")
