"""What a long start says: Ivy's downloads as Ivy reports them (Spark's resolver and Ivy's
main print the same lines), that the JVM is starting once it takes a while; nothing when fast."""

import os
import time

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.fenced_spark import ivy, start_progress
from dbt.adapters.fenced_spark.start_progress import IvyReport

# Spark's resolver on a cold cache (spark.log, 2026-12-02), cut to two of its 33 jars.
COLD = """\
:: loading settings :: url = jar:file:/v/ivy-2.5.3.jar!/org/apache/ivy/core/settings/ivysettings.xml
Ivy Default Cache set to: {cache}
The jars for the packages stored in: {jars}
io.delta#delta-spark_4.1_2.13 added as a dependency
:: resolving dependencies :: org.apache.spark#spark-submit-parent-c12fd92e;1.0
\tconfs: [default]
You probably access the destination server through a proxy server that is not well configured.
\tfound io.delta#delta-spark_4.1_2.13;4.4.0 in central
\tfound com.fasterxml.jackson.core#jackson-core;2.13.5 in central
downloading {maven}/io/delta/delta-spark_4.1_2.13/4.4.0/delta-spark_4.1_2.13-4.4.0.jar ...
\t[SUCCESSFUL ] io.delta#delta-spark_4.1_2.13;4.4.0!delta-spark_4.1_2.13.jar (365ms)
downloading {maven}/com/fasterxml/jackson/core/jackson-core/2.13.5/jackson-core-2.13.5.jar ...
\t[SUCCESSFUL ] com.fasterxml.jackson.core#jackson-core;2.13.5!jackson-core.jar(bundle) (80ms)
:: resolution report :: resolve 18184ms :: artifacts dl 4451ms
\t:: modules in use:
:: retrieving :: org.apache.spark#spark-submit-parent-c12fd92e
\tconfs: [default]
\t2 artifacts copied, 0 already retrieved (9872kB/446ms)
""".replace("{maven}", "https://repo1.maven.org/maven2")

# The same start once Ivy's cache has the jars (no record of them yet): nothing to say.
WARM = """\
:: resolving dependencies :: org.apache.spark#spark-submit-parent-0e2b;1.0
\tfound io.delta#delta-spark_4.1_2.13;4.4.0 in central
:: resolution report :: resolve 1012ms :: artifacts dl 9ms
\t0 artifacts copied, 33 already retrieved (0kB/12ms)
"""


def said(report: IvyReport, text: str, step: float = 0.1) -> list[str]:
    lines = []
    for number, line in enumerate(text.splitlines()):
        now = number * step
        lines += filter(None, [report.line(line, now), report.tick(now)])
    return lines + list(filter(None, [report.finished(len(text.splitlines()) * step)]))


def cached(cache, org: str, module: str, kind: str, name: str, size: int) -> None:
    os.makedirs(cache / org / module / kind, exist_ok=True)
    (cache / org / module / kind / name).write_bytes(b"\0" * size)


def test_a_cold_start_says_what_it_downloads_from_where_into_which_folder(tmp_path):
    cache, jars = tmp_path / "ivy" / "cache", tmp_path / "ivy" / "jars"
    cached(
        cache,
        "io.delta",
        "delta-spark_4.1_2.13",
        "jars",
        "delta-spark_4.1_2.13-4.4.0.jar",
        9_471_929,
    )
    cached(
        cache,
        "com.fasterxml.jackson.core",
        "jackson-core",
        "bundles",
        "jackson-core-2.13.5.jar",
        400_000,
    )
    report = IvyReport("io.delta:delta-spark_4.1_2.13:4.4.0", "/not/yet/known")
    assert said(report, COLD.format(cache=cache, jars=jars)) == [
        "Downloading io.delta:delta-spark_4.1_2.13:4.4.0 and its dependencies (2 modules) "
        f"from repo1.maven.org into {cache}; once: later starts use them",
        "  delta-spark_4.1_2.13-4.4.0.jar: 9.5 MB in 0.4 s (1 downloaded, 9.5 MB so far)",
        "  jackson-core-2.13.5.jar: 400 kB in 0.1 s (2 downloaded, 9.9 MB so far)",
        "Downloaded 2 jars, 9.9 MB, in 1 s; io.delta:delta-spark_4.1_2.13:4.4.0 uses 2 jars "
        f"in {jars}",
    ]


def test_a_resolution_slow_before_any_download_says_what_it_found_every_few_seconds():
    report = IvyReport("g:a:1", "/cache")
    lines = COLD.format(cache="/cache", jars="/jars").splitlines()[:9]
    assert said(report, "\n".join(lines), step=start_progress.SLOW_SECONDS / 2) == [
        "Resolving g:a:1: 0 modules found so far",  # a repository slow to answer
        "Resolving g:a:1: 2 modules found so far",
    ]


def test_a_warm_cache_says_nothing():
    assert said(IvyReport("g:a:1", "/cache"), WARM) == []


def test_ivys_main_has_no_retrieve_step_the_whole_is_said_at_its_end(tmp_path):
    cached(
        tmp_path, "org.apache.derby", "derbyclient", "jars", "derbyclient-10.16.1.1.jar", 604_000
    )
    main = (
        ":: resolving dependencies :: caller#all-caller;working\n"
        "\tfound org.apache.derby#derbyclient;10.16.1.1 in public\n"
        "downloading https://repo1.maven.org/maven2/org/apache/derby/derbyclient/10.16.1.1/"
        "derbyclient-10.16.1.1.jar ...\n"
        "\t[SUCCESSFUL ] org.apache.derby#derbyclient;10.16.1.1!derbyclient.jar (640ms)\n"
    )
    assert said(IvyReport("org.apache.derby:derbyclient:10.16.1.1", str(tmp_path)), main)[-1] == (
        f"Downloaded 1 jar, 604 kB, in 0 s, into {tmp_path}"
    )


def test_a_start_says_it_is_starting_only_when_it_takes_a_while(tmp_path, monkeypatch):
    logged: list[str] = []
    monkeypatch.setattr(start_progress.logger, "info", logged.append)
    monkeypatch.setattr(start_progress, "POLL_SECONDS", 0.05)
    log = tmp_path / "spark.log"
    log.write_text("an earlier start's output\n")
    with start_progress.watch(str(log), IvyReport("g:a:1", "/c"), "Starting", "Started"):
        pass
    assert logged == []
    monkeypatch.setattr(start_progress, "SLOW_SECONDS", 0.2)
    with start_progress.watch(str(log), IvyReport("g:a:1", "/c"), "Starting", "Started"):
        with open(log, "a") as out:
            out.write(WARM)
        time.sleep(0.5)
    assert logged[0] == "Starting" and logged[1].startswith("Started in ")
    assert len(logged) == 2


def test_ivys_failure_still_says_its_own_words(tmp_path, monkeypatch):
    # Its output now goes to a file the progress lines follow; the error quotes that file.
    monkeypatch.setattr(ivy, "_ivy_jar", lambda: str(tmp_path / "no-ivy.jar"))
    with pytest.raises(DbtRuntimeError, match="Unable to access jarfile"):
        ivy.classpath("g:a:1", str(tmp_path / "cache"))
    assert os.listdir(tmp_path / "cache" / "resolved") == []


def test_a_start_that_fails_is_not_said_to_have_started(tmp_path, monkeypatch):
    logged: list[str] = []
    monkeypatch.setattr(start_progress.logger, "info", logged.append)
    monkeypatch.setattr(start_progress, "POLL_SECONDS", 0.05)
    monkeypatch.setattr(start_progress, "SLOW_SECONDS", 0.1)
    log, report = str(tmp_path / "log"), IvyReport("g:a:1", "/c")
    with pytest.raises(RuntimeError), start_progress.watch(log, report, "Up", "Upped"):
        time.sleep(0.3)
        raise RuntimeError("the JVM exited")
    assert logged == ["Up"]


def test_a_download_is_said_at_once_after_what_is_starting(tmp_path, monkeypatch):
    logged: list[str] = []
    monkeypatch.setattr(start_progress.logger, "info", logged.append)
    monkeypatch.setattr(start_progress, "POLL_SECONDS", 0.05)
    log = tmp_path / "spark.log"
    with start_progress.watch(str(log), IvyReport("g:a:1", str(tmp_path)), "Starting", "Started"):
        log.write_text(COLD.format(cache=tmp_path, jars=tmp_path / "jars"))
        time.sleep(0.2)  # well under SLOW_SECONDS
    assert logged[0] == "Starting" and logged[1].startswith("Downloading g:a:1 ")
    assert logged[-1].startswith("Started in ") and len(logged) == 6
