"""The table's own definition (its metaData and protocol) at a version, and whether a commit's
changes it: a RESTORE writes both as the table has them."""

import json
from collections.abc import Iterable, Mapping
from typing import Any

from dbt.adapters.fenced_spark.fence.changes import Actions, RowProbe
from dbt.adapters.fenced_spark.fence.delta.actions import ActionReader, parse_actions
from dbt.adapters.fenced_spark.fence.delta.history import checksum_file
from dbt.adapters.fenced_spark.fence.delta.sql_log import delta_log
from dbt.adapters.fenced_spark.fence.outcome import first_line

# Fields of a `metaData` action that change nothing a reader or writer of the table relies
# on: a RESTORE across a CREATE OR REPLACE writes the older createdTime, one across a
# COMMENT ON TABLE the older description.
_DOCUMENTATION = {"createdTime", "description", "name"}
_METADATA_LABELS = {
    "id": "table id",
    "format": "format",
    "schemaString": "schema",
    "partitionColumns": "partition columns",
}


def metadata_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What a `metaData` action changes against the table's before it, by field: the schema
    (as JSON, not as text), the partition columns, each property, the format, the id."""
    changed = []
    for key in sorted((before.keys() | after.keys()) - _DOCUMENTATION):
        old, new = before.get(key), after.get(key)
        if key == "schemaString":
            old, new = _json(old), _json(new)
        if key == "configuration":
            old, new = old or {}, new or {}
            keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            if keys:
                more = ", ..." if len(keys) > 3 else ""
                changed.append(f"properties {', '.join(keys[:3])}{more}")
        elif old != new:
            changed.append(_METADATA_LABELS.get(key, key))
    return changed


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def protocol_key(protocol: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        protocol.get("minReaderVersion"),
        protocol.get("minWriterVersion"),
        sorted(protocol.get("readerFeatures") or ()),
        sorted(protocol.get("writerFeatures") or ()),
    )


# How far back from a commit the table's metaData and protocol before it are looked for in
# the log, when Delta's checksum of the version before it is missing (one read of files by
# name).
STATE_LOOKBACK = 32


def _definition(lines: Iterable[str]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The metaData and protocol actions of one commit file, None where it has none."""
    actions = parse_actions(lines)
    return actions.metadata, actions.protocol


class TableDefinitions:
    """The table's metaData and protocol at each version, read once, from the commit files the
    conflict analysis read (`lines`, shared), Delta's checksum, or the log before it."""

    def __init__(
        self, table: str, log: ActionReader, probe: RowProbe, lines: dict[int, list[str]]
    ) -> None:
        self.table = table
        self.log = log
        self.probe = probe
        self._lines = lines
        self._location: str | None = None
        self._states: dict[int, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}

    def change(self, version: int, actions: Actions) -> str | None:
        """How the commit's metaData and protocol change the table's at the version before
        it, as the reason it conflicts; None when they are the table's own."""
        written = [
            kind
            for kind, body in (("metaData", actions.metadata), ("protocol", actions.protocol))
            if body is not None
        ]
        why = f"neither its checksum nor the {STATE_LOOKBACK + 1} commits up to it say"
        changes: list[str] = []
        try:
            metadata, protocol = self._state(version - 1)
            if actions.metadata is not None and metadata is not None:
                fields = metadata_changes(metadata, actions.metadata)
                if fields:
                    changes.append(f"metaData: {', '.join(fields)}")
            if (
                actions.protocol is not None
                and protocol is not None
                and protocol_key(protocol) != protocol_key(actions.protocol)
            ):
                changes.append("protocol")
        except Exception as exc:  # an unreadable log, a definition that does not parse
            metadata = protocol = None
            why = first_line(exc)
        if (actions.metadata is not None and metadata is None) or (
            actions.protocol is not None and protocol is None
        ):
            return (
                f"wrote {', '.join(written)}, which could not be compared with the table's at "
                f"v{version - 1} ({why}), so it counts as a conflict"
            )
        return f"changed the table itself ({'; '.join(changes)})" if changes else None

    def _state(self, version: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The table's metaData and protocol at `version`: its own commit file when it holds
        both (a RESTORE, a CREATE), else Delta's checksum of the version (its state there,
        exact), else the newest of each in the commits up to it, STATE_LOOKBACK of them."""
        if version not in self._states:
            known = self._lines.get(version)
            found = _definition(known) if known is not None else (None, None)
            if None in found:
                found = self._checksum(version) or self._walk(version)
            self._states[version] = found
        return self._states[version]

    def _checksum(self, version: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Delta's checksum of `version` (`N.crc`, its state there), read by the server as the
        commit files are, any connection method; None when there is none to read (a RESTORE
        writes none, nor may another engine) or it does not parse."""
        try:
            if self._location is None:
                self._location = self.probe.location(self.table)
            path = f"{delta_log(self._location)}/{checksum_file(version)}".replace("`", "``")
            rows = self.probe.fetch(
                "SELECT get_json_object(value, '$.metadata'), get_json_object(value, "
                f"'$.protocol') FROM text.`{path}`"
            )
            metadata, protocol = json.loads(str(rows[0][0])), json.loads(str(rows[0][1]))
        except Exception:
            return None
        if len(rows) != 1 or not isinstance(metadata, dict) or not isinstance(protocol, dict):
            return None
        return metadata, protocol

    def _walk(self, version: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        low = max(0, version - STATE_LOOKBACK)
        wanted = [v for v in range(low, version + 1) if v not in self._lines]
        if wanted:
            self._lines.update(self.log.actions(self.table, wanted))
        metadata: dict[str, Any] | None = None
        protocol: dict[str, Any] | None = None
        for below in range(version, low - 1, -1):
            if below not in self._lines:
                break  # cleaned up: what came before is in a checkpoint
            older = _definition(self._lines[below])
            metadata = metadata if metadata is not None else older[0]
            protocol = protocol if protocol is not None else older[1]
            if metadata is not None and protocol is not None:
                break
        return metadata, protocol
