"""Generated SQL around the target's name: the rewriter pins exactly the table references the
generator put in, keeps every other byte (string literals, comments, hints) and the result
still parses. Seeded `random.Random`, so a failure names the seed that reproduces it."""

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
import sqlglot

from dbt.adapters.fenced_spark.fence import rewriter
from dbt.adapters.fenced_spark.fence.rewriter import pin_self_reads

LOCATION = "/wh/analytics.db/orders"
PIN = " VERSION AS OF 7"
SEEDS = range(300)

TARGET_SPELLINGS = [
    "analytics.orders",
    "ANALYTICS.ORDERS",
    "Analytics.Orders",
    "`analytics`.`orders`",
    "analytics.`Orders`",
    "spark_catalog.analytics.orders",
    "SPARK_CATALOG.`analytics`.orders",
    "IDENTIFIER('analytics.orders')",
    "identifier('`analytics`.`orders`')",
    'IDENTIFIER("spark_catalog.analytics.orders")',
    f"delta.`{LOCATION}`",
    f"delta.`file:{LOCATION}/`",
    f"DELTA.`file://{LOCATION}`",
]
OTHER_TABLES = [
    "src",
    "orders",  # unqualified: a CTE or the current schema's, never guessed
    "analytics.orders2",
    "analytics.ordersx",
    "other.orders",
    "`analytics`.`orders_v2`",
    "other_catalog.analytics.orders",
    "IDENTIFIER('analytics.orders2')",
    "IDENTIFIER('other.orders')",
    f"delta.`{LOCATION}2`",
    "delta.`/wh/other.db/orders`",
]
LITERALS = [
    "'analytics.orders'",
    "'select * from analytics.orders o'",
    "'it''s analytics.orders'",
    "'it\\'s `analytics`.`orders`'",
    '"analytics.orders"',
    "'IDENTIFIER(''analytics.orders'')'",
    f"'delta.`{LOCATION}`'",
    "'-- analytics.orders'",
    "'/*+ BROADCAST(analytics.orders) */'",
    "'analytics.orders VERSION AS OF 7'",
]
COMMENTS = [
    "/* analytics.orders */",
    "/* from analytics.orders o */",
    "/* a /* nested analytics.orders */ b */",
    "-- join analytics.orders\n",
    "-- IDENTIFIER('analytics.orders')\n",
]
HINTS = [
    "/*+ BROADCAST(analytics.orders) */",
    "/*+ BROADCAST(o), MERGE(`analytics`.`orders`) */",
    "/*+ REPARTITION(3, analytics.orders.id) */",
    "/*+ COALESCE(2) */",
    "/*+ broadcast(spark_catalog.analytics.orders) */",
]
COLUMNS = ["*", "x.id", "analytics.orders.id", "`analytics`.`orders`.`id`", "count(*)"]
ALIASES = ["", " o", " AS t1", " as x", " src_alias"]
JOINS = ["join", "left join", "inner join", "left semi join", "full outer join"]


@dataclass
class Sql:
    """SQL text built left to right, knowing where each pin belongs and what must not move."""

    text: str = ""
    ends: list[int] = field(default_factory=list)
    kept: list[tuple[int, int]] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    # Each reference's span and what it must become.
    edits: list[tuple[int, int, str]] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.text += text

    def ref(self, text: str) -> None:
        start = len(self.text)
        self.add(text)
        self.ends.append(len(self.text))
        self.edits.append((start, len(self.text), pinned(text)))
        self.used.add(text)

    def expected(self) -> str:
        text = self.text
        for start, end, replacement in reversed(self.edits):
            text = text[:start] + replacement + text[end:]
        return text

    def keep(self, text: str) -> None:
        self.kept.append((len(self.text), len(self.text) + len(text)))
        self.add(text)
        self.used.add(text)


def pinned(spelling: str) -> str:
    """A reference, pinned: `IDENTIFIER('...')` is written out as the name it holds (Spark 4.1
    cannot resolve the clause with VERSION AS OF), any other spelling keeps its text."""
    if not spelling.upper().startswith("IDENTIFIER("):
        return spelling + PIN
    parts = rewriter.name_parts(spelling[len("IDENTIFIER(") + 1 : -2])
    assert parts is not None
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts) + PIN


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.sql = Sql()

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def sep(self) -> None:
        if self.chance(0.15):
            self.sql.add(" ")
            self.sql.keep(self.rng.choice(COMMENTS))
            self.sql.add("" if self.sql.text.endswith("\n") else " ")
        else:
            self.sql.add(self.rng.choice([" ", " ", " ", "\n", "  ", "\n  "]))

    def query(self, depth: int) -> None:
        if depth < 2 and self.chance(0.2):
            self.sql.add("with w as (")
            self.query(depth + 1)
            self.sql.add(")")
            self.sep()
        self.select(depth)
        while depth < 2 and self.chance(0.2):
            self.sep()
            self.sql.add("union all")
            self.sep()
            self.select(depth)

    def select(self, depth: int) -> None:
        self.sql.add("select")
        if self.chance(0.3):
            self.sql.add(" ")
            self.sql.keep(self.rng.choice(HINTS))
        self.sep()
        for i in range(self.rng.randint(1, 3)):
            if i:
                self.sql.add(", ")
            self.column(depth)
        self.sep()
        self.sql.add("from")
        self.sep()
        self.relation(depth)
        for _ in range(self.rng.randint(0, 2)):
            self.join(depth)
        if self.chance(0.4):
            self.where(depth)

    def column(self, depth: int) -> None:
        roll = self.rng.random()
        if roll < 0.2:
            self.sql.keep(self.rng.choice(LITERALS))
            self.sql.add(self.rng.choice(["", " as label", " label"]))
        elif roll < 0.3 and depth < 2:
            self.sql.add("(select max(id) from ")
            self.table()
            self.sql.add(")")
        else:
            self.sql.add(self.rng.choice(COLUMNS))

    def table(self) -> None:
        if self.chance(0.45):
            self.sql.ref(self.rng.choice(TARGET_SPELLINGS))
        else:
            self.sql.add(self.rng.choice(OTHER_TABLES))

    def relation(self, depth: int) -> None:
        if depth < 2 and self.chance(0.2):
            self.sql.add("(")
            self.query(depth + 1)
            self.sql.add(") sub")
            return
        self.table()
        self.sql.add(self.rng.choice(ALIASES))

    def join(self, depth: int) -> None:
        if self.chance(0.25):
            self.sql.add(",")
            self.sep()
            self.relation(depth)
            return
        self.sep()
        self.sql.add(self.rng.choice(JOINS))
        self.sep()
        self.relation(depth)
        self.sql.add(" on x.id = y.id")

    def where(self, depth: int) -> None:
        self.sep()
        self.sql.add("where")
        self.sep()
        roll = self.rng.random()
        if roll < 0.4 and depth < 2:
            self.sql.add(self.rng.choice(["id in (", "exists (", "x.id > ("]))
            self.select(depth + 1)
            self.sql.add(")")
        elif roll < 0.7:
            self.sql.add("name = ")
            self.sql.keep(self.rng.choice(LITERALS))
        else:
            self.sql.add(self.rng.choice(["analytics.orders.id = 1", "1 = 1"]))


def generate(seed: int) -> Sql:
    generator = Generator(seed)
    generator.query(0)
    return generator.sql


def pin(sql: str) -> str:
    return pin_self_reads(sql, "analytics", "orders", 7, LOCATION)


@contextmanager
def without(path: str) -> Iterator[None]:
    def refuse(*_args: object, **_kwargs: object) -> list[int]:
        raise rewriter.SqlglotError(f"{path} refused")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rewriter, path, refuse)
        yield


def check(case: Sql, pinned_sql: str) -> None:
    # (b) only the references changed, each exactly as it must; so (c) literals, comments and
    # hints are byte-identical
    assert pinned_sql == case.expected()
    for start, end in case.kept:
        assert case.text[start:end] in pinned_sql


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_sql_pins_exactly_the_references(seed: int) -> None:
    case = generate(seed)
    sqlglot.parse(case.text, read="spark")  # the generator writes SQL sqlglot reads
    with without("_reference_ends_tokenized"):  # the parsed path, with no silent fallback
        pinned = pin(case.text)
    check(case, pinned)
    sqlglot.parse(pinned, read="spark")  # (a) still parses
    with without("_reference_ends_parsed"):
        assert pin(case.text) == pinned


def test_the_generator_uses_every_spelling() -> None:
    cases = [generate(seed) for seed in SEEDS]
    used = set().union(*(case.used for case in cases))
    for spelling in TARGET_SPELLINGS + LITERALS + COMMENTS + HINTS:
        assert spelling in used, spelling
    assert sum(len(case.ends) for case in cases) > 3 * len(SEEDS) // 2
    assert sum(not case.ends for case in cases) > len(SEEDS) // 20
