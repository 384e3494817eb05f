"""The tag is set only around our own statements, and a label the session already had (an audit
pre-hook's commitInfo.userMetadata) rides in the tag and is put back after."""

from contextlib import nullcontext

import pytest

from dbt.adapters.fenced_spark.fence.delta.words import USER_METADATA
from dbt.adapters.fenced_spark.fence.history import FenceTag
from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState
from tests.unit.delta_fake import FakeTable


def write(table: FakeTable) -> FenceTag | None:
    state = FenceState("`a`.`t`", "a.t", "merge", 0, 0, "inv", "model.p.t")
    Fence(table, nullcontext, rng=lambda: 0.0).run(state, "merge into t ...")
    return table.commits[-1].tag


def test_without_a_label_the_conf_is_reset():
    table = FakeTable()
    tag = write(table)
    assert tag is not None and tag.user_metadata is None
    assert USER_METADATA not in table.conf
    assert "user_metadata" not in table.commits[-1].user_metadata


@pytest.mark.parametrize("label", ["audit_b2", "with `backquotes`; and = signs", '{"json": 1}'])
def test_the_sessions_label_rides_in_the_tag_and_is_put_back(label):
    table = FakeTable()
    table.conf[USER_METADATA] = label
    tag = write(table)
    assert tag is not None and tag.user_metadata == label
    assert FenceTag.parse(tag.to_json()) == tag
    assert table.conf[USER_METADATA] == label


def test_a_failed_write_puts_the_label_back_too():
    table = FakeTable()
    table.conf[USER_METADATA] = "audit_b2"

    def boom(sql: str) -> None:
        raise RuntimeError("the write failed")

    table.before = boom
    with pytest.raises(RuntimeError, match="the write failed"):
        write(table)
    assert table.conf[USER_METADATA] == "audit_b2"
