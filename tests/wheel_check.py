"""`make wheel-check`: the package as users install it, not the clone's editable install.

python -m tests.wheel_check contents DIST          the wheel and the sdist in DIST hold every file
                                                   of dbt/ (the adapter and its macros)
python -m tests.wheel_check installed VENV PROJECT the wheel, installed alone in VENV: `dbt
                                                   --version` lists fenced_spark and `dbt debug`
                                                   passes in PROJECT, the README's quick start
                                                   (its dbt_project.yml and profiles.yml)
"""

import argparse
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def package_files(root: Path = REPO) -> set[str]:
    """What the package ships: every file under dbt/ but Python's byte code."""
    return {
        path.relative_to(root).as_posix()
        for path in (root / "dbt").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def missing(archive: Path, expected: set[str]) -> set[str]:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            names = set(wheel.namelist())
    else:
        with tarfile.open(archive) as sdist:
            # an sdist's files sit under its <name>-<version>/ folder
            names = {name.partition("/")[2] for name in sdist.getnames()}
    return expected - names


def check_contents(dist: Path) -> list[str]:
    archives = sorted(dist.glob("*.whl")) + sorted(dist.glob("*.tar.gz"))
    if len(archives) != 2:
        return [f"{dist}: expected one wheel and one sdist, found {[a.name for a in archives]}"]
    expected = package_files()
    problems = []
    for archive in archives:
        lacking = missing(archive, expected)
        if lacking:
            problems.append(f"{archive.name} lacks {sorted(lacking)}")
    return problems


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def check_installed(venv: Path, project: Path) -> list[str]:
    from tests.functional.test_docs_examples import EXAMPLES  # the README's own files

    for path in ("dbt_project.yml", "profiles.yml"):
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text(EXAMPLES["quickstart"][path])
    # A user's shell: nothing of the clone importable, no dbt setting but the jars' cache.
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBT_") and k != "PYTHONPATH"}
    if "DBT_FENCED_SPARK_JARS_CACHE" in os.environ:
        env["DBT_FENCED_SPARK_JARS_CACHE"] = os.environ["DBT_FENCED_SPARK_JARS_CACHE"]
    bin_dir = venv.resolve() / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    problems = []
    where = run(
        [str(bin_dir / "python"), "-c", "import dbt.adapters.fenced_spark as m; print(m.__file__)"],
        project,
        env,
    ).strip()
    if not where.startswith(str(venv.resolve())):
        problems.append(f"dbt.adapters.fenced_spark imported from {where}, not from the venv")
    version = run([str(bin_dir / "dbt"), "--version"], project, env)
    plugins = version.partition("Plugins:")[2]
    if "fenced_spark:" not in plugins:
        problems.append(f"`dbt --version` does not list fenced_spark:\n{version}")
    debug = run([str(bin_dir / "dbt"), "debug"], project, env)
    if "All checks passed" not in debug or "adapter type: fenced_spark" not in debug:
        problems.append(f"`dbt debug` did not pass as fenced_spark:\n{debug}")
    listed = [line for line in plugins.splitlines() if line.lstrip().startswith("- ")]
    print("dbt --version, Plugins:", *listed, sep="\n")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("contents").add_argument("dist", type=Path)
    installed = sub.add_parser("installed")
    installed.add_argument("venv", type=Path)
    installed.add_argument("project", type=Path)
    args = parser.parse_args(argv)
    if args.what == "contents":
        problems = check_contents(args.dist)
    else:
        problems = check_installed(args.venv, args.project)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"wheel check ({args.what}): ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
