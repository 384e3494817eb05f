"""`dbt docs generate`'s table stats for a Delta table. dbt-spark reads them from the
`Statistics` row of DESCRIBE EXTENDED, which a Delta table has only after ANALYZE: Delta keeps
its size in its log, and DESCRIBE DETAIL reports it (`sizeInBytes`, `numFiles`)."""

from collections.abc import Callable, Mapping
from typing import Any

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

logger = AdapterLogger("FencedSpark")

# DESCRIBE DETAIL's column -> (the stat's key in the catalog, its label, its description).
DETAIL_STATS = {
    "sizeInBytes": ("bytes", "Size", "The table's data files in bytes (Delta's DESCRIBE DETAIL)"),
    "numFiles": ("files", "Files", "The table's data files (Delta's DESCRIBE DETAIL)"),
}


def has_stats(column: Mapping[str, Any]) -> bool:
    # dbt adds `has_stats` itself, after the adapter: any `stats:` key here is dbt-spark's.
    return any(key.startswith("stats:") for key in column)


def detail_stats(detail: Mapping[str, Any]) -> dict[str, Any]:
    """The catalog's `stats:<key>:...` entries, as dbt-spark's SparkColumn.convert_table_stats
    makes them, from one DESCRIBE DETAIL row (column -> value)."""
    stats: dict[str, Any] = {}
    for column, (key, label, description) in DETAIL_STATS.items():
        value = detail.get(column)
        if value is None:
            continue
        stats[f"stats:{key}:label"] = label
        stats[f"stats:{key}:value"] = int(value)
        stats[f"stats:{key}:description"] = description
        stats[f"stats:{key}:include"] = True
    return stats


def detail_stats_of(execute: Callable[..., Any], relation: Any) -> dict[str, Any]:
    """One DESCRIBE DETAIL of a Delta table (the adapter's `execute`): its catalog stats, or
    none when it cannot be read."""
    try:
        _, table = execute(f"describe detail {relation.fence_name}", fetch=True)
    except DbtRuntimeError as exc:
        logger.debug(f"No DESCRIBE DETAIL for the catalog's {relation}: {exc}")
        return {}
    if not table.rows:
        return {}
    return detail_stats(dict(zip(table.column_names, table.rows[0], strict=True)))
