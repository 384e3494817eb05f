"""The Thrift sessions behind `method: thrift` and `http`, kept for a later node.

dbt closes its connection after each node and dbt-spark opens the next one with a new Thrift
session: a socket and its SASL handshake, OpenSession and pyhive's `USE`, then CloseSession at the
node's end, 45-50 ms of every node here (docs/benchmarks.md, part 8). A session in which only
statements ran that leave nothing behind is kept for the next connection instead, as Connect's
are (connect.py). What a session may have left is known from the statements it ran
(`Leftovers`); over Thrift, unlike Connect, the client cannot list a session's temp views without
a statement, so nothing is undone on release: a session that still holds a temp view or a conf it
SET, or ran anything else that changes a session (USE, a temporary function, a variable, ADD JAR,
a bare RESET), is closed as before. A kept session is asked the server's name before it serves
(GetInfo, no statement): one the server let go is closed, and a new one opened.
"""

import atexit
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Protocol

from dbt.adapters.events.logging import AdapterLogger

from dbt.adapters.fenced_spark.run_state import comment_end

logger = AdapterLogger("FencedSpark")

# A backquoted name ends at a backquote no other follows (```` is one inside it).
_NAME = r"(`(?:[^`]|``)+`(?!`)|[\w$]+)"
_KEY = r"(`(?:[^`]|``)+`(?!`)|[^=\s;`]+)"
# Statements that change no session state, only data or nothing (the statement's plain text).
_LEAVES_NOTHING = re.compile(
    r"(SELECT|WITH|FROM|VALUES|TABLE|EXPLAIN|DESCRIBE|DESC|SHOW|INSERT|MERGE|UPDATE|DELETE"
    r"|TRUNCATE|OPTIMIZE|VACUUM|ANALYZE|MSCK|RESTORE|COMMENT|REPLACE TABLE"
    r"|REFRESH TABLE|CONVERT TO DELTA|GENERATE|REORG"
    r"|ALTER (TABLE|SCHEMA|DATABASE|NAMESPACE)"
    r"|CREATE (OR REPLACE )?(TABLE|SCHEMA|DATABASE|NAMESPACE|VIEW|MATERIALIZED VIEW)"
    r"|DROP (TABLE|VIEW|SCHEMA|DATABASE|NAMESPACE))\b",
    re.I,
)
_SET = re.compile(r"SET (?!-v\b)" + _KEY + r" ?=", re.I)
_SET_TIME_ZONE = re.compile(r"SET TIME ZONE\b", re.I)
_READ = re.compile(r"SET( -v| " + _KEY + r")?$", re.I)
_RESET_KEY = re.compile(r"RESET " + _KEY + r"$", re.I)
_TEMP_VIEW = re.compile(
    r"CREATE (OR REPLACE )?TEMP(ORARY)? (?:VIEW|TABLE) (IF NOT EXISTS )?" + _NAME, re.I
)
# A DROP or ALTER (a rename among them) by a bare name may reach a temp view of the session;
# by a qualified one it cannot; by `IDENTIFIER(...)` or a double-quoted name, which is unread.
_DROP_OR_ALTER = re.compile(r"(DROP (?:VIEW|TABLE) (?:IF EXISTS )?|ALTER (?:VIEW|TABLE) )", re.I)
_BARE = re.compile(_NAME + r"(?![\w$]| ?[.(])")
_QUALIFIED = re.compile(_NAME + r" ?\.")
_DROP = re.compile(r"DROP ", re.I)
# Spark's SET writes these under another key, which a RESET of the key as written leaves set.
_ALIASES = {
    "mapred.reduce.tasks": "spark.sql.shuffle.partitions",
    "mapreduce.job.reduces": "spark.sql.shuffle.partitions",
}
# Confs whose effect a RESET does not undo (a catalog plugin stays loaded, the Thrift server
# keeps a session's scheduler pool), or under which a view is found by its exact name only.
_STICKY = re.compile(
    r"spark\.sql\.catalog\.|spark\.sql\.thriftserver\.scheduler\.pool$|spark\.sql\.casesensitive$"
)
_TIME_ZONE = "spark.sql.session.timezone"


def plain(sql: str) -> str:
    """The statement as the rules read it: comments dropped and runs of whitespace one space,
    both outside quotes (a quoted name is kept as written), no trailing `;`."""
    out: list[str] = []
    i, n, quote = 0, len(sql), ""
    while i < n:
        c = sql[i]
        if quote:
            out.append(c)
            if c == "\\" and quote != "`" and i + 1 < n:
                out.append(sql[i + 1])
                i += 2
                continue
            quote = "" if c == quote else quote
            i += 1
        elif c in "'\"`":
            quote = c
            out.append(c)
            i += 1
        elif (end := comment_end(sql, i)) != i or c.isspace():
            if out and out[-1] != " ":
                out.append(" ")
            i = n if end < 0 else max(end, i + 1)
        else:
            out.append(c)
            i += 1
    return "".join(out).strip().rstrip(";").strip()


def _unquoted(quoted: str) -> str:
    # A conf key or a view name as written, less the backquotes (conf keys are case-sensitive).
    return quoted[1:-1].replace("``", "`") if quoted.startswith("`") else quoted


def _set_key(key: str) -> str:
    """The key Spark's SET changes: `hivevar:k` sets k, a Hadoop alias sets Spark's conf."""
    return key[len("hivevar:") :] if key.startswith("hivevar:") else _ALIASES.get(key, key)


def _view_name(quoted: str) -> str | None:
    # `IDENTIFIER('v')` names its view in an expression the rules do not evaluate.
    return None if quoted.lower() == "identifier" else _unquoted(quoted)


def _conf_key(key: str) -> str:
    # OpenSession takes `set:hiveconf:key` and `set:hivevar:key` as well as the bare key.
    return re.sub(r"^set:hive(conf|var):", "", str(key), flags=re.I).lower()


class Leftovers:
    """What the statements a session ran left in it: whether another node may have it."""

    def __init__(self, profile_confs: Iterable[str] = ()) -> None:
        self.reusable = True
        self.replaying = False  # the run's hook statements, replayed (connections.py)
        # Set by the profile (OpenSession) or the run's hooks, lower-cased: every session of
        # the run has them, so a node that sets or resets one leaves its session unlike a new
        # one. A replayed statement these rules cannot read (EXECUTE IMMEDIATE) may have set
        # any: then every RESET, and every DROP or ALTER by a bare name, ends the reuse.
        self._theirs = {_conf_key(key) for key in profile_confs}
        self._their_views: set[str] = set()
        self._theirs_unread = False
        self._confs: set[str] = set()  # SET by this session's nodes and not RESET, as written
        self._views: set[str] = set()  # made by this session's nodes and not dropped
        # The fence's own confs (its commit tag, maxCommitAttempts) as its last SET left them.
        self.fence_set: dict[str, str] = {}
        # Those whose RESET waits for the next statement that is not the fence's own (the
        # connection sends it first): 7-8 ms each saved where none follows before the session
        # closes, and a later node's SET of the same value is not sent either. Meanwhile the
        # session still holds the value.
        self.deferred: dict[str, str] = {}

    @property
    def clean(self) -> bool:
        return (
            self.reusable
            and not (self._confs - self.deferred.keys())
            and not self._views
            and not any(self._reset_spoils(key) for key in self.deferred)
        )

    def _reset_spoils(self, key: str) -> bool:
        """Whether a RESET of `key` leaves the session unlike a new one: the profile or the
        run's hooks set it (or may have, unread), or RESET does not undo it."""
        lower = key.lower()
        return lower in self._theirs or self._theirs_unread or bool(_STICKY.match(lower))

    def untouched(self, key: str) -> bool:
        """Whether the session holds the server's own value of `key`: nothing set it."""
        lower = key.lower()
        return (
            self.reusable
            and not self._theirs_unread
            and lower not in self._theirs
            and lower not in {k.lower() for k in self._confs}
        )

    def saw(self, sql: str) -> None:
        """Before the statement runs: what it may leave, even if it fails."""
        if "${" in sql:
            # Spark substitutes `${conf}` in the text before it parses it: unread.
            if self.replaying:
                self._theirs_unread = True
            else:
                self.reusable = False
            return
        body = plain(sql)
        if self.replaying:
            self._replayed(body)
            return
        named, unread = self._named(body)
        if set_ := _SET.match(body):
            key = _unquoted(set_.group(1))
            changed = _set_key(key).lower()
            if _set_key(key) != key or changed in self._theirs or _STICKY.match(changed):
                self.reusable = False
            self._confs.add(key)
        elif reset := _RESET_KEY.match(body):
            if self._reset_spoils(_unquoted(reset.group(1))):
                self.reusable = False
        elif view := _TEMP_VIEW.match(body):
            name = _view_name(view.group(4))
            if name is None or name.lower() in self._their_views:
                self.reusable = False
            else:
                self._views.add(name)
        elif unread:
            self.reusable = False
        elif named:
            if named.lower() in self._their_views or self._theirs_unread:
                self.reusable = False
            elif not _DROP.match(body) and named.lower() in {v.lower() for v in self._views}:
                self.reusable = False  # renamed or redefined: no longer the view it made
        elif not (_READ.match(body) or _LEAVES_NOTHING.match(body)):
            self.reusable = False

    @staticmethod
    def _named(body: str) -> tuple[str | None, bool]:
        """The bare name a DROP or ALTER of a view or table names; True when it names one the
        rules cannot read."""
        target = _DROP_OR_ALTER.match(body)
        if target is None:
            return None, False
        rest = body[target.end() :]
        if bare := _BARE.match(rest):
            name = _view_name(bare.group(1))
            return name, name is None
        return None, not _QUALIFIED.match(rest)

    def _replayed(self, body: str) -> None:
        if set_ := _SET.match(body):
            self._theirs.add(_set_key(_unquoted(set_.group(1))).lower())
        elif _SET_TIME_ZONE.match(body):
            self._theirs.add(_TIME_ZONE)
        elif (view := _TEMP_VIEW.match(body)) and (name := _view_name(view.group(4))):
            self._their_views.add(name.lower())
        elif not (_READ.match(body) or _LEAVES_NOTHING.match(body)):
            self._theirs_unread = True

    def ran(self, sql: str) -> None:
        """After the statement succeeded: what it undid."""
        if self.replaying:
            return
        body = plain(sql)
        if reset := _RESET_KEY.match(body):
            self._confs.discard(_unquoted(reset.group(1)))
        elif _DROP.match(body) and (named := self._named(body)[0]):
            self._views.discard(named)

    def failed(self, exc: BaseException | None = None) -> None:
        # A statement that failed may still run, or have changed the session unseen.
        self.reusable = False


class Session(Protocol):
    """A connection's handle over a Thrift session (polling.BackoffPyhiveConnectionWrapper):
    pyhive's connection, and what this module keeps beside it."""

    handle: Any  # pyhive's Connection
    pool: str | None
    leftovers: Leftovers
    kept_at: float

    def reused(self) -> "Session": ...


def pool_key(creds: Any) -> str:
    """Sessions are kept per profile: the same server, user and OpenSession confs."""
    return json.dumps(creds.to_dict(omit_none=False), sort_keys=True, default=str)


# Sessions kept for a later node, by pool key, most recent last; any thread's.
_kept: dict[str, list[Session]] = {}
# The server's own value of a conf, read once in a session that never set it.
_defaults: dict[tuple[str, str], str | None] = {}
_lock = threading.Lock()


# A session kept longer is closed rather than reused: a socket idle for minutes may have been
# dropped by a NAT or load balancer on the way, and pyhive's has no timeout to notice it.
MAX_IDLE_SECONDS = 60.0
# A kept session is asked or closed over a socket that may be gone without a word: pyhive sets
# no timeout, and a dropped connection would hold the call until TCP gives up (minutes).
QUIET_TIMEOUT_MS = 10_000


def keep(handle: Session) -> bool:
    """At the end of a node: kept for a later one if it left nothing; False if not kept."""
    if handle.pool is None or not handle.leftovers.clean:
        return False
    now = time.monotonic()
    with _lock:
        kept = _kept.setdefault(handle.pool, [])
        # Those kept first sit at the bottom while later ones serve: closed once idle too long,
        # before this one may serve another thread.
        stale = [other for other in kept if now - other.kept_at > MAX_IDLE_SECONDS]
        kept[:] = [other for other in kept if other not in stale]
    for other in stale:
        close(other)
    handle.kept_at = time.monotonic()
    with _lock:
        _kept.setdefault(handle.pool, []).append(handle)
    return True


def reuse(pool: str, name: str | None) -> Session | None:
    while True:
        with _lock:
            kept = _kept.get(pool)
            if not kept:
                return None
            handle = kept.pop()
        try:
            # A cancel from another thread may have landed after it was kept.
            if not handle.leftovers.clean or time.monotonic() - handle.kept_at > MAX_IDLE_SECONDS:
                close(handle)
                continue
            with bounded(handle.handle):
                alive(handle.handle)
        except Exception as exc:  # let go by the server, or the server is gone
            logger.debug(f"Thrift session not reused: {exc}")
            close(handle)
            continue
        except BaseException:
            close(handle)
            raise
        logger.debug(f"Thrift session reused for connection {name!r}")
        return handle


def alive(connection: Any) -> None:
    """Raises unless the server still has the session: GetInfo runs no statement."""
    from pyhive import hive
    from TCLIService import ttypes

    request = ttypes.TGetInfoReq(
        sessionHandle=connection.sessionHandle, infoType=ttypes.TGetInfoType.CLI_SERVER_NAME
    )
    hive._check_status(connection.client.GetInfo(request))


def server_default(handle: Session, key: str, read: Callable[[], str | None]) -> str | None:
    """`key`'s value in the session: the server's own, read once, where nothing set it."""
    if handle.pool is None or not handle.leftovers.untouched(key):
        return read()
    known = (handle.pool, key.lower())
    with _lock:
        if known in _defaults:
            return _defaults[known]
    value = read()
    with _lock:
        _defaults[known] = value
    return value


@contextmanager
def bounded(connection: Any) -> Iterator[None]:
    """Calls on pyhive's `connection` wait at most QUIET_TIMEOUT_MS for an answer."""
    transport = getattr(connection, "_transport", None)
    for _ in range(3):  # the socket under SASL's or a buffered transport (NOSASL)
        if hasattr(transport, "setTimeout"):
            break
        transport = getattr(
            transport, "_trans", getattr(transport, "_TBufferedTransport__trans", None)
        )
    set_timeout = getattr(transport, "setTimeout", None)
    if set_timeout is None:
        yield
        return
    before = getattr(transport, "_timeout", None)  # TSocket's, in seconds
    set_timeout(QUIET_TIMEOUT_MS)
    try:
        yield
    finally:
        set_timeout(None if before is None else before * 1000)


def close(handle: Session) -> None:
    # Best effort, as dbt's own close: a server that does not answer has let it go anyway.
    try:
        with bounded(handle.handle):
            handle.handle.close()
    except Exception as exc:
        logger.debug(f"Thrift session not closed: {exc}")
        # pyhive closes its socket only after CloseSession answered.
        with suppress(Exception):
            handle.handle._transport.close()


def release_kept() -> None:
    """At the end of an invocation (dbt's cleanup), and of the process."""
    with _lock:
        kept = [handle for handles in _kept.values() for handle in handles]
        _kept.clear()
        _defaults.clear()
    for handle in kept:
        close(handle)


atexit.register(release_kept)
