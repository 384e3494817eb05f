"""The house rules `make lint` keeps (CONTRIBUTING): no class in dbt/adapters/ over 300 lines,
no module over 500, and no import cycle among the adapter's modules, counting every import
(a function's own, and those only a type checker reads). import-linter's contracts in
pyproject.toml say which way the layers point; this says there is no way back at all.

    python -m tests.house_rules
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "dbt.adapters.fenced_spark"
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 500


def modules() -> dict[str, Path]:
    found = {}
    base = ROOT / "dbt" / "adapters" / "fenced_spark"
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def sizes(found: dict[str, Path]) -> list[str]:
    broken = []
    for name, path in found.items():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            broken.append(f"{name}: {lines} lines, over {MAX_MODULE_LINES}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    broken.append(
                        f"{name}.{node.name}: {size} lines, over {MAX_CLASS_LINES} for a class"
                    )
    return broken


def imports(name: str, path: Path, found: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports, anywhere in it."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1]])
                base = f"{base}.{node.module}" if node.module else base
            # `from package import module` imports the module; `from module import name`, it.
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for target in targets:
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith(PACKAGE + "."):
                out.add(target)
    return out


def cycles(found: dict[str, Path]) -> list[str]:
    graph = {name: imports(name, path, found) for name, path in found.items()}
    # Tarjan's strongly connected components: any of more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    short = len(PACKAGE) + 1
    return ["import cycle: " + ", ".join(n[short:] for n in component) for component in components]


def main() -> int:
    found = modules()
    broken = sizes(found) + cycles(found)
    for line in broken:
        print(line, file=sys.stderr)
    if not broken:
        print(
            f"house rules: {len(found)} modules, no class over {MAX_CLASS_LINES} lines, "
            f"no module over {MAX_MODULE_LINES}, no import cycle"
        )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
