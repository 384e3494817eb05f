"""A model's `sql_header`, one statement at a time, and the part of it that opens the query.

dbt renders `sql_header` in front of the statement it belongs to, in one string. Spark runs one
statement per call, so a header such as `set time zone 'UTC';` would fail the model. The adapter
runs the header's statements on their own first, once per node, in the node's session, then the
statement. A header may instead end in the start of the model's query, not ended by `;` (dbt's
own `with _variables as (...)`): that fragment stays glued in front of the query.
"""

import re
from dataclasses import dataclass

from dbt_common.exceptions import DbtRuntimeError
from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from dbt.adapters.fenced_spark.run_state import first_word, without_leading_comments

_WITH = re.compile(r"with\b", re.IGNORECASE)


@dataclass
class NodeHeader:
    node: str  # the node's name, for an error in the header
    text: str  # the header's whole statements: what runs on its own
    ran: bool = False  # its session has it: a second run would redo a CREATE FUNCTION
    fragment: str = ""  # the start of the model's query that ends the header, if any


def of_node(node: object) -> NodeHeader | None:
    config = getattr(node, "config", None)
    text = config.get("sql_header") if config is not None else None
    if not isinstance(text, str) or not without_leading_comments(text).strip():
        return None
    statements, fragment = split(text)
    return NodeHeader(str(getattr(node, "name", "")), statements, fragment=fragment)


def split(header: str) -> tuple[str, str]:
    """(its whole statements, the fragment after them): the header's part after its last `;`
    is a fragment when it opens a query (first token WITH, or `select /*+ hint */`); any
    other part without a `;` is a statement, as before (`set x = 20`: glued in front of a
    CREATE, Spark would read the CREATE as the SET's value)."""
    try:
        tokens = Spark().tokenize(header)
    except TokenError:
        return header, ""
    ends = [i for i, token in enumerate(tokens) if token.token_type == TokenType.SEMICOLON]
    after = ends[-1] + 1 if ends else 0
    opens = [token.token_type for token in tokens[after : after + 2]]
    if opens[:1] != [TokenType.WITH] and opens != [TokenType.SELECT, TokenType.HINT]:
        return header, ""
    cut = tokens[after - 1].end + 1 if ends else 0
    return header[:cut], header[cut:].strip()


def in_front(fragment: str, query: str, node: str) -> str:
    """`query` with the header's fragment in front, where it opens the query: inside a CREATE
    (Spark has no WITH ... CREATE TABLE), a staged view or the write's source."""
    if not fragment:
        return query
    if all(_WITH.match(without_leading_comments(sql)) for sql in (fragment, query)):
        # Spark takes one WITH per query: `with a as (...) with b as (...)` does not parse.
        raise DbtRuntimeError(
            f"{node}: its sql_header ends in a WITH clause that opens the model's query (no "
            "`;` after it), and the query starts with a WITH of its own, which Spark does not "
            "parse; move the header's CTEs into the model's WITH, or end the header with `;` "
            "if it is a statement of its own"
        )
    return f"{fragment}\n{query}"


def check_placed(sql: str, fragment: str, node: str) -> None:
    """A fragment dbt glued in front of a CREATE (a stored test's, with dbt's flag
    `require_sql_header_in_test_configs`): Spark has no WITH ... CREATE TABLE, and the query
    inside is dbt's to build; said plainly rather than as Spark's syntax error."""
    head = without_leading_comments(sql)
    if fragment and head.startswith(fragment) and first_word(head[len(fragment) :]) == "CREATE":
        raise DbtRuntimeError(
            f"{node}: its sql_header ends in `{fragment.split(None, 1)[0]} ...` with no `;`, the "
            "start of a query, and dbt put it in front of a CREATE statement, which Spark "
            "cannot take; end the header with `;` if it is a statement of its own, or move "
            "the fragment into the SQL"
        )


def statements(header: str) -> list[str]:
    """The header's statements, split at semicolons outside literals and comments."""
    try:
        tokens = Spark().tokenize(header)
    except TokenError:
        return [header.strip().rstrip(";")] if header.strip() else []
    # A part with a token in it is sent, even one Spark's lexer reads as all comment (a `--`
    # comment ending in a backslash goes on to the next line): Spark refuses it, out loud.
    parts, start, tokened = [], 0, False
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            if tokened:
                parts.append(header[start : token.start])
            start, tokened = token.end + 1, False
        else:
            tokened = True
    if tokened:
        parts.append(header[start:])
    return [p.strip() for p in parts]


def has_statement(text: str) -> bool:
    """Whether anything but comments and semicolons is in `text`, as sqlglot tokenizes it: what
    Spark's lexer alone reads as a comment (a `--` line ending in a backslash) is sent, and
    Spark refuses it, rather than being dropped without a word."""
    # What follows a header is most often the node's statement: text that is no comment to
    # Spark's lexer is none to sqlglot's either (whose comments end no later), untokenized.
    head = without_leading_comments(text).lstrip()
    if head and not head.startswith(";"):
        return True
    try:
        tokens = Spark().tokenize(text)
    except TokenError:
        return bool(text.strip())
    return any(token.token_type != TokenType.SEMICOLON for token in tokens)


def split_off(sql: str, header: str) -> str | None:
    """What follows `header` when `sql` starts with it (after dbt's query comment) and it ends
    where a statement may (a hook that merely starts with the same text is not it); else None."""
    head = header.strip()
    at = sql.find(head) if head else -1
    if at < 0 or without_leading_comments(sql[:at]).strip():
        return None
    end = at + len(head)
    if end < len(sql) and not (head.endswith(";") or sql[end].isspace()):
        return None
    return sql[:at] + sql[end:]
