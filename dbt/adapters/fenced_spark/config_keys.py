"""The adapter's own config keys, and the parse-time check that a `fence*` key is one of them.

dbt keeps any config key it does not know, so `fence_retry: 3` would run on the defaults
without a word. dbt asks the adapter's Relation class for every relational node's name while it
parses (after config(), a models YAML and dbt_project.yml are merged), so the check runs there:
`dbt parse` fails on it, and `dbt run` fails before any SQL.
"""

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from dbt.adapters.spark.impl import SparkConfig
from dbt_common.exceptions import CompilationError


class FencedSparkConfig(SparkConfig):
    file_format: str = "delta"
    fenced: bool | None = None
    fence_retries: int | None = None
    fence_accept_unverified: int | list[int] | None = None
    fence_isolation: str | None = None
    fence_batch_id: str | int | None = None


# Its own annotations: the class stays as dbt-spark declares its config (no dataclass fields).
FENCE_KEYS = tuple(k for k in FencedSparkConfig.__annotations__ if k.startswith("fence"))


def unknown(keys: Iterable[str]) -> list[str]:
    """The keys that look like the fence's (any case) but are none of its keys."""
    return sorted(k for k in keys if k.lower().startswith("fence") and k not in FENCE_KEYS)


def nearest(key: str) -> str:
    """The valid key closest to `key`: always one, so the message always has a suggestion."""
    by_case = {k.lower(): k for k in FENCE_KEYS}
    if key.lower() in by_case:
        return by_case[key.lower()]
    return difflib.get_close_matches(key.lower(), FENCE_KEYS, n=1, cutoff=0.0)[0]


def config_keys(node: Any) -> Iterable[str]:
    # A node's config is a dbt dataclass: what dbt has no field for (every adapter key, and
    # every typo) is in its `_extra`. dbt's own fields never start with `fence`.
    config = getattr(node, "config", None)
    if isinstance(config, Mapping):
        return config.keys()
    extra = getattr(config, "_extra", None)
    return extra.keys() if isinstance(extra, Mapping) else ()


def check(node: Any, display: str) -> None:
    """Raise naming the node (`display`, as the fence's errors name it), each unknown key and
    the valid key nearest it."""
    bad = unknown(config_keys(node))
    if not bad:
        return
    kind = str(getattr(node, "resource_type", "model")).capitalize()
    lines = [f"{kind} {display}: unknown fence config {_keys(bad)}."]
    lines += [f"    `{key}`: did you mean `{nearest(key)}`?" for key in bad]
    lines.append(
        f"    The fence's config keys are {_keys(FENCE_KEYS)}. A misspelt key would be "
        "ignored and the model run on the default, so this is an error. Nothing was run."
    )
    raise CompilationError("\n".join(lines), node=node if hasattr(node, "resource_type") else None)


def _keys(keys: Iterable[str]) -> str:
    return ", ".join(f"`{k}`" for k in keys)
