"""A model's `sql_header`, one statement at a time.

dbt renders `sql_header` in front of the statement it belongs to, in one string. Spark runs one
statement per call, so a header such as `set time zone 'UTC';` would fail the model. The adapter
runs the header's statements on their own first, in the model's session, then the statement.
"""

from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from dbt.adapters.fenced_spark.run_state import without_leading_comments


def statements(header: str) -> list[str]:
    """The header's statements, split at semicolons outside literals and comments."""
    try:
        tokens = Spark().tokenize(header)
    except TokenError:
        return [header.strip().rstrip(";")] if header.strip() else []
    parts, start = [], 0
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            parts.append(header[start : token.start])
            start = token.end + 1
    parts.append(header[start:])
    return [p.strip() for p in parts if without_leading_comments(p).strip()]


def split_off(sql: str, header: str | None) -> tuple[list[str], str] | None:
    """The header's statements and what follows them, when `sql` starts with `header` (after
    dbt's query comment); None when it does not."""
    head = (header or "").strip()
    at = sql.find(head) if head else -1
    if at < 0 or without_leading_comments(sql[:at]).strip():
        return None
    return statements(head), sql[:at] + sql[at + len(head) :]
