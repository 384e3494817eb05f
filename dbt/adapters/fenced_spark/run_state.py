"""What the run sets for every model: session statements of on-run-start/-end and run-operation,
replayed into each connection's own session.

Every dbt connection has its own Spark session (so a model's pre-hook `SET` and the fence's
confs never reach another model), but the hooks run in dbt's "master" connection, whose session
no model sees. Stock dbt-spark's embedded session is one shared session, where they reach every
model. Replaying the run's session statements in order, before a connection's first statement,
gives every method (session, Thrift, Connect) what stock gives the embedded one.
"""

import re
import threading
from collections.abc import Callable

from dbt.adapters.contracts.connection import Connection
from dbt.adapters.events.logging import AdapterLogger

logger = AdapterLogger("FencedSpark")

# Statements that change a session, not data. `SET key` alone reads a conf; `SET -v` lists them.
_SESSION = re.compile(
    r"(SET\s+(TIME\s+ZONE\b|VAR(IABLE)?\b|CATALOG\b|[^=;]+=)"
    r"|RESET\b|USE\b|DECLARE\b"
    r"|CREATE\s+(OR\s+REPLACE\s+)?TEMP(ORARY)?\s+(VIEW|TABLE|FUNCTION|MACRO)\b"
    r"|DROP\s+TEMP(ORARY)?\s+(FUNCTION|VARIABLE|MACRO)\b|DROP\s+VARIABLE\b)",
    re.I,
)
_NAME = r"(`(?:[^`]|``)+`|[\w$]+)"
# A temporary table (`CREATE TEMPORARY TABLE t USING delta OPTIONS (...)`) is a temp view too.
_TEMP_VIEW = re.compile(
    r"CREATE\s+(OR\s+REPLACE\s+)?TEMP(ORARY)?\s+(?:VIEW|TABLE)\s+(IF\s+NOT\s+EXISTS\s+)?" + _NAME,
    re.I,
)
# A DROP or ALTER of one of the run's temp views changes the session; of any other view, data.
_OF_VIEW = re.compile(
    r"(DROP\s+(?:VIEW|TABLE)\s+(IF\s+EXISTS\s+)?|ALTER\s+VIEW\s+)" + _NAME + r"(?![\w$]|\s*\.)",
    re.I,
)
# `EXECUTE IMMEDIATE '<statement>'` is judged by the statement in its literal; one held in a
# variable cannot be read here, and is not replayed.
_EXECUTE = re.compile(
    r"EXECUTE\s+IMMEDIATE\s+(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\")", re.I | re.S
)
# The applied count rides on the handle, which lives exactly as long as its session.
_APPLIED = "_fenced_run_state_applied"


def is_run_connection(name: str | None) -> bool:
    """on-run-start/-end run in "master"; a run-operation's macro in "macro_<name>"."""
    return name == "master" or (name or "").startswith("macro_")


class RunState:
    def __init__(self) -> None:
        self._statements: list[str] = []
        self._temp_views: set[str] = set()
        self._lock = threading.Lock()

    def session_statement(self, sql: str) -> bool:
        return self._changes_session(without_leading_comments(sql))

    def _changes_session(self, body: str) -> bool:
        if _SESSION.match(body):
            return True
        if execute := _EXECUTE.match(body):
            inner = execute.group(1) if execute.group(1) is not None else execute.group(2)
            return self._changes_session(without_leading_comments(_unescaped(inner)))
        view = _OF_VIEW.match(body)
        return view is not None and _name(view.group(3)) in self._temp_views

    def record(self, connection: Connection, sql: str) -> None:
        """After `sql` succeeded on `connection`."""
        if not is_run_connection(connection.name):
            return
        body = without_leading_comments(sql)
        if not self._changes_session(body):
            return
        view = _TEMP_VIEW.match(body)
        with self._lock:
            if view:
                self._temp_views.add(_name(view.group(4)))
            self._statements.append(sql)
            setattr(connection.handle, _APPLIED, len(self._statements))

    def prime(self, connection: Connection, run: Callable[[str], object]) -> None:
        """Before a statement on `connection`: run what the run set and it has not seen yet."""
        with self._lock:
            statements = list(self._statements)
        if not statements:
            return
        handle = connection.handle
        applied = getattr(handle, _APPLIED, 0)
        if applied >= len(statements):
            return
        logger.debug(
            f"fenced_spark: {len(statements) - applied} session statement(s) of the run's hooks "
            f"replayed into connection {connection.name!r}"
        )
        for done, sql in enumerate(statements[applied:], start=applied + 1):
            run(sql)
            setattr(handle, _APPLIED, done)


def leading_words(sql: str, count: int = 6) -> str:
    """The statement's first `count` words (dotted names whole, other marks one each), one
    space apart: comments and line breaks between them dropped, as Spark's lexer drops them."""
    words: list[str] = []
    rest = sql
    while len(words) < count:
        rest = without_leading_comments(rest)
        word = re.match(r"[\w$.]+|\S", rest)
        if word is None:
            break
        words.append(word.group(0))
        rest = rest[word.end() :]
    return " ".join(words)


def first_word(sql: str) -> str:
    """The statement's first keyword, upper-cased, after any leading comments."""
    return (without_leading_comments(sql).split(None, 1) or [""])[0].upper()


def without_leading_comments(sql: str) -> str:
    """`sql` from its first token on: dbt's query comment and the user's own come first, and
    Spark nests block comments (`/* a /* b */ c */`). An unclosed comment leaves nothing."""
    i, n = 0, len(sql)
    while True:
        while i < n and sql[i].isspace():
            i += 1
        end = comment_end(sql, i)
        if end < 0:
            return ""
        if end == i:
            return sql[i:]
        i = end


def comment_end(sql: str, i: int) -> int:
    """Past the comment that starts at `i`: `--` to the end of its line (Spark's lexer ends it
    at a carriage return too, and goes on past a backslash-newline), `/* */` nested as Spark
    nests them. `i` when none starts there; -1 for a block comment never closed."""
    if sql.startswith("--", i):
        end = i + 2
        while end < len(sql):
            if sql.startswith("\\\n", end):
                end += 2
            elif sql[end] in "\r\n":
                return end + 1
            else:
                end += 1
        return len(sql)
    if not sql.startswith("/*", i):
        return i
    depth = 0
    while i < len(sql):
        if sql.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif sql.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    return -1


def _unescaped(literal: str) -> str:
    return re.sub(r"\\(.)", r"\1", literal, flags=re.S)


def _name(quoted: str) -> str:
    if quoted.startswith("`"):
        return quoted[1:-1].replace("``", "`").lower()
    return quoted.lower()
