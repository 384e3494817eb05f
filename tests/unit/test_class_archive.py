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


def spark_home(root, jar_bytes: bytes = b"jar") -> str:
    """A pyspark as the launcher finds it: bin/spark-submit and a jars folder."""
    os.makedirs(root / "bin", exist_ok=True)
    (root / "bin" / "spark-submit").write_text("")
    os.makedirs(root / "jars", exist_ok=True)
    (root / "jars" / "spark-core.jar").write_bytes(jar_bytes)
    return str(root)


def test_each_venvs_pyspark_gets_its_own_archive(tmp_path, monkeypatch, cache):
    # The JVM refuses an archive written with another class path: a second venv's pyspark,
    # its jars in another folder, must not find the first's archive under its key.
    first, second = spark_home(tmp_path / "venv1"), spark_home(tmp_path / "venv2")
    monkeypatch.setenv("SPARK_HOME", first)
    key = class_archive.archive_key(PACKAGE)
    assert class_archive.archive_key(PACKAGE) == key
    assert class_archive.archive_key(PACKAGE, {"spark.driver.memory": "2g"}) != key
    monkeypatch.setenv("SPARK_HOME", second)
    assert class_archive.archive_key(PACKAGE) != key
    monkeypatch.setenv("SPARK_HOME", first)
    os.utime(os.path.join(first, "jars", "spark-core.jar"), (1, 1))  # the same path, rewritten
    assert class_archive.archive_key(PACKAGE) != key


def test_the_class_path_keys_the_archive_the_project_folder_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", spark_home(tmp_path / "venv"))
    jar = tmp_path / "driver.jar"
    jar.write_bytes(b"jdbc")

    def archive(folder: str, **conf: str) -> str:
        creds = FencedSparkCredentials(
            schema="s",
            folder=str(tmp_path / folder),
            jars_cache=str(tmp_path / "ivy"),
            server_side_parameters=conf,
        )
        options = session.launch_conf(creds)["spark.driver.extraJavaOptions"]
        return os.path.basename(part_of(options.split(" ", 1)[1])).split(".")[0]

    # Two projects on one cache share one archive: -Dderby.system.home is no part of it.
    assert archive("a") == archive("b")
    assert archive("a", **{"spark.driver.extraClassPath": str(jar)}) != archive("a")
    assert archive("a", **{"spark.driver.memory": "48g"}) != archive("a")


def test_an_archive_the_jvm_refused_is_removed_for_one_of_its_own(tmp_path, monkeypatch):
    final = tmp_path / "k.jsa"
    final.write_bytes(class_archive.MAGIC)
    log = tmp_path / "spark.log"
    log.write_text(f"[warning][cds,dynamic] Unable to use shared archive: {final} (earlier)\n")
    offset = log.stat().st_size
    options = f"-Dderby.system.home=/x -XX:SharedArchiveFile={final}"
    with open(log, "a") as out:
        out.write("WARNING: Using incubator modules: jdk.incubator.vector\n")
    class_archive.check_mapped(options, str(log), offset)
    assert final.exists()
    with open(log, "a") as out:
        out.write(
            "[1.543s][warning][cds,dynamic] Unable to use shared archive. "
            f"The top archive failed to load: {final}\n"
        )
    said: list[str] = []
    monkeypatch.setattr(class_archive.logger, "debug", said.append)
    class_archive.check_mapped(options, str(log), offset)
    assert not final.exists()
    assert said == [
        f"The JVM did not map {final} (Unable to use shared archive. The top archive failed to "
        f"load: {final}); removed: the next start writes one"
    ]
