"""The adapter's macros rendered on their own, for unit tests: dbt's `return`,
`adapter.dispatch`, `config` and `exceptions.raise_compiler_error` stood in for as dbt's
MacroGenerator and context do them, so a macro's logic is tested without dbt or Spark."""

import re
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2

MACROS = Path(__file__).parents[2] / "dbt/include/fenced_spark/macros"


class CompilerError(Exception):
    """exceptions.raise_compiler_error's error, with the message as rendered."""


def _raise_compiler_error(message: str) -> None:
    raise CompilerError(message)


class MacroReturn(Exception):
    def __init__(self, value):
        self.value = value


def _return(value):
    raise MacroReturn(value)


def called(macro):
    """A macro called as dbt calls one: its `return` value, else what it rendered."""

    def call(*args):
        try:
            return macro(*args)
        except MacroReturn as returned:
            return returned.value

    return call


class Column:
    def __init__(self, name):
        self.quoted = f"`{name}`"


# One macro's source: dbt stores each macro apart and calls another through its context, so a
# `return` ends only the macro that ran it.
_MACRO = re.compile(r"{%-?\s*macro\s+(\w+)\(.*?{%-?\s*endmacro\s*-?%}", re.S)


class Macros:
    """The macros of `files`, each callable as dbt calls it."""

    def __init__(
        self, files: Iterable[Path], config: dict[str, Any] | None = None, columns=("id", "v")
    ):
        env = jinja2.Environment(extensions=["jinja2.ext.do"])
        adapter = SimpleNamespace(
            dispatch=lambda name, namespace: env.globals[f"fenced_spark__{name}"],
            get_columns_in_relation=lambda relation: [Column(c) for c in columns],
        )
        env.globals.update(
            {
                "return": _return,
                "adapter": adapter,
                "config": SimpleNamespace(get=(config or {}).get),
                "exceptions": SimpleNamespace(raise_compiler_error=_raise_compiler_error),
            }
        )
        for path in files:
            for found in _MACRO.finditer(path.read_text()):
                module = env.from_string(found.group(0)).make_module()
                env.globals[found.group(1)] = called(getattr(module, found.group(1)))
        self.env = env

    def __getattr__(self, name):
        return self.env.globals[name]
