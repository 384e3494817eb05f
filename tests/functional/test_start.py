"""A start of the embedded session in a process of its own: what the user is told about is
all of it. The first use of a new folder's metastore boots Derby and creates its schema
(seconds); the start does that, so it is inside "Spark + Delta started" (and overlaps dbt's
parse) rather than a silence before the first node."""

import subprocess
import sys

STARTER = """
import os, sys
from dbt.adapters.fenced_spark import session
from dbt.adapters.fenced_spark.credentials import FencedSparkCredentials
folder = sys.argv[1]
spark = session.root_session(FencedSparkCredentials(schema="s", folder=folder))
# Nothing has asked the catalog yet: only the start itself can have opened the metastore.
print("metastore", os.path.isdir(os.path.join(folder, "metastore_db")), flush=True)
spark.stop()
"""


def test_the_start_opens_a_new_folders_metastore(tmp_path):
    folder = tmp_path / "lake"
    done = subprocess.run(
        [sys.executable, "-c", STARTER, str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "metastore True" in done.stdout, done.stdout + done.stderr[-3000:]
