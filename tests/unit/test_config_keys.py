"""A config key that starts with `fence` and is none of the adapter's: refused, naming the
node, the key and the nearest valid key."""

from types import SimpleNamespace

import pytest
from dbt_common.exceptions import CompilationError

from dbt.adapters.fenced_spark.config_keys import FENCE_KEYS, check, nearest, unknown


def test_the_keys_are_the_adapter_config_s_own():
    assert set(FENCE_KEYS) == {
        "fenced",
        "fence_retries",
        "fence_isolation",
        "fence_accept_unverified",
        "fence_batch_id",
    }


@pytest.mark.parametrize(
    "typo, meant",
    [
        ("fence_retry", "fence_retries"),
        ("fence_isolaton", "fence_isolation"),
        ("fenced_retries", "fence_retries"),
        ("fence_batchid", "fence_batch_id"),
        ("fence_accept", "fence_accept_unverified"),
        ("Fenced", "fenced"),
        ("FENCE_RETRIES", "fence_retries"),
        ("fence", "fenced"),
    ],
)
def test_each_typo_gets_the_nearest_key(typo, meant):
    assert unknown([typo]) == [typo]
    assert nearest(typo) == meant


def test_valid_keys_and_other_keys_pass():
    assert unknown([*FENCE_KEYS, "unique_key", "defence", "my_fence", "materialized"]) == []


def node(config, **attrs):
    return SimpleNamespace(
        config=config,
        resource_type="snapshot",
        name="orders_snap",
        original_file_path="snapshots/orders_snap.sql",
        unique_id="snapshot.p.orders_snap",
        **attrs,
    )


def test_the_error_names_the_node_every_bad_key_and_its_suggestion():
    with pytest.raises(CompilationError) as raised:
        check(node({"fence_retry": 3, "fence_isolaton": "version", "fenced": True}), "s.snap")
    message = str(raised.value)
    assert "Snapshot s.snap: unknown fence config `fence_isolaton`, `fence_retry`." in message
    assert "`fence_retry`: did you mean `fence_retries`?" in message
    assert "`fence_isolaton`: did you mean `fence_isolation`?" in message
    assert "Nothing was run." in message


def test_a_dbt_config_object_is_read_through_its_extra_keys():
    config = SimpleNamespace(_extra={"fence_retries": 1, "fence_retrys": 2}, materialized="table")
    with pytest.raises(CompilationError, match="`fence_retrys`: did you mean `fence_retries`"):
        check(node(config), "s.t")
    check(node(SimpleNamespace(_extra={"fence_retries": 1})), "s.t")
    check(SimpleNamespace(config=None), "s.t")  # a relation config without one: nothing to check
