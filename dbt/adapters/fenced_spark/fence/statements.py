"""What one statement the node sends does to its target (fence/node.py decides what that
means in each phase).

Every statement of Spark 4.1 that can hold a query is one of these (its SQL reference and
grammar, SqlBaseParser.g4):

- a query (`SELECT`, `WITH`, `FROM`, `VALUES`, `TABLE`), `INSERT ... SELECT` (also `INSERT
  OVERWRITE DIRECTORY`, and `FROM t INSERT ...` with several), `MERGE ... USING`, `UPDATE`
  and `DELETE` with subqueries, `CREATE TABLE ... AS`, `... CLONE t`: READ when it names the
  target and writes another table, WRITE when it writes the target (a `WITH` or `FROM`
  before the INSERT included);
- `SET VAR[IABLE] x = (<query>)`, `DECLARE [OR REPLACE] [VARIABLE] x DEFAULT (<query>)` (Spark
  4.1 refuses a subquery in DEFAULT, INVALID_DEFAULT_VALUE.SUBQUERY_EXPRESSION), `CACHE [LAZY]
  TABLE c AS <query>`, `CREATE TEMP VIEW v AS <query>` and a temporary SQL function's body
  (read whenever the view or function is, pinned: it reads the pinned version then too): READ;
- `CREATE VIEW` / `ALTER VIEW ... AS` and a permanent function: UNPINNED. Pinned, the catalog
  would keep the old version for everyone; the node may read through it later;
- `EXECUTE IMMEDIATE '<text>'`: what its text is, pinned inside the literal; its text as a
  variable, a concatenation or a literal with escapes: UNPINNED, of the whole table;
- `CACHE TABLE t` (the target itself, no query): UNPINNED, the whole table;
- a SQL script (`BEGIN ... END`) naming the target: OPAQUE; one with an EXECUTE IMMEDIATE:
  UNPINNED, the whole table;
- `EXPLAIN` and `DESCRIBE QUERY` run no query; DESCRIBE, SHOW, SET of a conf, REFRESH,
  UNCACHE read no rows: nothing;
- anything else that names the target, or that sqlglot cannot tokenize and spells its name:
  UNPINNED, the whole table; OPAQUE when its verb may change a table (CALL, COPY, CONVERT,
  ...).
"""

from collections.abc import Sequence
from typing import NamedTuple

from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from dbt.adapters.fenced_spark.fence.rewriter import (
    Target,
    _dotted_name_at,
    _identifier_clause_at,
    _tokens,
    command_tokens,
    immediate_literal,
    pin_self_reads,
)

READ = "read"  # reads the target: pinned, and in the footprint
UNPINNED = "unpinned"  # reads the target where no pin reaches: run as written, in the footprint
WRITE = "write"  # changes the target: a step of ours
# May read and change the target in ways the fence cannot see (a SQL script): a step of ours
# (strict, tagged) that reads the whole table.
OPAQUE = "opaque"
READS = (READ, UNPINNED, OPAQUE)


class Classified(NamedTuple):
    kind: str | None
    # The SQL whose reads of the target the footprint parses (an EXECUTE IMMEDIATE's text);
    # None: the whole table.
    reads: str | None = None


_QUERY_STARTS = {
    TokenType.SELECT,
    TokenType.WITH,
    TokenType.FROM,
    TokenType.VALUES,
    TokenType.TABLE,
    TokenType.L_PAREN,
}
# Statements that change a table, named right after these words (and the fillers below).
_WRITE_VERBS = {
    "ALTER",
    "COMMENT",
    "CREATE",
    "DELETE",
    "DROP",
    "INSERT",
    "MERGE",
    "OPTIMIZE",
    "REORG",
    "REPLACE",
    "RESTORE",
    "TRUNCATE",
    "UPDATE",
    "VACUUM",
}
_FILLERS = {"EXISTS", "FROM", "IF", "INTO", "NOT", "ON", "OR", "OVERWRITE", "REPLACE", "TABLE"}
# Statements that run no query and read no rows of a table they name.
_NO_ROWS = {
    "ADD",
    "CLEAR",
    "DESC",
    "DESCRIBE",
    "EXPLAIN",
    "GRANT",
    "LIST",
    "REFRESH",
    "RESET",
    "REVOKE",
    "SET",
    "SHOW",
    "UNCACHE",
    "USE",
}
# Statements that may change a table they name, in ways not parsed here.
_MAY_WRITE = {"CALL", "CONVERT", "COPY", "FSCK", "GENERATE", "IMPORT", "MSCK", "REPAIR", "SYNC"}


def statement_kind(
    sql: str,
    schema: str,
    identifier: str,
    location: str | None = None,
    current_schema: str | None = None,
) -> str | None:
    """READ, UNPINNED, WRITE or OPAQUE for what `sql` does to the target; None when it does
    not touch it."""
    return classify(sql, Target(schema, identifier, location, current_schema)).kind


def pin_statement(
    sql: str,
    schema: str,
    identifier: str,
    version: int,
    location: str | None = None,
    current_schema: str | None = None,
) -> str:
    """`sql` (a READ) with its reads of the target pinned, inside an EXECUTE IMMEDIATE's
    literal too."""
    literal = immediate_literal(sql)
    if literal is not None:
        end = literal.start + len(literal.text)
        inner = pin_statement(literal.text, schema, identifier, version, location, current_schema)
        return sql[: literal.start] + inner + sql[end:]
    return pin_self_reads(sql, schema, identifier, version, location, current_schema)


def leaves_state(sql: str) -> bool:
    """Whether a statement keeps something in the session or a table (a variable, a cache, a
    view, rows written): anything but a plain query, whose rows only its caller sees."""
    try:
        tokens = _tokens(sql)
    except SqlglotError:
        return True
    if not tokens or tokens[0].token_type not in _QUERY_STARTS:
        return bool(tokens)
    dml = (TokenType.INSERT, TokenType.MERGE, TokenType.UPDATE, TokenType.DELETE)
    return any(t.token_type in dml for t in tokens)


def classify(sql: str, target: Target) -> Classified:
    try:
        tokens = _tokens(sql)
    except SqlglotError:
        # Not even tokenized (a quote left open): a statement that spells the target's name
        # may read any of it.
        return Classified(UNPINNED) if _spells(sql, target) else Classified(None)
    if not tokens:
        return Classified(None)
    verb = tokens[0].text.upper()
    if verb == "EXECUTE":
        return _immediate(sql, tokens, target)
    if verb == "BEGIN":
        return _script(sql, tokens, target)
    if verb in _WRITE_VERBS:
        written = _written_name(sql, tokens)
        if written is not None and target.matches_parts(written):
            return Classified(WRITE)
        view = _made_view_or_function(tokens)
        if view is not None and _reads(sql, target):
            return Classified(READ if view == "temporary" else UNPINNED, sql)
        return _read(sql, target)
    if tokens[0].token_type in _QUERY_STARTS:
        if _writes(tokens, target):
            return Classified(WRITE)  # WITH ... INSERT INTO t, FROM s INSERT INTO t ...
        return _read(sql, target)
    if verb == "LOAD":
        loaded = _name_after_table(tokens)  # LOAD DATA ... INTO TABLE t
        return Classified(WRITE if loaded is not None and target.matches_parts(loaded) else None)
    if verb == "SET":
        if len(tokens) > 1 and tokens[1].text.upper() in ("VAR", "VARIABLE"):
            return _read(sql, target)
        return Classified(None)
    if verb == "DECLARE":
        return _read(sql, target)
    if verb == "CACHE":
        return _cache(sql, tokens, target)
    if verb in _NO_ROWS:
        return Classified(None)
    if not _names(sql, tokens, target):
        return Classified(None)
    return Classified(OPAQUE if verb in _MAY_WRITE else UNPINNED)


def _read(sql: str, target: Target) -> Classified:
    return Classified(READ, sql) if _reads(sql, target) else Classified(None)


def _reads(sql: str, target: Target) -> bool:
    pinned = pin_self_reads(
        sql, target.schema, target.identifier, 0, target.location, target.current_schema
    )
    return pinned != sql


def _immediate(sql: str, tokens: Sequence[Token], target: Target) -> Classified:
    literal = immediate_literal(sql, tokens)
    if literal is None:
        # Text the fence cannot read (a variable, a concatenation, a literal with escapes) may
        # read any row of the target, whether or not it spells its name.
        return Classified(UNPINNED)
    inner = classify(literal.text, target)
    outside = sql[: literal.start] + sql[literal.start + len(literal.text) :]
    if inner.kind is None and _names(outside, _tokens(outside), target):
        return Classified(UNPINNED)  # the target in its USING: not parsed here
    return inner


def _script(sql: str, tokens: Sequence[Token], target: Target) -> Classified:
    """A SQL script's statements read, write and set variables in turn: it is sent as one."""
    if _names(sql, tokens, target):
        return Classified(OPAQUE)
    if any(t.text.upper() == "EXECUTE" for t in tokens):
        return Classified(UNPINNED)  # its text may read the target without naming it
    return Classified(None)


def _cache(sql: str, tokens: Sequence[Token], target: Target) -> Classified:
    """`CACHE [LAZY] TABLE name [OPTIONS (...)] [[AS] query]`: the query is a read, pinned;
    without one, `name` is a table read whole (eagerly, or at first use), which no pin reaches."""
    name = _name_after_table(tokens)
    if name is not None and target.matches_parts(name) and not _has_query(tokens):
        return Classified(UNPINNED)
    return _read(sql, target)


def _has_query(tokens: Sequence[Token]) -> bool:
    return any(t.token_type in (TokenType.SELECT, TokenType.WITH, TokenType.FROM) for t in tokens)


def _name_after_table(tokens: Sequence[Token]) -> list[str] | None:
    for i, token in enumerate(tokens[:-1]):
        if token.token_type == TokenType.TABLE:
            found = _identifier_clause_at(tokens, i + 1) or _dotted_name_at(tokens, i + 1)
            return found[0] if found else None
    return None


def _made_view_or_function(tokens: Sequence[Token]) -> str | None:
    """`temporary` for `CREATE [OR REPLACE] [GLOBAL] TEMP[ORARY] VIEW|FUNCTION`, `permanent`
    for a view or function of the catalog (`ALTER VIEW ... AS` too); None for anything else."""
    words = [t.text.upper() for t in tokens[:6]]
    if words[:2] == ["ALTER", "VIEW"]:
        return "permanent"
    if words[:1] != ["CREATE"]:
        return None
    temporary = False
    for word in words[1:]:
        if word in ("VIEW", "FUNCTION"):
            return "temporary" if temporary else "permanent"
        if word in ("TEMP", "TEMPORARY"):
            temporary = True
        elif word not in ("OR", "REPLACE", "GLOBAL"):
            return None
    return None


def _written_name(sql: str, tokens: Sequence[Token]) -> list[str] | None:
    rest = command_tokens(sql, tokens)
    if rest is not None:
        # sqlglot keeps the rest of a statement it does not parse (OPTIMIZE t) as one string.
        tokens = [tokens[0], *rest[1]]
    i = 1
    while i < len(tokens) and tokens[i].text.upper() in _FILLERS:
        i += 1
    if i >= len(tokens):
        return None
    found = _identifier_clause_at(tokens, i) or _dotted_name_at(tokens, i)
    return found[0] if found else None


def _writes(tokens: Sequence[Token], target: Target) -> bool:
    """A DML statement after a WITH clause (`WITH c AS (...) INSERT INTO t ...`) or a FROM
    (`FROM s INSERT INTO a SELECT ... INSERT INTO t SELECT ...`) that writes the target."""
    for i, token in enumerate(tokens):
        kind = token.token_type
        if kind not in (TokenType.INSERT, TokenType.MERGE, TokenType.UPDATE, TokenType.DELETE):
            continue
        if i and tokens[i - 1].text.upper() == "THEN":
            continue  # a MERGE's `WHEN MATCHED THEN UPDATE`, not a statement
        j = i + 1
        while j < len(tokens) and tokens[j].text.upper() in _FILLERS:
            j += 1
        found = j < len(tokens) and (_identifier_clause_at(tokens, j) or _dotted_name_at(tokens, j))
        if found and target.matches_parts(found[0]):
            return True
    return False


def _names(sql: str, tokens: Sequence[Token], target: Target) -> bool:
    """Whether the statement spells the target as a name anywhere, bare too when the current
    schema is the target's (what a statement not parsed here could do anything with)."""
    rest = command_tokens(sql, tokens)
    if rest is not None:
        tokens = rest[1]
    for i in range(len(tokens)):
        if i > 0 and tokens[i - 1].token_type == TokenType.DOT:
            continue
        found = _identifier_clause_at(tokens, i) or _dotted_name_at(tokens, i)
        if found and target.matches_parts(found[0]):
            return True
    return False


def _spells(sql: str, target: Target) -> bool:
    """A text search, for SQL that cannot be tokenized: the target's name or location, in
    any case, anywhere."""
    text = sql.lower()
    location = target.location
    return target.identifier.lower() in text or bool(location and location.lower() in text)
