"""The embedded JVM's class archive: written once at exit, published only whole, then mapped."""

import os
import re

import pytest

from dbt.adapters.fenced_spark import class_archive, session
from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials

PACKAGE = "io.delta:delta-spark_4.1_2.13:4.4.0"


@pytest.fixture
def cache(tmp_path) -> str:
    if class_archive.archive_key(PACKAGE) is None:
        pytest.fail("no java binary found: JAVA_HOME or java on PATH is needed by the session")
    return str(tmp_path)


def part_of(options: str) -> str:
    found = re.fullmatch(r"-XX:ArchiveClassesAtExit=(\S+) -Xlog:cds=off", options)
    assert found, options
    return found.group(1)


def test_the_first_start_writes_an_archive_at_exit_to_its_own_part(cache):
    first = part_of(class_archive.java_options(cache, PACKAGE))
    second = part_of(class_archive.java_options(cache, PACKAGE))
    assert first != second and first.endswith(".part")
    assert os.path.dirname(first) == os.path.join(cache, "cds")


def test_a_whole_part_is_published_and_then_mapped(cache):
    part = part_of(class_archive.java_options(cache, PACKAGE))
    with open(part, "wb") as archive:
        archive.write(class_archive.MAGIC + b"\0" * 64)
    options = class_archive.java_options(cache, PACKAGE)
    final = os.path.join(cache, "cds", f"{class_archive.archive_key(PACKAGE)}.jsa")
    assert options == f"-XX:SharedArchiveFile={final}"
    assert not os.path.exists(part) and os.path.isfile(final)
    # Another JVM's whole part, written later: removed, the published archive stays.
    late = os.path.join(cache, "cds", f"{class_archive.archive_key(PACKAGE)}.other.part")
    with open(late, "wb") as archive:
        archive.write(class_archive.MAGIC + b"\1" * 64)
    assert class_archive.java_options(cache, PACKAGE) == options
    assert not os.path.exists(late)
    with open(final, "rb") as archive:
        assert archive.read() == class_archive.MAGIC + b"\0" * 64


def test_a_part_being_written_holds_off_every_other_start(cache):
    part = part_of(class_archive.java_options(cache, PACKAGE))
    with open(part, "wb") as archive:
        archive.write(b"\0" * 64)  # regions written, header not yet
    assert class_archive.java_options(cache, PACKAGE) == ""
    os.utime(part, (1, 1))  # abandoned long ago: a JVM killed while writing
    assert part_of(class_archive.java_options(cache, PACKAGE)) != part
    assert not os.path.exists(part)


def test_no_archive_under_the_users_own_jvm_options(tmp_path):
    creds = FencedSparkCredentials(
        schema="s",
        folder=str(tmp_path),
        jars_cache=str(tmp_path),
        server_side_parameters={"spark.driver.extraJavaOptions": "-Xss4m"},
    )
    assert session.launch_conf(creds)["spark.driver.extraJavaOptions"] == "-Xss4m"
    ours = FencedSparkCredentials(schema="s", folder=str(tmp_path), jars_cache=str(tmp_path))
    options = session.launch_conf(ours)["spark.driver.extraJavaOptions"]
    assert options.startswith(f"-Dderby.system.home={tmp_path} -XX:ArchiveClassesAtExit=")
    # A server's JVM has another class path: it neither writes nor maps the session's archive.
    server = session.launch_conf(ours, share_classes=False)["spark.driver.extraJavaOptions"]
    assert server == f"-Dderby.system.home={tmp_path}"
