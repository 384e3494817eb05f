"""`make lint`'s import contracts: import-linter's `lint-imports`, run on the contracts in
pyproject.toml ([tool.importlinter]), with one thing taught to grimp, which builds its graph.

dbt-core and dbt-adapters make `dbt` and `dbt.adapters` pkgutil-style namespace packages (an
`__init__.py` that calls `extend_path`), and grimp takes a package under a regular one for a
submodule, refusing `dbt.adapters.fenced_spark` as "not a top-level module" (grimp issue 167,
pkgutil-style namespaces unsupported). This finder takes this package's own directories, as
it does for a portion of a native namespace package; everything else is grimp's and
import-linter's, TYPE_CHECKING imports counted as imports."""

import importlib.util
import sys

from grimp.adaptors.packagefinder import ImportLibPackageFinder
from grimp.application.config import settings
from grimp.application.ports.filesystem import AbstractFileSystem
from importlinter.cli import lint_imports_command

ROOT = "dbt.adapters.fenced_spark"


class PkgutilNamespaceFinder(ImportLibPackageFinder):
    def determine_package_directories(
        self, package_name: str, file_system: AbstractFileSystem
    ) -> set[str]:
        if package_name != ROOT:
            return super().determine_package_directories(package_name, file_system)
        spec = importlib.util.find_spec(package_name)
        assert spec is not None and spec.submodule_search_locations, package_name
        return set(spec.submodule_search_locations)


if __name__ == "__main__":
    settings.configure(PACKAGE_FINDER=PkgutilNamespaceFinder())
    sys.exit(lint_imports_command())
