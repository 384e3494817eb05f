"""The fence's sequence: Delta itself refuses a fenced write that another fenced write
overtook, inside its own commit (docs/fence.md, "Fenced writers refuse each other in Delta").

Every fenced write carries Delta's idempotent-DML confs (`txnAppId`, `txnVersion`): its commit
holds a SetTransaction of the app id TXN_APP_ID with version R + 1, where R is that app id's
version in the table's state at H, the newest version whose commits the fence judged before
the write. Delta then
- skips the write without a commit when the app id's version at the write's own snapshot is
  R + 1 or more: a fenced write committed after H;
- fails it (ConcurrentTransactionException) when a commit of the app id lands while it runs.
A fenced commit's version is one above the version at its own snapshot, so the sequence only
grows, and a fenced write commits only if no other fenced write committed after H: a commit
in the gap between the pre-check and the write's snapshot is refused by Delta, not reverted.
Unfenced writers never set the app id; their commits in that gap are verification's (revert).

With the confs set, a write that changes nothing still commits (its SetTransaction), so a
write statement that returns without a commit of ours was skipped.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dbt.adapters.fenced_spark.fence.delta.history import TXN_APP_ID

if TYPE_CHECKING:
    from dbt.adapters.fenced_spark.fence.history import Commit, HistoryReader

APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
VERSION_CONF = "spark.databricks.delta.write.txnVersion"

__all__ = ["APP_ID_CONF", "TXN_APP_ID", "VERSION_CONF", "Token", "token"]


@dataclass(frozen=True)
class Token:
    """What one send of a write carries: the version H it was judged up to, and R(H) + 1."""

    horizon: int
    version: int

    def explains(self, commit: "Commit") -> bool:
        """Whether `commit`, after H, is a fenced write that Delta's check of our token saw."""
        return commit.fence_txn is not None and commit.fence_txn >= self.version


def token(log: "HistoryReader", table: str, horizon: int) -> Token | None:
    """The token for a write judged up to `horizon`; None when the log cannot say R there
    (the write then goes without one, as before the sequence: verification covers the gap)."""
    current = log.sequence(table, horizon)
    return None if current is None else Token(horizon, current + 1)
