"""docs/reliability.md, generated from the crash and soak tests' records.

python -m tests.reliability_report --command "make reliability"
"""

import argparse
import datetime
import json
import os
from collections import Counter

from bench.report import machine_line
from tests.conftest import REPO

RECORDS = os.environ.get("RELIABILITY_RECORDS") or os.path.join(REPO, ".cache", "reliability")


def load(name: str) -> dict:
    path = os.path.join(RECORDS, f"{name}.json")
    if not os.path.exists(path):
        raise SystemExit(f"{path} is missing: run the crash and soak tests first")
    with open(path) as f:
        return json.load(f)


def crash_section(crash: dict) -> list[str]:
    trials = crash["trials"]
    died = Counter(t["last_step"] for t in trials if t["killed"])
    lines = [
        "## Crash: SIGKILL inside each fence step",
        "",
        f"{len(trials)} trials, seed {crash['seed']} (`tests/functional/test_crash.py`). Each "
        "runs `dbt run` of a fenced model in a child process (its own JVM) and kills it with "
        "SIGKILL a seeded delay after it enters the chosen step. `race` trials commit a foreign "
        "UPDATE right after the pre-check, so the fence goes on to verify and revert. After "
        "each kill the test checks that the table reads at its latest version and holds the "
        "state before the batch or the whole batch, never part of it; then the next `dbt run` "
        "must succeed, carry only its own tag and converge on the batch. Where a raced write "
        "of ours had committed and no revert followed before the kill, the next run must "
        "instead refuse, naming that commit and the RESTORE that undoes it; the test runs that "
        "RESTORE, and the run after it must converge.",
        "",
        "Kills per step the process died in: "
        + ", ".join(f"{step} {n}" for step, n in sorted(died.items()))
        + f"; ran to the end before the kill: {sum(not t['killed'] for t in trials)}.",
        "",
        "| # | model | mode | kill in | after | died in | table after the kill | next run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        died_in = t["last_step"] if t["killed"] else "(finished first)"
        lines.append(
            f"| {t['number']} | {t['model']} | {t['mode']} | {t['phase']} | {t['delay_ms']} ms "
            f"| {died_in} | {t['state_after_kill']} | {t['next_run']} |"
        )
    partial = sum(t["state_after_kill"] not in ("before", "batch applied") for t in trials)
    outcomes = [t["next_run"].rsplit(": ", 1)[-1] for t in trials]
    failed_next = sum(o not in ("committed", "no_change") for o in outcomes)
    unresolved = sum(t["next_run"].startswith("refused (unresolved)") for t in trials)
    lines += [
        "",
        f"Partial batches after a kill: **{partial}**. Next runs that reported an unresolved "
        f"earlier write: **{unresolved}**. Runs that failed to converge: **{failed_next}**.",
        "",
    ]
    return lines


def soak_section(soak: dict) -> list[str]:
    s = soak["summary"]
    tables = [k for k, v in s.items() if isinstance(v, dict) and "ledger_check" in v]
    kinds = ", ".join(f"{k} {n}" for k, n in s["foreign_by_kind"].items())
    lines = [
        "## Randomized race soak, checked against a ledger",
        "",
        f"{s['trials']} trials, seed {s['seed']}, {s['seconds']} s "
        "(`tests/functional/test_soak.py`). Each trial runs one fenced model (merge, "
        "append_if_unchanged or replace_where, each on its own table) while another session of "
        "the same JVM runs one random foreign operation, before the run or at a random moment "
        "during it. Afterwards each table's history is replayed in Python from the ledger: "
        "every commit must belong to a ledger entry, each fenced write is recomputed from the "
        "version it read, and the replay must equal the table row for row.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| fenced runs | {s['fenced_runs']} |",
        f"| committed | {s['fenced_committed']} |",
        f"| no change (nothing to write) | {s['fenced_no_change']} |",
        f"| refused by the fence | {s['fence_failures']} |",
        f"| written and NOT reverted | {s['not_reverted']} |",
        f"| other failures | {s['other_failures']} |",
        f"| fence retries taken | {s['retries']} |",
        f"| foreign operations | {s['foreign_ops']} ({kinds}) |",
        f"| foreign committed | {s['foreign_committed']} |",
        f"| foreign refused by Delta's conflict detection | "
        f"{s['foreign_failed_on_delta_conflict']} |",
        f"| foreign failed otherwise | {s['foreign_failed_other']} |",
        f"| foreign commits inside a fenced run's window | {s['foreign_inside_fenced_window']} |",
        "",
        "| table | commits replayed | rows | ledger check |",
        "|---|---|---|---|",
    ]
    for table in tables:
        t = s[table]
        lines.append(f"| {table} | {t['commits']} | {t['rows']} | {t['ledger_check']} |")
    others = [e for e in soak["ledger"] if e["who"] == "dbt" and e["outcome"] == "error"]
    if others:
        lines += ["", "Fenced runs that failed for another reason than the fence:", ""]
        for e in others:
            first = e["error"].strip().splitlines()[:3]
            lines.append(f"- trial entry {e['number']} ({e['kind']}): " + " / ".join(first))
    failed_foreign = Counter(
        (e["kind"], e["error"][:90])
        for e in soak["ledger"]
        if e["who"] == "foreign" and not e["ok"]
    )
    if failed_foreign:
        lines += ["", "Foreign operations that failed, and Delta's first words:", ""]
        for (kind, error), n in failed_foreign.most_common():
            lines.append(f"- {kind} x{n}: `{error}`")
    checked = all(s[t]["ledger_check"] == "ok" for t in tables)
    verdict = "**0** (every table's replay matched)" if checked else "**see the ledger check**"
    lines += ["", f"Lost, phantom or duplicated rows: {verdict}.", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--command", default="python -m tests.reliability_report")
    args = parser.parse_args()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Reliability: crashes and randomized races",
        "",
        f"Generated by `{args.command}` on {now}; {machine_line()}. Do not edit by hand.",
        "",
        *crash_section(load("crash")),
        *soak_section(load("soak")),
    ]
    with open(os.path.join(REPO, "docs", "reliability.md"), "w") as f:
        f.write("\n".join(lines))
    print("wrote docs/reliability.md")


if __name__ == "__main__":
    main()
