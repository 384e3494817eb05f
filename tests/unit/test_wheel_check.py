"""`make wheel-check`'s contents check: a wheel or sdist that lacks a file of dbt/ is named."""

import io
import tarfile
import zipfile

from tests import wheel_check


def test_a_missing_macro_is_named(tmp_path):
    files = sorted(wheel_check.package_files())
    macro = next(f for f in files if f.endswith("merge.sql"))
    with zipfile.ZipFile(tmp_path / "p-0.1.0-py3-none-any.whl", "w") as wheel:
        for name in files:
            if name != macro:
                wheel.writestr(name, "")
    with tarfile.open(tmp_path / "p-0.1.0.tar.gz", "w:gz") as sdist:
        for name in files:
            sdist.addfile(tarfile.TarInfo(f"p-0.1.0/{name}"), io.BytesIO(b""))
    assert wheel_check.check_contents(tmp_path) == [f"p-0.1.0-py3-none-any.whl lacks {[macro]}"]
    assert "dbt/include/fenced_spark/dbt_project.yml" in files  # not only Python
