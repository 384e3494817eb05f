"""Judging a commit from its partition values alone, where they decide: every row of a data
file has its file's partition values, so a file whose values fail a conjunct about partition
columns alone holds no row that passes the whole predicate. Spark evaluates the conjunct on a
literal VALUES relation of the commit's partition values (no scan, no snapshot of the table);
anything it cannot decide goes to the data probe, as before."""

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dbt.adapters.fenced_spark.fence.footprint import _ROW_FILTER_NODES, _conjuncts
from dbt.adapters.fenced_spark.relation import quote_name

# One partition's values, as the log writes them (strings; None for null).
PartitionValues = tuple[tuple[str, str | None], ...]

# A commit spread over more partitions than this is probed on its data instead: the VALUES
# relation would be a statement of megabytes.
MAX_PARTITIONS = 1000


def partition_types(describe: Iterable[Sequence[Any]]) -> dict[str, str]:
    """The partition columns and their types, from DESCRIBE TABLE's rows (its "# Partition
    Information" section names them); empty for an unpartitioned table."""
    types: dict[str, str] = {}
    partitions: dict[str, str] = {}
    section = None
    for row in describe:
        name, kind = str(row[0] or "").strip(), str(row[1] or "").strip()
        if name == "# col_name":  # the section's header row
            continue
        if name.startswith("#"):
            section = name
            continue
        if not name:  # a blank row ends a section
            section = section and "# end"
            continue
        if section is None:
            types.setdefault(name, kind)
        elif section == "# Partition Information":
            partitions[name] = types.get(name, kind)
    return partitions


def partition_only(predicate: str, columns: Collection[str]) -> str | None:
    """The conjuncts of `predicate` about `columns` alone, ANDed; None if there are none."""
    lowered = {c.lower() for c in columns}
    try:
        parsed = sqlglot.parse_one(predicate, dialect="spark")
    except SqlglotError:
        return None
    if not isinstance(parsed, exp.Expression):
        return None
    kept = [c for c in _conjuncts(parsed) if _about(c, lowered)]
    return " AND ".join(f"({c.sql(dialect='spark')})" for c in kept) or None


def _about(condition: exp.Expression, columns: set[str]) -> bool:
    if any(not isinstance(node, _ROW_FILTER_NODES) for node in condition.walk()):
        return False
    named = list(condition.find_all(exp.Column))
    return bool(named) and all(not c.table and c.name.lower() in columns for c in named)


def values_sql(
    conjuncts: str, partitions: Collection[PartitionValues], types: Mapping[str, str]
) -> str:
    """A query with a row exactly when some partition passes `conjuncts`."""
    names = sorted(types)
    by_name = [{k.lower(): v for k, v in p} for p in partitions]
    rows = ", ".join(
        "(" + ", ".join(_typed(values.get(n.lower()), types[n]) for n in names) + ")"
        for values in by_name
    )
    columns = ", ".join(quote_name(n) for n in names)
    return f"SELECT 1 FROM VALUES {rows} AS partitions({columns}) WHERE {conjuncts} LIMIT 1"


def _typed(value: str | None, kind: str) -> str:
    # CAST, not try_cast: a value that does not cast must fail the query (then the data is
    # probed), never turn into a NULL that passes no conjunct.
    if value is None:
        return f"CAST(NULL AS {kind})"
    return f"CAST({quote_sql_string(value)} AS {kind})"


def quote_sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
