"""What the fence's steps share for one node's write, below them all: the runner that sends
our statements, the log that says what landed, the table's format (fence/format.py), the tag
set around our own statements, which commits are ours, and what the write learns on the way
(the conflict analysis per attempt, the tagged statements sent, whether the session's last
commit names our write). The Fence (protocol.py) owns one and hands it to the steps
(capture.py, verify.py, revert.py, batch.py); nothing here calls up into them."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from dbt.adapters.events.logging import AdapterLogger

from dbt.adapters.fenced_spark.fence.conflicts import ConflictCheck
from dbt.adapters.fenced_spark.fence.format import SqlRunner, TableFormat, Token
from dbt.adapters.fenced_spark.fence.history import Commit, HistoryReader
from dbt.adapters.fenced_spark.fence.state import FenceState

# How far back (in commits) a run looks for an earlier run of its node that never reached
# its verdict.
LOOKBACK = 32

logger = AdapterLogger("FencedSpark")


class FenceContext:
    def __init__(
        self,
        runner: SqlRunner,
        single_attempt: Callable[[], Any],
        log: HistoryReader,
        clock: Callable[[], float],
        table_format: TableFormat,
        verified: tuple[int, str] | None = None,
    ) -> None:
        self.runner = runner
        # What the steps ask of the table's format (fence/format.py), never its SQL or confs.
        self.format = table_format
        self.single_attempt = single_attempt
        self.log = log
        self.clock = clock
        # The node's last run's commit that the fence verified, by version and invocation id
        # (run_results.json): the earlier-runs search takes that verdict (capture.py).
        self.verified = verified
        self._checks: dict[tuple[str, int, str], ConflictCheck] = {}
        # Tagged statements sent (RESTOREs among them): a verdict that sent one is not redone.
        self.sent = 0
        # Set once this session's LAST_COMMIT was cleared before our write: from then on it
        # names our write's commit, if the write made one (verify.session_commit).
        self.watching_commits = False

    def commits_since(self, table: str, version: int) -> list[Commit]:
        """Commits after `version`, oldest first; reads only the log's tail."""
        return self.log.commits_since(table, version)

    def latest_version(self, table: str, known: int | None = None) -> int:
        return self.log.latest_version(table, known)

    def settled(self, table: str) -> int | None:
        """vB without reading commits, when the node's last run left it (SqlLog.settled)."""
        version = self.log.settled(table)
        if version is not None:
            # What replaced the earlier-runs search, for whoever audits a run.
            invocation = self.verified[1] if self.verified else "?"
            logger.debug(
                f"fenced_spark: {table}: vB v{version} is run {invocation}'s verified commit "
                "(run_results.json), still the newest version where that run found the table: "
                "no earlier run to search for"
            )
        return version

    def conflict_check(self, state: FenceState) -> ConflictCheck:
        """The conflict analysis for `state`'s table, over this fence's log and runner. One per
        attempt: its pre-check and verification share what it learnt of the table's columns
        (a change to them after vB is itself a conflict, judged before they are consulted)."""
        key = (state.table, state.read_version, state.strategy)
        if key not in self._checks:
            changes = self.format.changes(state.table, self.runner)
            self._checks[key] = ConflictCheck(state.table, changes, self.runner, state.strategy)
        return self._checks[key]

    @contextmanager
    def tagged(
        self,
        state: FenceState,
        step: str,
        strict: bool | None = None,
        token: Token | None = None,
    ) -> Iterator[None]:
        """The tag on our commit is set only around our own statements. A label the session
        already had (an audit pre-hook's userMetadata) rides in the tag and is put back after,
        not reset. A write's `token` (fence/delta/sequence.py) is set and reset with it."""
        strict = state.strict if strict is None else strict
        tag = replace(state.tag(step), user_metadata=self.format.label())
        self.sent += 1
        with self.format.tagged(tag, strict, token):
            yield

    @staticmethod
    def ours(state: FenceState, commits: list[Commit], step: str | None = None) -> list[Commit]:
        """This invocation's, node's and attempt's commits; of one step when `step` is given,
        and then never Delta's auto compaction, which carries the tag of the write before it."""
        own = state.tag(step or "write")
        return [
            c
            for c in commits
            if c.tag is not None
            and own.same_run(c.tag)
            and (step is None or (c.tag.step == step and not c.compaction))
        ]

    def foreign(self, state: FenceState, commits: list[Commit]) -> list[Commit]:
        mine = self.ours(state, commits)
        return [c for c in commits if c not in mine]
