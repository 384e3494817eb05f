"""docs/reliability.md, generated from the crash, soak and contention tests' records.

python -m tests.reliability_report --command "make reliability"

Also a pytest plugin (`-p tests.reliability_report`, as `make reliability` runs
tests/functional/test_contention.py): with RELIABILITY_RECORDS set, each contention test that
ran leaves contention_<label>_<class>.json there, from the tally and attempts the test itself
read (`contention.tally`, `contention.attempts`) and its outcome; <label> is
FENCE_CONTENTION_RECORD (else the profile, rounds and writers).
"""

import argparse
import datetime
import glob
import json
import os
import sys
import time
from collections import Counter
from typing import Any

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = os.environ.get("RELIABILITY_RECORDS") or os.path.join(REPO, ".cache", "reliability")


def load(name: str, required: bool = True) -> dict | None:
    path = os.path.join(RECORDS, f"{name}.json")
    if not os.path.exists(path):
        if not required:
            return None
        raise SystemExit(f"{path} is missing: run the crash and soak tests first")
    with open(path) as f:
        return json.load(f)


# The plugin ---------------------------------------------------------------------------------

_SEEN = pytest.StashKey[dict]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if "test_contention.py" not in item.nodeid or not os.environ.get("RELIABILITY_RECORDS"):
        return (yield)
    from tests.harness import contention

    seen: dict[str, Any] = {}
    tally, attempts = contention.tally, contention.attempts

    def recorded_tally(*args: Any, **kwargs: Any) -> contention.Tally:
        seen["tally"] = found = tally(*args, **kwargs)
        return found

    def recorded_attempts(*args: Any, **kwargs: Any) -> list[int]:
        seen["attempts"] = found = attempts(*args, **kwargs)
        return found

    contention.tally, contention.attempts = recorded_tally, recorded_attempts
    started = time.monotonic()
    try:
        return (yield)
    finally:
        contention.tally, contention.attempts = tally, attempts
        seen["seconds"] = round(time.monotonic() - started)
        item.stash[_SEEN] = seen


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.when == "call" and _SEEN in item.stash:
        _record_contention(item, report)
    return report


def _record_contention(item: pytest.Item, report: pytest.TestReport) -> None:
    from tests.harness import contention

    seen = item.stash[_SEEN]
    profile = item.config.getoption("--profile")
    rounds = os.environ.get("FENCE_CONTENTION_ROUNDS", "1")
    runs = os.environ.get("FENCE_CONTENTION_RUNS", "8")
    label = os.environ.get("FENCE_CONTENTION_RECORD") or f"{profile}-{rounds}x{runs}"
    cls = item.cls.__name__ if item.cls else item.name
    record: dict[str, Any] = {
        "label": label,
        "test": item.nodeid,
        "profile": profile,
        "rounds": int(rounds),
        "writers": int(runs),
        "disjoint_writers": int(os.environ.get("FENCE_CONTENTION_DISJOINT", "4")),
        "outcome": report.outcome,
        "failure": str(report.longrepr)[-3000:] if report.failed else None,
        "seconds": seen.get("seconds"),
        "command": " ".join(["pytest", *sys.argv[1:]]),
        "env": {k: v for k, v in os.environ.items() if k.startswith("FENCE_CONTENTION")},
    }
    tally = seen.get("tally")
    if tally is not None:
        record["tally"] = {
            "runs": len(tally.runs),
            "green": tally.green,
            "counter": tally.counter,
            "batches_once": sum(tally.batches.get(n) == contention.BATCH_ROWS for n in tally.runs),
            "restores": tally.restores,
            "problems": tally.problems(),
        }
    if "attempts" in seen:
        record["attempts"] = sorted(seen["attempts"])
    folder = os.environ["RELIABILITY_RECORDS"]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"contention_{label}_{cls}.json"), "w") as f:
        json.dump(record, f, indent=1)


# The report ---------------------------------------------------------------------------------


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
    serial = sum(t["next_run"].startswith("over a serial result") for t in trials)
    lines += [
        "",
        f"Partial batches after a kill: **{partial}**. Next runs that reported an unresolved "
        f"earlier write: **{unresolved}**; that went on over a raced write standing as a serial "
        f"result (the fence's judgement, E213): **{serial}**. Runs that failed to converge: "
        f"**{failed_next}**.",
        "",
    ]
    return lines


KIND_COLUMNS = (
    ("runs", "runs"),
    ("green", "green"),
    ("refused", "refused"),
    ("retried", "retried"),
    ("restores", "RESTOREs"),
    ("not_reverted", "NOT reverted"),
    ("lost", "lost"),
    ("duplicated", "duplicated"),
)


def kinds_table(soaks: list[tuple[str, dict]]) -> list[str]:
    """One row per trial kind and profile: the figures issue 59 asks for."""
    lines = [
        "| trial kind | profile | trials | " + " | ".join(h for _, h in KIND_COLUMNS) + " |",
        "|---|---|---|" + "---|" * len(KIND_COLUMNS),
    ]
    for profile, soak in soaks:
        s = soak["summary"]
        for kind, counts in s["kinds"].items():
            k = kind.rsplit("K=", 1)[-1] if "K=" in kind else None
            trials = s["trials_per_k"][k] if k else s["trials"]
            cells = " | ".join(str(counts[c]) for c, _ in KIND_COLUMNS)
            lines.append(f"| {kind} | {profile} | {trials} | {cells} |")
    return lines


TIMING_LEGEND = [
    "The timings, read from the versions (`TestSoak.timing`; f is the foreign commit, w the "
    "first write of the run committed after f, its snapshot w's `readVersion`):",
    "",
    "- *before vB*: the foreign operation ran before the run started, or f is at or below vB. "
    "Not a race; the run builds on it.",
    "- *before the write's pre-check (tolerated)*: f is in w's tag as tolerated: the fence "
    "judged it before the write and it conflicts with nothing the model read or writes.",
    "- *after vB; the run committed nothing after it*: the fence refused before writing "
    "(pre-check), Delta refused the write inside its commit, or the run failed on a column a "
    "raced ALTER added. Nothing of the run was written, so nothing needed a RESTORE.",
    "- *after vB; an earlier attempt refused, the retry committed*: f is at or below the vB of "
    "the attempt that committed (`fence_retries`).",
    "- *between the pre-check and the write's snapshot*: f is at or below w's snapshot and "
    "not in its tolerated list: it landed after the fence's last check and before the write's "
    "transaction began, so only verification could see it. If it conflicts, this is the "
    "window that needs a compensating RESTORE (docs/fence.md, 'Fenced writers refuse each "
    "other in Delta': an unfenced writer never sets the app id, so Delta cannot refuse it).",
    "- *during the write (Delta committed the write over it)*: w's snapshot is below f: "
    "Delta's own conflict check let our commit through above it (a merge's rebase); "
    "verification judges it like the gap.",
    "- *after the run's write committed*: f is above every write of the run. A RESTORE of that "
    "write would undo f too, so a write refused for something else would end NOT reverted.",
    "- *after the run returned*, *no foreign commit*: not a race (the statement matched no "
    "row, or Delta refused it).",
]


def soak_section(soak: dict, profile: str) -> list[str]:
    s = soak["summary"]
    tables = [k for k, v in s.items() if isinstance(v, dict) and "ledger_check" in v]
    kinds = ", ".join(f"{k} {n}" for k, n in s["foreign_by_kind"].items())
    refused_by = ", ".join(f"{d} {n}" for d, n in s.get("refused_by", {}).items() if n) or "none"
    # Delta's errors for the raced column that the fence passes on as the statement's own,
    # unretried and naming no landed commit.
    vias = {k: n for k, n in s.get("new_column_raced_via", {}).items() if n}
    via = (
        " (of which Delta's "
        + ", ".join(f"{k} {n}" for k, n in vias.items())
        + ": the fence passes these on as the statement's own error, unretried, naming no "
        "landed commit)"
        if vias
        else ""
    )
    lines = [
        f"### Against an unfenced writer ({profile})",
        "",
        f"{s['trials']} trials, seed {s['seed']}, {s['seconds']} s "
        f"(`tests/functional/test_soak.py::TestSoak`, `--profile {profile}`). Each trial runs "
        "one fenced model (merge, append_if_unchanged or replace_where, each on its own table; "
        "`fence_retries` 0, 0 or 2 at random) while another session (over Thrift: another "
        "client) runs one random foreign operation, before the run or a random 0-1 s after it "
        "captured vB.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| fenced runs | {s['fenced_runs']} |",
        f"| committed | {s['fenced_committed']} |",
        f"| no change (nothing to write) | {s['fenced_no_change']} |",
        f"| refused by the fence | {s['fence_failures']} (detected by: {refused_by}) |",
        f"| written and reverted (a RESTORE) | {s['reverted']} |",
        f"| written and NOT reverted | {s['not_reverted']} |",
        f"| RESTORE commits | {s['restores']} |",
        f"| failed on a column a raced ALTER added (nothing written) | {s['new_column_raced']}"
        f"{via} |",
        f"| refused for an earlier run's unresolved write | {s['unresolved']} |",
        f"| other failures | {s['other_failures']} |",
        f"| fence retries taken | {s['retries']} |",
        f"| foreign operations | {s['foreign_ops']} ({kinds}) |",
        f"| foreign committed | {s['foreign_committed']} |",
        f"| foreign refused by Delta's conflict detection | "
        f"{s['foreign_failed_on_delta_conflict']} |",
        f"| foreign failed otherwise | {s['foreign_failed_other']} |",
        f"| foreign commits inside a fenced run's window | {s['foreign_inside_fenced_window']} |",
        "",
        "| table | commits replayed | rows | RESTOREs | lost | duplicated | ledger check | "
        "claims |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for table in tables:
        t = s[table]
        lines.append(
            f"| {table} | {t['commits']} | {t['rows']} | {t['restores']} | {t['lost']} "
            f"| {t['duplicated']} | {t['ledger_check']} | {t['claims']} |"
        )
    lines += [
        "",
        "Where the trial's foreign commit landed, and what became of the fenced run it raced "
        "(from the versions: the foreign commit against the run's vB, its write's commit and "
        "that commit's snapshot, `readVersion`):",
        "",
        "| timing of the foreign commit | trials | needed a RESTORE | NOT reverted | refused "
        "| green | RESTOREs per 1,000 | NOT reverted per 1,000 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for timing, t in sorted(s["timings"].items(), key=lambda kv: -kv[1]["trials"]):
        lines.append(
            f"| {timing} | {t['trials']} | {t['restore']} | {t['not_reverted']} "
            f"| {t['refused']} | {t['green']} | {1000 * t['restore'] / t['trials']:.0f} "
            f"| {1000 * t['not_reverted'] / t['trials']:.0f} |"
        )
    lines += ["", *TIMING_LEGEND]
    explained = s.get("explained", [])
    if explained:
        lines += [
            "",
            "Every run that needed a RESTORE or ended NOT reverted:",
            "",
            "| entry | table | outcome | refused by | vB | our writes | RESTOREs | foreign "
            "commit | fired | timing |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for e in explained:
            fired = "before the run" if e["moment"] == "before" else f"{e['delay']} s after vB"
            lines.append(
                f"| {e['entry']} | {e['table']} | {e['outcome']} | {e['detected'] or ''} "
                f"| {e['vB'] if e['vB'] is not None else ''} "
                f"| {', '.join(f'v{v}' for v in e['writes'])} "
                f"| {', '.join(f'v{v}' for v in e['restores'])} | {e['foreign']} | {fired} "
                f"| {e['timing']} |"
            )
    else:
        lines += ["", "No run needed a RESTORE or ended NOT reverted."]
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
    checked = all(s[t]["ledger_check"] == "ok" and s[t]["claims"] == "ok" for t in tables)
    verdict = "**0** (every table's replay matched)" if checked else "**see the ledger check**"
    lines += ["", f"Lost, phantom or duplicated rows: {verdict}.", ""]
    return lines


def fenced_soak_section(soak: dict, profile: str) -> list[str]:
    s = soak["summary"]
    writers = "`contention.fenced_runs` threads" if profile == "session" else "`dbt run` processes"
    per_k = ", ".join(
        f"K={k}: {n} trials in {s['seconds_per_k'][k]} s" for k, n in s["trials_per_k"].items()
    )
    lines = [
        f"### Fenced against fenced ({profile})",
        "",
        f"{s['trials']} trials, {s['seconds']} s (`tests/functional/test_soak.py::"
        f"TestFencedSoak`, `--profile {profile}`; {per_k}). Each trial starts K fenced writers "
        f"at once ({writers}), each writing tests/harness/contention.py's `counter` (a merge "
        "that reads the counter at vB and writes it + 1) and then `batches` (an "
        "append_if_unchanged of its own 10-row batch), with `fence_retries` K; each K on tables "
        "of its own, no unfenced writer. The same ledger replay checks every commit, and the "
        "contention tally checks the counter against the green runs, every batch once and the "
        "SetTransaction versions increasing.",
        "",
        "| K | runs | green | counter | batches once | RESTOREs | attempts (max) | problems |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, counts in s["kinds"].items():
        k = kind.rsplit("K=", 1)[-1]
        t = s["tallies"][f"K={k}"]
        lines.append(
            f"| {k} | {t['runs']} | {t['green']} | {t['counter']} | {t['batches_once']} "
            f"| {t['restores']} | {counts['max_attempts']} | {'; '.join(t['problems']) or 'none'} |"
        )
    lines += [
        "",
        "| table | commits replayed | rows | RESTOREs | lost | duplicated | ledger check | "
        "claims |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for table, t in s["tables"].items():
        lines.append(
            f"| {table} | {t['commits']} | {t['rows']} | {t['restores']} | {t['lost']} "
            f"| {t['duplicated']} | {t['ledger_check']} | {t['claims']} |"
        )
    red = [e for e in soak["ledger"] if not e["ok"]]
    if red:
        lines += ["", "Fenced writes that did not commit:", ""]
        for e in red:
            first = (e["error"] or e["outcome"]).strip().splitlines()[:3]
            lines.append(f"- {e['params']['run']} {e['table']}: " + " / ".join(first))
    lines.append("")
    return lines


def contention_section(records: list[dict]) -> list[str]:
    lines = [
        "## Contention: K overlapping runs on one table",
        "",
        "`tests/functional/test_contention.py` (workload: tests/harness/contention.py, "
        "`fence_retries` 20): over a server, K `dbt run` processes at once per round; on the "
        "session, K writers in threads with sessions of their own; and K writers each merging "
        "its own partition without `fence_retries` (disjoint). Every run must be green, the "
        "counter equal to the runs, every batch once, no RESTORE, and some attempt retried "
        "(they raced).",
        "",
        "| run | test | profile | rounds x writers | result | green | counter | batches once "
        "| RESTOREs | attempts | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        test = r["test"].rsplit("::", 2)[-2] if "::" in r["test"] else r["test"]
        t = r.get("tally")
        if test == "TestDisjointPartitions":
            shape = f"1 x {r['disjoint_writers']} (disjoint)"
        else:
            shape = f"{r['rounds']} x {r['writers']}"
        attempts = r.get("attempts")
        spread = (
            ", ".join(f"{n}: {c}" for n, c in sorted(Counter(attempts).items()))
            if attempts
            else "all 1 (asserted)"
            if test == "TestDisjointPartitions" and r["outcome"] == "passed"
            else ""
        )
        cells = (
            [
                str(t["green"]) + f" of {t['runs']}",
                str(t["counter"]),
                str(t["batches_once"]),
                str(t["restores"]),
            ]
            if t
            else ["", "", "", "0 (asserted)" if r["outcome"] == "passed" else ""]
        )
        lines.append(
            f"| {r['label']} | {test} | {r['profile']} | {shape} | {r['outcome']} | "
            + " | ".join(cells)
            + f" | {spread} | {r['seconds']} |"
        )
    failed = [r for r in records if r["outcome"] != "passed"]
    for r in failed:
        lines += ["", f"{r['label']} {r['test']} failed:", "", "```", r["failure"] or "", "```"]
    lines += [
        "",
        "Attempts: the `fence_retries` attempt of each committed write, both tables "
        "(attempt: how many writes committed at it).",
        "",
    ]
    return lines


def summary_section(soaks: list[tuple[str, dict]]) -> list[str]:
    return [
        "## Summary",
        "",
        "Per trial kind of the soak (`lost`: a row the ledger's replay holds that the table "
        "lacks or holds otherwise, or a write left standing whose result differs from what it "
        "would have written from the version right below its commit; `duplicated`: a key "
        "twice; `refused`: runs the fence refused, ending red; `retried`: `fence_retries` "
        "attempts taken after a refusal):",
        "",
        *kinds_table(soaks),
        "",
    ]


def main() -> None:
    from bench.report import machine_line

    parser = argparse.ArgumentParser()
    parser.add_argument("--command", default="python -m tests.reliability_report")
    parser.add_argument("--out", default=os.path.join(REPO, "docs", "reliability.md"))
    args = parser.parse_args()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    soaks = []
    sections = []
    for profile in ("session", "thrift"):
        suffix = "" if profile == "session" else f"_{profile}"
        soak = load(f"soak{suffix}", required=profile == "session")
        fenced = load(f"soak_fenced{suffix}", required=profile == "session")
        if soak:
            soaks.append((profile, soak))
            sections += soak_section(soak, profile)
        if fenced:
            soaks.append((profile, fenced))
            sections += fenced_soak_section(fenced, profile)
    contention = []
    for path in sorted(glob.glob(os.path.join(RECORDS, "contention_*.json"))):
        with open(path) as f:
            contention.append(json.load(f))
    crash = load("crash")
    assert crash is not None
    lines = [
        "# Reliability: crashes, randomized races and contention",
        "",
        f"Generated by `{args.command}` on {now}; {machine_line()}. Do not edit by hand.",
        "",
        *summary_section(soaks),
        *crash_section(crash),
        "## Randomized race soak, checked against a ledger",
        "",
        "Afterwards each table's history is replayed in Python from the ledger: every commit "
        "must belong to a ledger entry, each fenced write is recomputed from the version it "
        "read, and the replay must equal the table row for row; each run's claim (committed, "
        "never written, reverted by the RESTORE it names, NOT reverted) must match the history; "
        "and a write that stands must equal what it would have written from the version right "
        "below its own commit (else a lost update).",
        "",
        *sections,
        *(contention_section(contention) if contention else []),
    ]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
