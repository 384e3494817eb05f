"""Pin every self-read of the target to `VERSION AS OF vB`.

sqlglot's Spark parser finds the table references (so string literals, comments, column
prefixes like `schema.t.col` and struct fields are never touched); the rewrite is a text
insertion at the reference's end offset, so the user's SQL stays as written elsewhere.
When sqlglot cannot parse the SQL, a token-level scan with sqlglot's tokenizer does the
same job with the grammar rules spelled out below.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

# `spark_catalog` is the session catalog: `spark_catalog.s.t` is the same table as `s.t`.
SESSION_CATALOG = "spark_catalog"


@dataclass(frozen=True)
class Target:
    schema: str
    identifier: str

    def matches(self, catalog: str | None, schema: str | None, name: str) -> bool:
        if catalog and catalog.lower() != SESSION_CATALOG:
            return False
        return (
            schema is not None
            and schema.lower() == self.schema.lower()
            and name.lower() == self.identifier.lower()
        )


def pin_self_reads(sql: str, schema: str, identifier: str, version: int) -> str:
    """Return `sql` with each read of `schema.identifier` pinned to `version`."""
    target = Target(schema, identifier)
    try:
        ends = _reference_ends_parsed(sql, target)
    except SqlglotError:
        ends = _reference_ends_tokenized(sql, target)
    for end in sorted(set(ends), reverse=True):
        sql = f"{sql[:end]} VERSION AS OF {version}{sql[end:]}"
    return sql


def reads_self(sql: str, schema: str, identifier: str) -> bool:
    return pin_self_reads(sql, schema, identifier, 0) != sql


_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _tokens(sql: str) -> list[Token]:
    dialect = sqlglot.Dialect.get_or_raise("spark")
    tokens = dialect.tokenize(sql)
    # Spark takes a keyword as a part of a dotted name (`s.select`, `from.t`); sqlglot
    # tokenizes it as the keyword and then fails, or drops the part (`from.t` -> `t`).
    for i, token in enumerate(tokens):
        dotted = (i > 0 and tokens[i - 1].token_type == TokenType.DOT) or (
            i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.DOT
        )
        if dotted and _BARE_WORD.fullmatch(sql[token.start : token.end + 1]):
            token.token_type = TokenType.VAR
    return tokens


def _reference_ends_parsed(sql: str, target: Target) -> list[int]:
    ends = []
    for statement in sqlglot.Dialect.get_or_raise("spark").parser().parse(_tokens(sql), sql):
        if statement is None:
            continue
        for table in statement.find_all(exp.Table):
            if table.args.get("version") is not None:
                continue  # the user time-travels on purpose
            if not isinstance(table.this, exp.Identifier):
                continue  # a table function, not a table
            if target.matches(table.catalog or None, table.db or None, table.name):
                end = table.this.meta.get("end")
                if end is None:
                    raise SqlglotError("identifier without a position")
                ends.append(end + 1)
    return ends


_NAME_TYPES = {TokenType.VAR, TokenType.IDENTIFIER}
_NOT_A_TABLE_AFTER = {TokenType.DOT, TokenType.L_PAREN}


def _reference_ends_tokenized(sql: str, target: Target) -> list[int]:
    tokens = _tokens(sql)
    ends = []
    for i in range(len(tokens)):
        parts = _dotted_name_at(tokens, i)
        if parts is None:
            continue
        names, last = parts
        catalog = names[0] if len(names) == 3 else None
        if len(names) < 2 or not target.matches(catalog, names[-2], names[-1]):
            continue
        nxt = tokens[last + 1] if last + 1 < len(tokens) else None
        if nxt is not None and nxt.token_type in _NOT_A_TABLE_AFTER:
            continue  # `schema.t.col` is a column, `schema.t(...)` a function
        if nxt is not None and nxt.text.upper() in {"VERSION", "TIMESTAMP", "FOR"}:
            continue
        ends.append(tokens[last].end + 1)
    return ends


def _dotted_name_at(tokens: Sequence[Token], i: int) -> tuple | None:
    """The dotted name starting at token i, unless i is in the middle of one."""
    if tokens[i].token_type not in _NAME_TYPES:
        return None
    if i > 0 and tokens[i - 1].token_type == TokenType.DOT:
        return None
    names = [tokens[i].text]
    last = i
    while (
        last + 2 < len(tokens)
        and tokens[last + 1].token_type == TokenType.DOT
        and tokens[last + 2].token_type in _NAME_TYPES
        and len(names) < 4
    ):
        names.append(tokens[last + 2].text)
        last += 2
    if len(names) > 3:
        return None
    return names, last
