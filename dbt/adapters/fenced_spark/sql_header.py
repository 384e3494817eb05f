"""A model's `sql_header`, one statement at a time.

dbt renders `sql_header` in front of the statement it belongs to, in one string. Spark runs one
statement per call, so a header such as `set time zone 'UTC';` would fail the model. The adapter
runs the header's statements on their own first, once per node, in the node's session, then the
statement.
"""

from dataclasses import dataclass

from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from dbt.adapters.fenced_spark.run_state import without_leading_comments


@dataclass
class NodeHeader:
    node: str  # the node's name, for an error in the header
    text: str
    ran: bool = False  # its session has it: a second run would redo a CREATE FUNCTION


def of_node(node: object) -> NodeHeader | None:
    config = getattr(node, "config", None)
    text = config.get("sql_header") if config is not None else None
    if not isinstance(text, str) or not without_leading_comments(text).strip():
        return None
    return NodeHeader(str(getattr(node, "name", "")), text)


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
