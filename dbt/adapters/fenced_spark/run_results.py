"""Fenced nodes' adapter_response in target/run_results.json where dbt leaves it empty.

dbt records `{}` for a node that raised (a refusal, or a post-hook failing after our commit)
and for every microbatch model, yet the fence's outcome and versions are what an orchestrator
reading run_results.json needs most. The adapter keeps each fenced write's response and fills
in the empty ones once dbt has written the file: dbt cleans up the adapter's connections again
after writing it (docs/inspect.md).
"""

import json
import os
import threading
from contextlib import suppress
from typing import Any, NamedTuple

from dbt.adapters.events.logging import AdapterLogger

from dbt.adapters.fenced_spark.row_counts import COUNT_KEYS

logger = AdapterLogger("FencedSpark")

FILE_NAME = "run_results.json"


class FenceResponses:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_node: dict[str, list[dict[str, Any]]] = {}

    def record(self, node: str, response: dict[str, Any]) -> None:
        with self._lock:
            kept = {k: v for k, v in response.items() if v is not None}
            self._by_node.setdefault(node, []).append(kept)

    def write(self, target_path: str, invocation_id: str) -> None:
        """Fill this invocation's run_results.json; an older file (dbt has not written this
        run's yet, or `--no-write-json`) is left alone and the responses kept."""
        with self._lock:
            if not self._by_node:
                return
            path = os.path.join(target_path, FILE_NAME)
            try:
                with open(path, encoding="utf-8") as f:
                    results = json.load(f)
            except (OSError, ValueError):
                return
            if results.get("metadata", {}).get("invocation_id") != invocation_id:
                return
            filled = False
            for result in results.get("results", []):
                responses = self._by_node.get(result.get("unique_id"))
                if responses and not result.get("adapter_response"):
                    # A microbatch model runs one fenced write per batch, in batch order.
                    batched = bool(result.get("batch_results"))
                    result["adapter_response"] = (
                        batches_response(responses) if batched else responses[-1]
                    )
                    filled = True
            self._by_node.clear()
            if filled:
                self._replace(path, results)

    @staticmethod
    def _replace(path: str, results: dict[str, Any]) -> None:
        partial = f"{path}.{os.getpid()}.part"
        try:
            with open(partial, "w", encoding="utf-8") as f:
                json.dump(results, f)
            os.replace(partial, path)
        except Exception as exc:
            # The run's outcome stands either way; only the artifact lacks the detail.
            with suppress(OSError):
                os.unlink(partial)
            logger.debug(f"could not add the fence's responses to {path}: {exc}")


def batches_response(responses: list[dict[str, Any]]) -> dict[str, Any]:
    """A microbatch model's response: each batch's, and the rows they changed together when
    every batch's are known (as a model's own response has them)."""
    response: dict[str, Any] = {"batches": responses}
    for key in COUNT_KEYS:
        counts = [r.get(key) for r in responses]
        if all(type(n) is int for n in counts):
            response[key] = sum(counts)
    return response


class LastRun(NamedTuple):
    """Where a fenced node's last run left its table."""

    version: int  # its commit, else the version it read
    # `version` is that run's commit and the fence verified it (each batch's, for batches).
    verified: bool = False
    location: str | None = None  # where the catalog placed the table (over SQL)
    invocation_id: str | None = None

    @property
    def settled_at(self) -> str | None:
        """Where the table was, when an earlier-runs search starting at `version` would stop
        there (SqlLog.settled)."""
        return self.location if self.verified else None


def last_runs(target_path: str, invocation_id: str) -> dict[str, LastRun]:
    """Where each fenced node left its table in the last run that wrote this folder's
    run_results.json, by unique_id: over SQL, where the fence starts looking for the newest
    version, and, when that is the run's verified commit and nothing landed since, what
    spares the capture its read of commits (`SqlLog.settled`). Versions are read anew either
    way. A file it cannot read gives none."""
    try:
        with open(os.path.join(target_path, FILE_NAME), encoding="utf-8") as f:
            results = json.load(f)
        last_invocation = results["metadata"]["invocation_id"]
        if last_invocation == invocation_id:
            return {}  # this run's own
        runs: dict[str, LastRun] = {}
        for result in results["results"]:
            response = result.get("adapter_response") or {}
            batches = response.get("batches")
            each = batches if isinstance(batches, list) and batches else [response]
            last = each[-1]
            version = last.get("commit_version", last.get("read_version"))
            # A version Delta could write: anything else is no start at all.
            if type(version) is not int or not 0 <= version < 2**63:
                continue
            where = last.get("table_location")
            # Not no_change: after a retry its read_version is above what its capture checked.
            # A batch's verification takes the batches before it as its own run's commits.
            verified = last.get("commit_version") == version and all(
                isinstance(r, dict) and r.get("fence_outcome") == "committed" for r in each
            )
            runs[str(result["unique_id"])] = LastRun(
                version,
                verified,
                where if isinstance(where, str) and where else None,
                str(last_invocation),
            )
        return runs
    except Exception:
        return {}
