"""Pin every self-read of the target to `VERSION AS OF vB`.

sqlglot's Spark parser finds the table references (so string literals, comments, hints,
column prefixes like `schema.t.col` and struct fields are never touched); the rewrite is a
text insertion at the reference's end offset, so the user's SQL stays as written elsewhere.
When sqlglot cannot parse the SQL, a token-level scan with sqlglot's tokenizer does the
same job with the grammar rules spelled out below.

A reference is `[spark_catalog.]schema.identifier` in any case or quoting, Spark's identifier
clause `IDENTIFIER('schema.identifier')` over a string literal, and, when the caller knows the
table's location, Delta's path reader ``delta.`<location>` ``.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

# `spark_catalog` is the session catalog: `spark_catalog.s.t` is the same table as `s.t`.
SESSION_CATALOG = "spark_catalog"
# ``delta.`/path` `` reads the Delta table at /path, whatever its name in the metastore.
PATH_FORMAT = "delta"


@dataclass(frozen=True)
class Target:
    schema: str
    identifier: str
    location: str | None = None
    # The session's current schema (after a `USE`): an unqualified name is read in it.
    current_schema: str | None = None

    def matches(self, catalog: str | None, schema: str | None, name: str) -> bool:
        if schema is None:
            schema = self.current_schema
        if (catalog and catalog.lower() != SESSION_CATALOG) or schema is None:
            return False
        named = schema.lower() == self.schema.lower() and name.lower() == self.identifier.lower()
        at_location = (
            self.location is not None
            and schema.lower() == PATH_FORMAT
            and _same_location(name, self.location)
        )
        return named or at_location

    def matches_parts(self, names: Sequence[str]) -> bool:
        if len(names) not in (1, 2, 3):
            return False
        schema = names[-2] if len(names) > 1 else None
        return self.matches(names[0] if len(names) == 3 else None, schema, names[-1])


def _same_location(path: str, location: str) -> bool:
    return _normalized_location(path) == _normalized_location(location)


def _normalized_location(path: str) -> str:
    # `file:///x`, `file:/x` and `/x` are the same local directory, with or without a final `/`.
    if path[:7].lower() == "file://":
        path = path[7:]
    elif path[:5].lower() == "file:":
        path = path[5:]
    return path.rstrip("/") or path[:1]


def pin_self_reads(
    sql: str,
    schema: str,
    identifier: str,
    version: int,
    location: str | None = None,
    current_schema: str | None = None,
) -> str:
    """Return `sql` with each read of `schema.identifier` (or of its `location`, or of the
    bare name when `current_schema` is its schema) pinned."""
    target = Target(schema, identifier, location, current_schema)
    try:
        refs = _reference_ends_parsed(sql, target)
    except SqlglotError:
        refs = _reference_ends_tokenized(sql, target)
    for ref in sorted(set(refs), key=lambda r: r.end, reverse=True):
        if _TIME_TRAVEL.match(sql, ref.end):
            continue  # the user time-travels on purpose, in a form the parser took for a name
        # `` `s`.`t`o `` is `s`.`t` aliased `o`; Spark would lex `7o` as one name.
        gap = " " if _WORD_START.match(sql, ref.end) else ""
        head = sql[: ref.end]
        if ref.clause is not None:
            # Spark 4.1 parses `IDENTIFIER('s.t') VERSION AS OF n` but resolves none of its
            # columns: the clause is written out as the name it holds.
            start, names = ref.clause
            head = sql[:start] + ".".join("`" + n.replace("`", "``") + "`" for n in names)
        pinned = f" VERSION AS OF {version}"
        if ref.table_query is not None:
            # `TABLE s.t` (a query, or after EXCEPT/UNION) takes no time travel: the same
            # rows as a subquery.
            keyword, name = ref.table_query
            head = f"{sql[:keyword]}(SELECT * FROM {head[name:]}"
            pinned += ")"
        sql = f"{head}{pinned}{gap}{sql[ref.end :]}"
    return sql


class Ref(NamedTuple):
    """A reference to the target: where it ends, and for `IDENTIFIER('...')` where the clause
    starts and the name parts it holds."""

    end: int
    clause: tuple[int, tuple[str, ...]] | None = None
    # `TABLE <name>` as a query: where the keyword and the name start.
    table_query: tuple[int, int] | None = None


def as_subquery(sql: str) -> str:
    """The model SQL as a write's source. A statement may end in `;` (and comments after it),
    a subquery may not: the text is cut at its last token that is not a `;`. A trailing line
    comment ends before the parenthesis."""
    try:
        tokens = _tokens(sql)
    except SqlglotError:
        tokens = []
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        sql = sql[: tokens.pop().start]
    return f"(\n{sql.rstrip()}\n)"


def reads_self(
    sql: str,
    schema: str,
    identifier: str,
    location: str | None = None,
    current_schema: str | None = None,
) -> bool:
    return pin_self_reads(sql, schema, identifier, 0, location, current_schema) != sql


def names_bare(sql: str, identifier: str) -> bool:
    """Whether `sql` has `identifier` as a name of its own (not after or before a dot): only
    then does the session's current schema matter. Asked of every statement a fenced node
    runs: SQL without the name at all is answered without tokenizing it."""
    if identifier.lower() not in sql.lower():
        return False
    try:
        tokens = _tokens(sql)
    except SqlglotError:
        return False
    literal = immediate_literal(sql, tokens)
    if literal is not None:
        return names_bare(literal.text, identifier)  # the SQL that EXECUTE IMMEDIATE runs
    for i, token in enumerate(tokens):
        if token.token_type not in _NAME_TYPES or token.text.lower() != identifier.lower():
            continue
        dotted = (i > 0 and tokens[i - 1].token_type == TokenType.DOT) or (
            i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.DOT
        )
        if not dotted:
            return True
    return False


def cte_names(statement: exp.Expr) -> set[str]:
    """The names a WITH clause of the statement defines: a bare name among them reads the
    CTE (taken so for any scope: a miss leaves a read unpinned, never a CTE pinned)."""
    return {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE)}


_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Spark's temporal clause, every spelling it takes (sqlglot parses `SYSTEM_VERSION AS OF`
# without FOR as an alias): `[FOR] {SYSTEM_VERSION | VERSION | SYSTEM_TIME | TIMESTAMP} AS OF`.
_TIME_TRAVEL = re.compile(
    r"\s*(?:FOR\s+)?(?:SYSTEM_VERSION|VERSION|SYSTEM_TIME|TIMESTAMP)\s+AS\s+OF\b", re.I
)
_WORD_START = re.compile(r"[\w`]")


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


class Literal(NamedTuple):
    """The text of `EXECUTE IMMEDIATE '<text>'` and where it starts in the statement."""

    start: int
    text: str


def command_tokens(sql: str, tokens: Sequence[Token]) -> tuple[int, list[Token]] | None:
    """sqlglot keeps what follows a command's keyword (EXECUTE, CALL, EXPLAIN) as one string:
    its tokens, and the offset in `sql` where that rest starts; None for another statement."""
    commands = sqlglot.Dialect.get_or_raise("spark").tokenizer_class.COMMANDS
    if len(tokens) != 2 or tokens[0].token_type not in commands:
        return None
    rest = tokens[1].text
    start = sql.find(rest, tokens[0].end + 1)
    if start < 0:
        return None
    return start, _tokens(rest)


def immediate_literal(sql: str, tokens: Sequence[Token] | None = None) -> Literal | None:
    """The SQL text of an `EXECUTE IMMEDIATE` given as one string literal whose text is as
    written (no escape, no doubled quote: an insertion into it is one into the text Spark
    runs); None for any other statement or text (a variable, `'a' || 'b'`, `'a' 'b'`)."""
    rest = command_tokens(sql, tokens if tokens is not None else _tokens(sql))
    if rest is None:
        return None
    offset, sub = rest
    if len(sub) < 2 or sub[0].text.upper() != "IMMEDIATE" or sub[1].token_type not in _STRING_TYPES:
        return None
    if len(sub) > 2 and sub[2].text.upper() not in ("INTO", "USING"):
        return None
    literal = sub[1]
    raw = sql[offset + literal.start : offset + literal.end + 1]
    quote = 2 if raw[:1] in ("r", "R") else 1
    if raw[quote:-1] != literal.text:
        return None
    return Literal(offset + literal.start + quote, literal.text)


# One part of the name in an identifier clause's string: Spark parses it as a multipart name.
_STRING_PART = re.compile(r"\s*(?:`((?:[^`]|``)*)`|(\w+))\s*")


def name_parts(text: str) -> list[str] | None:
    """`a`.`b` or a.b as its parts, unquoted; None when it is not one multipart name."""
    parts: list[str] = []
    pos = 0
    while True:
        part = _STRING_PART.match(text, pos)
        if part is None:
            return None
        parts.append(part[2] if part[1] is None else part[1].replace("``", "`"))
        pos = part.end()
        if pos == len(text):
            return parts
        if text[pos] != ".":
            return None
        pos += 1


def parsed_statements(sql: str, tokens: Sequence[Token] | None = None) -> list[exp.Expr]:
    """sqlglot's parse of `sql`. What it keeps as an opaque Command (`SET VAR a = (...), b = 1`,
    `EXPLAIN ...`) hides its tables: raised, so that callers scan the tokens instead."""
    parser = sqlglot.Dialect.get_or_raise("spark").parser()
    statements = [s for s in parser.parse(list(tokens or _tokens(sql)), sql) if s is not None]
    if any(isinstance(s, exp.Command) for s in statements):
        raise SqlglotError("parsed as a command")
    return statements


def is_subject(table: exp.Table) -> bool:
    """The name a CREATE or CACHE makes (`CACHE TABLE c AS ...`, a view, a function), which
    is no read even when it is spelled as the target."""
    node: exp.Expr = table
    if isinstance(table.parent, exp.Schema) and table.parent.this is table:
        node = table.parent
    parent = node.parent
    subjects = (exp.Create, exp.Cache, exp.UserDefinedFunction)
    return isinstance(parent, subjects) and parent.this is node


def _reference_ends_parsed(sql: str, target: Target) -> list[Ref]:
    tokens = _tokens(sql)
    ends = []
    for statement in parsed_statements(sql, tokens):
        ctes = cte_names(statement)
        for table in statement.find_all(exp.Table):
            if table.args.get("version") is not None:
                continue  # the user time-travels on purpose
            if table.find_ancestor(exp.Hint) is not None:
                continue  # a hint names a table, it does not read one; its offsets are its own
            if is_subject(table):
                continue  # the view, cache or function the statement makes: not a read
            end = _parsed_reference_end(sql, tokens, table, target, ctes)
            if end is not None:
                ends.append(end)
    return ends


def _parsed_reference_end(
    sql: str, tokens: Sequence[Token], table: exp.Table, target: Target, ctes: set[str]
) -> Ref | None:
    if isinstance(table.this, exp.Identifier):
        if not table.db and table.name.lower() in ctes:
            return None
        if not target.matches(table.catalog or None, table.db or None, table.name):
            return None
        return Ref(_identifier_end(sql, table.this))
    literal = _identifier_clause_literal(table.this)
    if literal is None or table.args.get("db") or table.args.get("catalog"):
        return None  # a table function, not a table
    names = name_parts(literal.this)
    if names is None or (len(names) == 1 and names[0].lower() in ctes):
        return None
    if not target.matches_parts(names):
        return None
    start, end = _clause_span(tokens, literal)
    return Ref(end, (start, tuple(names)))


def _identifier_clause_literal(node: exp.Expression) -> exp.Literal | None:
    if not isinstance(node, exp.Anonymous) or node.name.upper() != "IDENTIFIER":
        return None
    args = node.expressions
    if len(args) != 1 or not isinstance(args[0], exp.Literal) or not args[0].is_string:
        return None  # `IDENTIFIER(:param)`, `IDENTIFIER('s' || '.t')`: not known here
    return args[0]


def _identifier_end(sql: str, identifier: exp.Identifier) -> int:
    start, end = identifier.meta.get("start"), identifier.meta.get("end")
    if start is None or end is None:
        raise SqlglotError("identifier without a position")
    name = identifier.name
    spelled = "`" + name.replace("`", "``") + "`" if identifier.quoted else name
    # An offset into some other text (sqlglot re-parses a few spans on their own) would
    # corrupt the SQL: only an offset that spells the name here is used.
    if sql[start : end + 1] != spelled:
        raise SqlglotError(f"identifier {name!r} is not at offset {start}")
    return end + 1


def _clause_span(tokens: Sequence[Token], literal: exp.Literal) -> tuple[int, int]:
    """From `IDENTIFIER` to just after its `)`, found by the literal's position."""
    start = literal.meta.get("start")
    for i, token in enumerate(tokens[:-1]):
        if i >= 2 and token.start == start and tokens[i + 1].token_type == TokenType.R_PAREN:
            return tokens[i - 2].start, tokens[i + 1].end + 1
    raise SqlglotError("identifier clause without its closing parenthesis")


_NAME_TYPES = {TokenType.VAR, TokenType.IDENTIFIER}
_STRING_TYPES = {TokenType.STRING, TokenType.RAW_STRING}
_NOT_A_TABLE_AFTER = {TokenType.DOT, TokenType.L_PAREN}


def _reference_ends_tokenized(sql: str, target: Target) -> list[Ref]:
    tokens = _tokens(sql)
    ends = []
    for i in range(len(tokens)):
        clause = _identifier_clause_at(tokens, i)
        parts = clause or _dotted_name_at(tokens, i)
        if parts is None:
            continue
        names, last = parts
        if len(names) == 1 or not target.matches_parts(names):
            continue  # unparsed, a bare name may be a CTE's: left as written
        nxt = tokens[last + 1] if last + 1 < len(tokens) else None
        if nxt is not None and nxt.token_type in _NOT_A_TABLE_AFTER:
            continue  # `schema.t.col` is a column, `schema.t(...)` a function
        if nxt is not None and nxt.text.upper() in {"VERSION", "TIMESTAMP", "FOR"}:
            continue
        spelled = (tokens[i].start, tuple(names)) if clause else None
        ends.append(Ref(tokens[last].end + 1, spelled, _table_query(tokens, i)))
    return ends


# Words before `TABLE <name>` that make it a statement's target, not a query.
_TABLE_TARGET_AFTER = {
    "INTO",
    "CREATE",
    "REPLACE",
    "DROP",
    "ALTER",
    "TRUNCATE",
    "ANALYZE",
    "DESCRIBE",
    "DESC",
    "MSCK",
    "REFRESH",
    "CACHE",
    "UNCACHE",
    "OVERWRITE",
    "EXTERNAL",
    "TEMPORARY",
    "TEMP",
    "RESTORE",
    "OPTIMIZE",
    "VACUUM",
    "CONVERT",
    "CLONE",
    "SHALLOW",
    "DEEP",
    "LAZY",
    "INSERT",
    "SHOW",
    "EXISTS",
    "GENERATE",
    "FSCK",
    "REORG",
    "MERGE",
    "UPDATE",
    "DELETE",
    "FROM",
}


def _table_query(tokens: Sequence[Token], i: int) -> tuple[int, int] | None:
    if i == 0 or tokens[i - 1].text.upper() != "TABLE":
        return None
    if i > 1 and tokens[i - 2].text.upper() in _TABLE_TARGET_AFTER:
        return None
    return tokens[i - 1].start, tokens[i].start


def _dotted_name_at(tokens: Sequence[Token], i: int) -> tuple[list[str], int] | None:
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


def _identifier_clause_at(tokens: Sequence[Token], i: int) -> tuple[list[str], int] | None:
    """`IDENTIFIER('<name>')` starting at token i: the name's parts and the `)` token."""
    clause = tokens[i : i + 4]
    if len(clause) < 4 or (i > 0 and tokens[i - 1].token_type == TokenType.DOT):
        return None
    keyword, open_paren, string, close_paren = clause
    if (
        keyword.token_type not in _NAME_TYPES
        or keyword.text.upper() != "IDENTIFIER"
        or open_paren.token_type != TokenType.L_PAREN
        or string.token_type not in _STRING_TYPES
        or close_paren.token_type != TokenType.R_PAREN
    ):
        return None
    names = name_parts(string.text)
    return None if names is None else (names, i + 3)
