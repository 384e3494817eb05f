"""What a node read of its target: for each read, the filter on the target's own rows.

A read `SELECT ... FROM t [AS a] WHERE w` depends only on the rows of t that pass the conjuncts
of w about t alone, whatever it computes from them. A foreign commit whose changed rows pass
none of them changed nothing this read saw. Anything less plain (a join, a read of t outside a
SELECT's FROM, SQL sqlglot cannot parse) reads the whole table: a conflict analysis may only
ever widen a filter, never narrow it.
"""

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from dbt.adapters.fenced_spark.fence.rewriter import (
    Target,
    _reference_ends_parsed,
    _tokens,
    cte_names,
    is_subject,
    parsed_statements,
)
from dbt.adapters.fenced_spark.fence.statements import OPAQUE, READ, UNPINNED, classify


@dataclass(frozen=True)
class ReadFilter:
    """One read of the target: the rows it can have seen, as a predicate on the target's
    unqualified columns; None when it may have seen any row."""

    predicate: str | None

    def describe(self) -> str:
        return f"where {self.predicate}" if self.predicate else "the whole table"


WHOLE_TABLE = ReadFilter(None)

# A conjunct is kept only if it is built of these: deterministic, the same answer when the
# probe re-evaluates it later on other rows, and printed back by sqlglot as Spark reads it.
# Anything else (a subquery, a UDF, rand(), current_date(), to_date with a format) is
# dropped, which only widens the filter.
_ROW_FILTER_NODES = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Paren,
    exp.And,
    exp.Or,
    exp.Not,
    exp.EQ,
    exp.NEQ,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.Is,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Neg,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.Cast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Tuple,
    exp.Coalesce,
    exp.Lower,
    exp.Upper,
)


def read_filters(
    sql: str,
    schema: str,
    identifier: str,
    location: str | None = None,
    current_schema: str | None = None,
) -> list[ReadFilter]:
    """One filter per read of the target in `sql` (none when it does not read it)."""
    target = Target(schema, identifier, location, current_schema)
    try:
        expected = len(_reference_ends_parsed(sql, target))
        if any(t.token_type == TokenType.PIPE_GT for t in _tokens(sql)):
            # sqlglot folds `|>` steps into one SELECT, so `|> limit 1 |> where ...` would
            # read as a WHERE applied first: Spark applies them in order.
            return [WHOLE_TABLE] * max(expected, 1)
        filters = _parsed_filters(sql, target)
    except SqlglotError:
        return [WHOLE_TABLE]
    if len(filters) != expected:
        # A reference this module does not see (an IDENTIFIER clause, a path): the whole table.
        return [*filters, WHOLE_TABLE]
    return filters


def statement_reads(
    sql: str,
    schema: str,
    identifier: str,
    location: str | None = None,
    current_schema: str | None = None,
) -> list[ReadFilter]:
    """What one statement the node sent read of its target (fence/statements.py): the
    filters of its query (an EXECUTE IMMEDIATE's text), the whole table when the fence cannot
    bound it (text it cannot read, a script, a statement it cannot parse)."""
    found = classify(sql, Target(schema, identifier, location, current_schema))
    if found.kind == OPAQUE or (found.kind in (READ, UNPINNED) and found.reads is None):
        return [WHOLE_TABLE]
    if found.kind in (READ, UNPINNED):
        assert found.reads is not None
        return read_filters(found.reads, schema, identifier, location, current_schema) or [
            WHOLE_TABLE  # a read the parse cannot place: never nothing
        ]
    return read_filters(sql, schema, identifier, location, current_schema)


def _parsed_filters(sql: str, target: Target) -> list[ReadFilter]:
    filters = []
    for statement in parsed_statements(sql):
        ctes = cte_names(statement)
        for table in statement.find_all(exp.Table):
            if table.args.get("version") is not None or table.find_ancestor(exp.Hint):
                continue
            if is_subject(table):
                continue
            if not isinstance(table.this, exp.Identifier):
                continue
            if not table.db and table.name.lower() in ctes:
                continue
            if not target.matches(table.catalog or None, table.db or None, table.name):
                continue
            filters.append(_filter(table, target))
    return filters


def _filter(table: exp.Table, target: Target) -> ReadFilter:
    source = table.parent
    select = source.parent if isinstance(source, exp.From) else None
    if not isinstance(select, exp.Select) or table.args.get("pivots"):
        return WHOLE_TABLE
    if select.args.get("joins") or select.args.get("laterals") or table.args.get("sample"):
        return WHOLE_TABLE  # TABLESAMPLE picks rows before WHERE filters them
    alias = table.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        return WHOLE_TABLE  # `AS o(a, b)` renames the columns the WHERE names
    where = select.args.get("where")
    if where is None:
        return WHOLE_TABLE
    kept = [c for c in _conjuncts(where.this) if _about_target_only(c, table, target)]
    if not kept:
        return WHOLE_TABLE
    unqualified = [_unqualified(c).sql(dialect="spark") for c in kept]
    return ReadFilter(" AND ".join(f"({c})" for c in unqualified))


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    if isinstance(condition, exp.Paren):
        return _conjuncts(condition.this)
    if isinstance(condition, exp.And):
        return [*_conjuncts(condition.this), *_conjuncts(condition.expression)]
    return [condition]


def _about_target_only(condition: exp.Expression, table: exp.Table, target: Target) -> bool:
    if any(not isinstance(node, _ROW_FILTER_NODES) for node in condition.walk()):
        return False
    return all(_of_target(column, table, target) for column in condition.find_all(exp.Column))


def _of_target(column: exp.Column, table: exp.Table, target: Target) -> bool:
    """Whether `column` is provably the target's: unqualified, or qualified by the alias the
    target has here (an alias hides the table's name: `orders.x` beside `FROM s.orders t` is
    an outer table's column), or by its own `[schema.]name` when it has none. `k.f` may be a
    struct field or another table's column: not provable."""
    if not column.table:
        return True
    if column.args.get("catalog"):
        return False
    if table.alias:
        return column.table.lower() == table.alias.lower() and not column.db
    if column.table.lower() != table.name.lower():
        return False
    return not column.db or column.db.lower() == target.schema.lower()


def _unqualified(condition: exp.Expression) -> exp.Expression:
    def strip(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table:
            return exp.column(node.this.copy())
        return node

    return condition.copy().transform(strip)
