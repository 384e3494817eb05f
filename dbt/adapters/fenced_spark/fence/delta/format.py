"""Delta as the fence's table format (format.TableFormat): the confs that tag a commit, make it
strict and carry the sequence's token, Delta's conflicts, its session's last commit, RESTORE."""

from collections.abc import Iterator
from contextlib import contextmanager

from dbt.adapters.events.logging import AdapterLogger

from dbt.adapters.fenced_spark.fence.changes import RowProbe
from dbt.adapters.fenced_spark.fence.delta import sequence
from dbt.adapters.fenced_spark.fence.delta.changes import DeltaChanges
from dbt.adapters.fenced_spark.fence.delta.words import (
    LAST_COMMIT,
    MAX_COMMIT_ATTEMPTS,
    USER_METADATA,
    conflict_name,
)
from dbt.adapters.fenced_spark.fence.format import SqlRunner, Token
from dbt.adapters.fenced_spark.fence.history import FenceTag, HistoryReader

# What Spark's SET shows for a value matching spark.sql.redaction.options.regex.
REDACTED = "*********(redacted)"

logger = AdapterLogger("FencedSpark")


class Delta:
    name = "Delta"

    def __init__(self, runner: SqlRunner, log: HistoryReader) -> None:
        self.runner = runner
        self.log = log

    def label(self) -> str | None:
        value = self.runner.session_conf(USER_METADATA)
        if value == REDACTED:
            # Over Thrift only SQL reads it, and Spark redacted it: it cannot be put back.
            logger.warning(
                f"fenced_spark: the session's {USER_METADATA} is redacted by Spark's "
                "redaction regex when read over SQL; the fence resets it after its write"
            )
            return None
        return value

    @contextmanager
    def tagged(self, tag: FenceTag, strict: bool, token: Token | None) -> Iterator[None]:
        """userMetadata carries the tag; maxCommitAttempts 0 stops Delta committing a strict
        write above a commit that landed while it ran; txnAppId/txnVersion carry the token."""
        resets = [
            (USER_METADATA, tag.user_metadata),
            *([(MAX_COMMIT_ATTEMPTS, None)] if strict else []),
        ]
        if token is not None:
            resets += [(sequence.APP_ID_CONF, None), (sequence.VERSION_CONF, None)]
        try:
            # A SET that failed may still have applied (a cancel while it ran): reset as well.
            self.runner.set_session_conf(USER_METADATA, tag.to_json())
            if strict:
                self.runner.set_session_conf(MAX_COMMIT_ATTEMPTS, "0")
            if token is not None:
                self.runner.set_session_conf(sequence.APP_ID_CONF, sequence.TXN_APP_ID)
                self.runner.set_session_conf(sequence.VERSION_CONF, str(token.version))
            yield
        except BaseException:
            # A lost session fails the RESETs too: they must not replace what failed first.
            self._reset(resets)
            raise
        failed = self._reset(resets)
        if failed is not None:
            raise failed

    def _reset(self, resets: list[tuple[str, str | None]]) -> Exception | None:
        """Every reset is tried: one failing must not leave maxCommitAttempts at 0 on a session
        that lives on (the embedded one is never reopened). The first failure, if any."""
        failed: Exception | None = None
        for key, value in resets:
            try:
                self.runner.set_session_conf(key, value)
            except Exception as exc:
                failed = failed or exc
        return failed

    def token(self, table: str, horizon: int) -> sequence.Token | None:
        return sequence.token(self.log, table, horizon)

    def session_txn(self) -> tuple[str, str] | None:
        value = self.runner.session_conf(sequence.APP_ID_CONF)
        if value in (None, "", sequence.TXN_APP_ID):
            return None
        return sequence.APP_ID_CONF, str(value)

    def publish(self, sql: str) -> BaseException | None:
        try:
            self.runner.execute(sql)
        except Exception as exc:
            if conflict_name(exc) is None:
                raise
            return exc
        return None

    def conflict_name(self, error: BaseException) -> str | None:
        return conflict_name(error)

    def forget_own_commit(self) -> None:
        # Not the write: sent with the profile's query_retries, as a SET is.
        self.runner.set_session_conf(LAST_COMMIT, None)

    def own_commit(self) -> int | None:
        value = self.runner.session_conf(LAST_COMMIT)
        return int(value) if value is not None and value.isdigit() else None

    def changes(self, table: str, probe: RowProbe) -> DeltaChanges:
        return DeltaChanges(table, self.log, probe)

    def undo(self, table: str, version: int) -> None:
        self.runner.execute(f"RESTORE TABLE {table} TO VERSION AS OF {version}")
