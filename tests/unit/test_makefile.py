"""The Makefile's caches: the clone's by default, but a cache the user exported is used, not
replaced by an empty one that downloads everything again."""

import os
import subprocess

from tests.conftest import REPO

CACHES = ("PIP_CACHE_DIR", "DBT_FENCED_SPARK_JARS_CACHE", "UV_CACHE_DIR")
# A target of its own: it prints what the Makefile exports to its recipes, and runs nothing.
PROBE = "cache-probe: ; @echo " + " ".join(f"$${name}" for name in CACHES)


def exported(**caches: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in CACHES and not k.startswith("MAKE")}
    done = subprocess.run(
        ["make", "-s", "-C", REPO, "--eval", PROBE, "cache-probe"],
        env={**env, **caches},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_the_clones_caches_by_default():
    assert exported() == [f"{REPO}/.cache/pip", f"{REPO}/.cache/ivy", f"{REPO}/.cache/uv"]


def test_a_cache_the_user_exported_wins():
    mine = {"PIP_CACHE_DIR": "/warm/pip", "DBT_FENCED_SPARK_JARS_CACHE": "/warm/ivy"}
    assert exported(**mine) == ["/warm/pip", "/warm/ivy", f"{REPO}/.cache/uv"]
