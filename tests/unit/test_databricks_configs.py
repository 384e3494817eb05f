"""dbt-databricks' incremental configs that the adapter does not run yet are refused before
any SQL (incremental/validate_databricks.sql), never ignored as dbt-spark ignores them."""

import pytest

from tests.unit.macros import MACROS, CompilerError, Macros

FILES = [MACROS / "materializations" / "incremental" / "validate_databricks.sql"]
MODEL = "Model analytics.orders"


def validate(strategy="merge", **config):
    Macros(FILES, config).fence_validate_databricks(MODEL, strategy)


def refusal(strategy="merge", **config) -> str:
    with pytest.raises(CompilerError) as refused:
        validate(strategy, **config)
    return " ".join(str(refused.value).split())


@pytest.mark.parametrize(
    ("key", "value", "instead"),
    [
        ("not_matched_by_source_action", "delete", "a sync would delete nothing"),
        ("not_matched_by_source_condition", "t.d < 3", "a sync would delete nothing"),
        ("matched_condition", "s.v <> t.v", "update every matched row"),
        ("not_matched_condition", "s.ok", "insert every source row without a match"),
        ("merge_with_schema_evolution", True, "not evolve the table's schema"),
        ("skip_matched_step", "true", "still update the matched rows"),
        ("skip_not_matched_step", True, "still insert the source rows"),
        ("source_alias", "s", "DBT_INTERNAL_SOURCE"),
        ("target_alias", "t", "DBT_INTERNAL_DEST"),
        ("liquid_clustered_by", ["id"], "the table would not be clustered"),
        ("incremental_apply_config_changes", True, "would not be applied"),
    ],
)
def test_each_config_is_refused_naming_the_model_the_key_and_what_would_happen(key, value, instead):
    message = refusal(**{key: value})
    assert message.startswith(f"{MODEL}: `{key}` (a dbt-databricks config) is not supported yet")
    assert instead in message and f"Remove `{key}`" in message


@pytest.mark.parametrize("value", [False, "false", " FALSE ", None])
def test_a_flag_left_false_asks_for_nothing_and_passes(value):
    validate(skip_matched_step=value, merge_with_schema_evolution=value)


def test_a_model_without_them_passes():
    validate(unique_key="id", incremental_predicates=["d > 1"])


def test_delete_insert_is_refused_pointing_to_merge():
    message = refusal("delete+insert", unique_key="id")
    assert message.startswith(f"{MODEL}: the delete+insert strategy (dbt-databricks') is not")
    assert "the merge strategy with that key leaves the same rows, in one commit" in message
