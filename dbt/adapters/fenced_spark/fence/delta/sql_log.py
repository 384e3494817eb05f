"""The fence's history reads over SQL (Thrift, Connect), without listing the Delta log.

DESCRIBE HISTORY first brings Delta's snapshot up to date, which lists the whole `_delta_log`
directory on HDFS and local disks, then reads the commit files in a Spark job: at 10,000
commits it took 12x as long as at 10 (docs/benchmarks.md, part 2). The fence needs the newest
version and the few commits after vB. Here the server reads just those commit files, by exact
path: Hadoop expands a path pattern whose braces hold slashes into one path per alternative
(GlobExpander) and looks each up on its own, so no directory is listed, and a file that does
not exist is simply not read. Versions are contiguous files, so the newest is found by probing
named versions: from a known one (vB) a window of 16; with none known, powers of two, then
narrowing between the last that exists and the next (Spark's file sources skip names starting
with `_`, so `_last_checkpoint` cannot serve as the start). Whether files exist is asked of
Spark's plan for reading them (EXPLAIN: its file index counts the paths that exist), which runs
no Spark job: a pre-check on a table nothing has touched since vB is one such statement, so is
a capture where the node's last run left its verified commit newest, and narrowing
needs no file read. The catalog says where the table lives (SHOW TABLE EXTENDED reads
the metastore, not the log), once per node for those existence checks and once per step for
reads of commits. Anything else (a table outside the session catalog, a log whose versions the
probes miss, an unreadable commit) goes to DESCRIBE HISTORY, which says what is wrong in Spark's
own words.
"""

import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from dbt.adapters.fenced_spark.fence.delta.history import (
    TXN_APP_ID,
    HistorySource,
    SqlHistory,
    checksum_file,
    checksum_sequence,
    commit_file,
)
from dbt.adapters.fenced_spark.fence.delta.log_tail import SEQUENCE_LOOKBACK, commit_from_info
from dbt.adapters.fenced_spark.fence.history import Commit
from dbt.adapters.fenced_spark.fence.rewriter import name_parts

T = TypeVar("T")

# Commit files read per statement; more than 32 paths would make Spark list them in a job.
WINDOW = 16
PROBES = 32
# The line of a commit file that holds its commitInfo action (Delta writes it first). UNIX_LINES:
# only \n ends a line (Delta escapes no U+2028 in its JSON). No backslash: the literal reads the
# same whether or not the session sets spark.sql.parser.escapedStringLiterals.
_COMMIT_INFO = '(?md)^([{]"commitInfo"[ \t]*:.*)$'
# The fence's SetTransaction (fence/delta/sequence.py), as Delta writes it: appId, then version.
_FENCE_TXN = f'"txn":[{{]"appId":"{TXN_APP_ID}","version":[0-9]+'
_TXN_VERSION = re.compile(r'"version":([0-9]+)$')
# DESCRIBE EXTENDED's header above the table's own lines (Provider, Location).
_DETAILS = "# Detailed Table Information"
# EXPLAIN's file scan: how many of the paths it was given exist (Spark lists them, reads none).
_PATHS = re.compile(r"InMemoryFileIndex\((\d+) paths?\)")
# What Spark says when no file of a read exists.
_NONE_EXIST = re.compile(r"PATH_NOT_FOUND|Path does not exist", re.I)
_STAGED = "_staged_commits"


class CannotFollow(Exception):
    """The log is not one this reader can follow: DESCRIBE HISTORY answers instead."""


def glob_literal(location: str) -> str:
    # The location is read as a glob pattern: its own pattern characters are escaped.
    return re.sub(r"([\\{}\[\]*?])", r"\\\1", location)


def delta_log(location: str) -> str:
    """The table's `_delta_log` folder as SqlLog's paths name it."""
    return glob_literal(location.rstrip("/")) + "/_delta_log"


def location_of(log: str) -> str:
    """The table's location, from its `_delta_log` folder as SqlLog's paths name it."""
    return re.sub(r"\\(.)", r"\1", log.removesuffix("/_delta_log"))


class FileReads(Protocol):
    """Reads of files by path: their rows, and the plan Spark makes to read them."""

    def rows(self, source: str, path: str, columns: Sequence[str]) -> list: ...

    def plan(self, path: str) -> str: ...


class SqlFileReads:
    """FileReads as SQL statements, through any HistorySource."""

    def __init__(self, source: HistorySource) -> None:
        self.source = source

    @staticmethod
    def select(source: str, path: str, columns: Sequence[str]) -> str:
        return f"SELECT {', '.join(columns)} FROM {source}.`{path.replace('`', '``')}`"

    @staticmethod
    def explain(path: str) -> str:
        return f"EXPLAIN SELECT path FROM binaryFile.`{path.replace('`', '``')}`"

    def rows(self, source: str, path: str, columns: Sequence[str]) -> list:
        return list(self.source.fetch(self.select(source, path, columns)))

    def plan(self, path: str) -> str:
        return "\n".join(str(row[0]) for row in self.source.fetch(self.explain(path)))


class CommitFiles:
    """A `_delta_log` folder's commit files read by exact path through the server (FileReads):
    which exist, their text, and how many, from the plan alone."""

    def __init__(self, files: FileReads) -> None:
        self.files = files

    @staticmethod
    def paths(log: str, versions: Sequence[int], extra: str = "") -> str:
        """One path Hadoop expands into the commit files of `versions` (and `extra`)."""
        names = ["/" + commit_file(v) for v in versions] + ([extra] if extra else [])
        alternatives = ",".join(names)
        return f"{log}{{{alternatives}}}"

    def select(
        self,
        columns: Sequence[str],
        source: str,
        log: str,
        versions: Sequence[int],
        extra: str = "",
    ) -> list:
        """`columns` of the commit files of `versions` that exist, by exact path (and of the
        files `extra` matches); no rows when none exists (Spark fails the statement then); any
        other failure raises."""
        path = self.paths(log, versions, extra)
        try:
            return self.files.rows(source, path, columns)
        except Exception as exc:
            if _NONE_EXIST.search(str(exc)):
                return []
            raise

    def count(self, log: str, versions: Sequence[int], staged: int = 0) -> int | None:
        """How many of the commit files of `versions` exist (and staged commits, `staged` times
        each), from the plan Spark makes to read them: no file is read, no job runs. A path
        named twice is counted twice. None when the plan does not say."""
        path = self.paths(log, versions, ",".join([f"/{_STAGED}/*"] * staged))
        try:
            plan = self.files.plan(path)
        except Exception as exc:
            if _NONE_EXIST.search(str(exc)):
                return 0
            raise
        counts = _PATHS.findall(plan)
        return int(counts[0]) if len(counts) == 1 else None

    def read(self, log: str, versions: Sequence[int], content: str = "info") -> dict[int, str]:
        """The versions among `versions` whose commit files exist, each with its commitInfo
        line (`content` "info"), whole text ("all") or nothing ("none", then no file is read).
        Empty when none exists; any other failure raises."""
        decoded = "decode(content, 'UTF-8')"
        text = {
            # commitInfo's line, then a line with the fence's txn action, if there is one
            "info": f"concat(regexp_extract({decoded}, '{_COMMIT_INFO}', 1), char(10), "
            f"regexp_extract({decoded}, '{_FENCE_TXN}', 0))",
            "all": "decode(content, 'UTF-8')",
            "none": "''",
        }[content]
        # Catalog-managed commits wait in _staged_commits before they become N.json: a log
        # with any there is not one these reads can follow (one small folder listed).
        rows = self.select(["path", text], "binaryFile", log, versions, f"/{_STAGED}/*")
        found = {}
        for p, value in rows:
            if f"/{_STAGED}/" in str(p):
                raise CannotFollow("catalog-managed commits wait to be published")
            name = str(p).rsplit("/", 1)[-1]
            if name.endswith(".json") and name[:-5].isdigit():
                found[int(name[:-5])] = str(value or "")
        return found


class SqlLog:
    """The fence's HistoryReader over SQL. One per fence step, like the session's LogTail:
    where the table lives is looked up once per step for reads of its commits. `node` carries
    what the node's earlier steps looked up, for `latest_version` from a known version (the
    pre-check): a table moved elsewhere since then is seen by the verification, which reads
    commits (docs/limits.md)."""

    def __init__(
        self,
        source: HistorySource,
        node: dict[str, str | None] | None = None,
        hints: dict[str, int] | None = None,
        settled: dict[str, str] | None = None,
        files: FileReads | None = None,
        continued: bool = False,
    ) -> None:
        self.source = source
        # A reader that continues the step which found `node`'s locations (the row counts of
        # the write just verified) takes them as found, as that step's own reads do.
        self._continued = continued
        self.files = files or SqlFileReads(source)
        self.commit_files = CommitFiles(self.files)
        self.fallback = SqlHistory(source)
        self._node = {} if node is None else node
        # Where to start looking for the newest version when none is known (the version the
        # node's last run left, run_results.json): only a start, every version is read anew.
        self._hints = {} if hints is None else hints
        # Where the table was when that run's verdict covered every commit up to its hint
        # (run_results.json's table_location): `settled`.
        self._settled = {} if settled is None else settled
        self._logs: dict[str, str | None] = {}
        # Commit infos read so far, by table and version: a commit never changes once written.
        # Only ever used for a version's content; whether a version exists is always read anew.
        self._infos: dict[str, dict[int, dict[str, Any]]] = {}
        # The fence's SetTransaction version in each commit read so far (None: none).
        self._txns: dict[str, dict[int, int | None]] = {}

    def _log(self, table: str, carried: bool = False) -> str | None:
        if (carried or self._continued) and table not in self._logs and table in self._node:
            return self._node[table]
        if table not in self._logs:
            self._logs[table] = self._node[table] = self._resolve(table)
        return self._logs[table]

    def _resolve(self, table: str) -> str | None:
        """The table's `_delta_log` folder, from the session catalog; None when the table is
        not a Delta table there, or its entry cannot be read for sure."""
        parts = name_parts(table)
        if not parts or len(parts) > 3 or (len(parts) == 3 and parts[0] != "spark_catalog"):
            return None
        try:
            rows = self.source.describe(table)
        except Exception:
            return None  # DESCRIBE HISTORY raises Spark's own error, if there is one
        # The table's own lines follow the last such header: a column may be named like one.
        heads = [i for i, row in enumerate(rows) if str(row[0]).strip() == _DETAILS]
        if not heads:
            return None
        details: dict[str, list[str]] = {}
        for row in rows[heads[-1] + 1 :]:
            details.setdefault(str(row[0]).strip(), []).append(str(row[1] or "").strip())
        providers, locations = details.get("Provider", []), details.get("Location", [])
        if len(providers) != 1 or len(locations) != 1 or providers[0].lower() != "delta":
            return None
        # Spark prints the location decoded (`a b`, not `a%20b`), as Hadoop's Path takes it.
        return delta_log(locations[0])

    def _window(self, table: str, log: str, versions: Sequence[int]) -> set[int]:
        """Reads `versions` with their commit infos; returns those that exist."""
        found = self.commit_files.read(log, versions)
        infos = self._infos.setdefault(table, {})
        txns = self._txns.setdefault(table, {})
        for version, text in found.items():
            line, _, txn = text.partition("\n")
            try:
                infos[version] = dict(json.loads(line).get("commitInfo", {})) if line else {}
            except (ValueError, AttributeError) as exc:
                raise CannotFollow(f"v{version}'s commitInfo: {exc}") from exc
            match = _TXN_VERSION.search(txn)
            txns[version] = int(match.group(1)) if match else None
        return set(found)

    def _forward(self, table: str, log: str, start: int) -> int:
        """The newest version, given that `start` exists: windows forward from it, each read
        anew (a version seen earlier proves nothing about one not seen yet)."""
        while True:
            found = self._window(table, log, range(start, start + WINDOW))
            if start not in found:
                raise CannotFollow(f"v{start} is gone")  # cleaned up, or the table replaced
            end = start
            while end + 1 in found:
                end += 1
            if end < start + WINDOW - 1:
                return end
            start = end

    def _bracket(self, table: str, log: str, base: int = 0) -> tuple[int, int]:
        """With no version known: a version that exists and a higher one that does not, at
        most a window apart, the newest between them. Versions base..base+15 and base plus
        powers of two first (in one read that also takes their commit infos), then narrowing."""
        # 31 paths and the staged commits' folder: over 32, Spark would list them in a job.
        probes = sorted({*range(WINDOW), *(2**k for k in range(4, 19))})
        probes = [base + p for p in probes]
        found = self._window(table, log, probes)
        if not found:
            raise CannotFollow("none of the probed versions exists")
        low = max(found)
        above = [p for p in probes if p > low]  # none of them exists
        if not above:
            raise CannotFollow(f"more than {low} versions")
        high = above[0]
        while high - low > WINDOW:
            step = (high - low) // PROBES
            points = list(range(low + step, high, step))[: PROBES - 1]
            # Versions above `low` that exist are contiguous: those among the points that
            # exist are the first `count` of them.
            count = self.commit_files.count(log, points)
            if count is None:
                exists = self.commit_files.read(log, points, content="none")
                count = len([p for p in points if p <= max(exists, default=low)])
            low = points[count - 1] if count else low
            high = points[count] if count < len(points) else high
        return low, high

    def _latest(self, log: str, table: str, start: int | None) -> int:
        if start is None:
            start, high = self._hinted_bracket(table, log)
            if high == start + 1:
                return start  # the next version was probed and is not there
        return self._forward(table, log, start)

    def _hinted_bracket(self, table: str, log: str) -> tuple[int, int]:
        # A table of any length is one read from where the node's last run left it, if little
        # landed since; a hint past the newest version (the table replaced) costs one more.
        hint = self._hints.get(table)
        if hint:
            try:
                return self._bracket(table, log, hint)
            except Exception:
                pass  # from the start, as with no hint: that says what is wrong, if anything
        return self._bracket(table, log)

    def _answer(
        self,
        table: str,
        read: Callable[[str], T],
        fallback: Callable[[], T],
        carried: bool = False,
    ) -> T:
        log = self._log(table, carried)
        if log is None:
            return fallback()
        try:
            return read(log)
        except CannotFollow:
            return fallback()

    def _unmoved(self, log: str, known: int) -> bool:
        """`known` is still the newest version, and no commit waits to be published: of the
        files of `known`, `known + 1` and the staged commits, only `known`'s exists. The
        later ones are named twice, so the count is 1 only when the one file is `known`'s (a
        cleanup may remove `known` once `known + 1` is checkpointed)."""
        started = time.monotonic()
        unmoved = self.commit_files.count(log, [known, known + 1, known + 1], staged=2) == 1
        # how long one read of the head takes, not the capture's DESCRIBE before it
        self.probe_seconds = time.monotonic() - started
        return unmoved

    def settled(self, table: str) -> int | None:
        """The newest version, when it is where the node's last run left the table with its
        verdict (`settled`: its commit, verified) and nothing landed since: that run checked
        every commit up to it, so one EXPLAIN replaces the capture's read of commits. None
        otherwise, and for a table the catalog now places elsewhere than that run found it."""
        version, where = self._hints.get(table), self._settled.get(table)
        if version is None or where is None:
            return None
        log = self._log(table)
        if log is None or log != delta_log(where):
            return None
        try:
            return version if self._unmoved(log, version) else None
        except Exception:
            return None  # the capture's read of commits says what is wrong, if anything

    def latest_version(self, table: str, known: int | None = None) -> int:
        def read(log: str) -> int:
            if known is not None and self._unmoved(log, known):
                return known
            return self._latest(log, table, known)

        return self._answer(
            table,
            read,
            lambda: self.fallback.latest_version(table, known),
            carried=known is not None,
        )

    def recent(self, table: str, limit: int) -> Iterator[Commit]:
        """Newest first; older windows are read only if the caller goes on."""
        latest = self._answer(table, lambda log: self._latest(log, table, None), lambda: None)
        log = self._logs.get(table)
        if latest is None or log is None:
            yield from self.fallback.recent(table, limit)
            return
        infos = self._infos[table]
        for version in range(latest, max(latest - limit, -1), -1):
            if version not in infos:
                try:
                    self._window(table, log, range(max(0, version - WINDOW + 1), version + 1))
                except CannotFollow:
                    return
                if version not in infos:
                    return  # cleaned up after a checkpoint: the log's reach ends here
            yield self._commit(table, version)

    def commits_since(self, table: str, version: int) -> list[Commit]:
        def read(log: str) -> list[Commit]:
            first = max(version, 0)  # the whole log from version 0 when asked from before it
            latest = self._forward(table, log, first)
            return [self._commit(table, v) for v in range(version + 1, latest + 1)]

        return self._answer(table, read, lambda: self.fallback.commits_since(table, version))

    def _commit(self, table: str, version: int) -> Commit:
        return commit_from_info(
            version, self._infos[table][version], self._txns[table].get(version)
        )

    def sequence(self, table: str, version: int) -> int | None:
        """The fence's SetTransaction version at `version`: the newest commit at or below it
        that holds one, at most SEQUENCE_LOOKBACK back. Commits read already cost nothing;
        before reading more, Delta's checksum of `version` (one file by name) says it
        exactly. None past the lookback, or when the log cannot be followed here
        (DESCRIBE HISTORY shows no txn action)."""
        log = self._log(table, carried=True)
        if log is None:
            return None
        infos = self._infos.setdefault(table, {})
        txns = self._txns.setdefault(table, {})
        lowest = max(version - SEQUENCE_LOOKBACK, -1)
        below = version
        while below > lowest and below in infos:
            if txns.get(below) is not None:
                return txns[below]
            below -= 1
        if below == lowest:
            return -1 if lowest == -1 else None
        found = self._checksum(log, version)
        if found is not None:
            return found
        while below > lowest:
            if below not in infos:
                try:
                    self._window(table, log, range(max(0, below - WINDOW + 1), below + 1))
                except CannotFollow:
                    return None
                if below not in infos:
                    return None  # cleaned up: what came before is in a checkpoint
            if txns.get(below) is not None:
                return txns[below]
            below -= 1
        return -1 if lowest == -1 else None

    def _checksum(self, log: str, version: int) -> int | None:
        path = f"{log}/{checksum_file(version)}"
        try:
            rows = self.files.rows("binaryFile", path, ["decode(content, 'UTF-8')"])
        except Exception:
            return None  # not written (yet), or unreadable: the commits say it
        return checksum_sequence(str(rows[0][0] or "")) if rows else None

    def actions(self, table: str, versions: Sequence[int]) -> dict[int, list[str]]:
        """Each commit's lines, one row per line (`text`: a commit file of any size), read by
        exact path; a version whose file is gone is missing from the answer."""
        log = self._log(table)
        if log is None:
            return self.fallback.actions(table, versions)
        rows = self.commit_files.select(["_metadata.file_name", "value"], "text", log, versions)
        lines: dict[int, list[str]] = {}
        for name, value in rows:
            lines.setdefault(int(str(name).split(".")[0]), []).append(str(value))
        return lines
