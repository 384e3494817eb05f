"""A small dbt project in a folder of its own, and `dbt run` processes of it: each process is a
separate Spark driver (its own JVM) on the shared lakehouse, as two schedulers, a double-fired
job or two pipelines start them."""

import datetime
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness.hdfs import SharedLakehouse, child_env

PROFILE = "twodrivers"


@dataclass
class HistoryEntry:
    version: int
    operation: str
    read_version: int | None
    timestamp: float
    tag: dict[str, Any] | None


def history(rows: list[dict]) -> list[HistoryEntry]:
    """DESCRIBE HISTORY's rows (from SharedLakehouse.sql), oldest first, tags parsed."""
    entries = []
    for row in rows:
        try:
            tag = json.loads(row["userMetadata"]) if row["userMetadata"] else None
        except ValueError:
            tag = None
        entries.append(
            HistoryEntry(
                row["version"], row["operation"], row["readVersion"], row["timestamp"], tag
            )
        )
    return sorted(entries, key=lambda e: e.version)


class DbtProject:
    """dbt_project.yml, models and a profiles.yml whose targets are the drivers' profiles."""

    def __init__(
        self,
        root: Path,
        lakehouse: SharedLakehouse,
        models: dict[str, str],
        configs: dict[str, Any] | None = None,
    ) -> None:
        """`configs`: dbt_project.yml's model configs besides the file format, such as a
        pre-hook of every model (`{"+pre-hook": ...}`) or of one (`{"counter": {...}}`)."""
        self.root = root
        self.lakehouse = lakehouse
        # A schema per test: the lakehouse (and its metastore) lives for the whole pytest run.
        self.schema = f"race_{uuid.uuid4().hex[:8]}"
        self.targets: dict[str, dict] = {}
        (root / "models").mkdir(parents=True)
        for name, sql in models.items():
            (root / "models" / name).write_text(sql)
        project = {
            "name": "twodrivers",
            "version": "1.0",
            "config-version": 2,
            "profile": PROFILE,
            # Stock dbt-spark's default is parquet; fenced_spark's is delta already.
            "models": {"+file_format": "delta", **({"twodrivers": configs} if configs else {})},
        }
        (root / "dbt_project.yml").write_text(yaml.safe_dump(project))

    def target(self, name: str, adapter: str = "fenced_spark") -> str:
        """A target for one driver, `name`, on the shared lakehouse."""
        self.targets[name] = self.lakehouse.profile_target(name, self.schema, adapter)
        self.save()
        return name

    def save(self) -> None:
        """profiles.yml from `targets`, after a test edited one."""
        profiles = {PROFILE: {"target": next(iter(self.targets)), "outputs": self.targets}}
        (self.root / "profiles.yml").write_text(yaml.safe_dump(profiles))

    def table(self, model: str) -> str:
        return f"{self.schema}.{model}"

    def start(self, name: str, dbt_vars: dict | None = None, *args: str) -> "DbtRun":
        """`dbt run --target name` in a process of its own (its own JVM), started now."""
        return DbtRun(self, name, dbt_vars or {}, args)

    def run(self, name: str, dbt_vars: dict | None = None, *args: str) -> "DbtRun":
        """A lone `dbt run` (one driver), waited for; it must succeed."""
        run = self.start(name, dbt_vars, *args)
        assert run.wait() == 0, run.output[-4000:]
        return run


class DbtRun:
    def __init__(self, project: DbtProject, name: str, dbt_vars: dict, args: tuple) -> None:
        self.project = project
        self.name = name
        self.folder = project.root / "runs" / f"{name}-{uuid.uuid4().hex[:6]}"
        self.folder.mkdir(parents=True)
        dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
        command = [
            dbt,
            "run",
            *("--project-dir", str(project.root), "--profiles-dir", str(project.root)),
            *("--target", name, "--vars", json.dumps(dbt_vars)),
            *("--target-path", str(self.folder / "target")),
            *("--log-path", str(self.folder / "logs")),
            *args,
        ]
        env = child_env()
        with open(self.folder / "output.txt", "w") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=project.root,
                env=env,
                start_new_session=True,
            )

    def wait(self, timeout: float = 900) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    @property
    def output(self) -> str:
        return (self.folder / "output.txt").read_text(errors="replace")

    def results(self) -> dict:
        return json.loads((self.folder / "target" / "run_results.json").read_text())

    @property
    def invocation_id(self) -> str:
        return self.results()["metadata"]["invocation_id"]

    def timing(self, model: str, phase: str) -> tuple[float, float]:
        """(start, end) in epoch seconds of one node's phase (compile, execute), dbt's own."""
        [result] = [r for r in self.results()["results"] if r["unique_id"].endswith(f".{model}")]
        [step] = [t for t in result["timing"] if t["name"] == phase]
        return _epoch(step["started_at"]), _epoch(step["completed_at"])

    def message(self, model: str) -> str:
        [result] = [r for r in self.results()["results"] if r["unique_id"].endswith(f".{model}")]
        return result["message"] or ""


def _epoch(stamp: str) -> float:
    # dbt writes UTC, with a Z or without a zone.
    parsed = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()
