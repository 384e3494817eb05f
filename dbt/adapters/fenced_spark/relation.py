import dataclasses
import hashlib
from dataclasses import dataclass

from dbt.adapters.spark.column import SparkColumn
from dbt.adapters.spark.relation import SparkRelation


def quote_name(name: object) -> str:
    # dbt-spark wraps names in backquotes as they are; one inside must be doubled. dbt's test
    # utilities quote a missing database (None) too, which dbt-spark renders as `None`.
    return "`" + str(name).replace("`", "``") + "`"


@dataclass
class FencedSparkColumn(SparkColumn):
    @classmethod
    def of(cls, column: SparkColumn) -> "FencedSparkColumn":
        return cls(**{f.name: getattr(column, f.name) for f in dataclasses.fields(column)})

    @property
    def quoted(self) -> str:
        return quote_name(self.column)


@dataclass(frozen=True, eq=False, repr=False)
class FencedSparkRelation(SparkRelation):
    def quoted(self, identifier: str) -> str:
        return quote_name(identifier)

    @property
    def fence_name(self) -> str:
        """Always-quoted name for the fence's own statements, whatever the quote policy."""
        return self.quote(schema=True, identifier=True).render()

    def staging_view(self, invocation_id: str, attempt: int = 1) -> "FencedSparkRelation":
        """The temp view holding the pinned model SQL: unique per run, node and attempt."""
        digest = hashlib.sha1(f"{invocation_id}/{self.render()}/{attempt}".encode()).hexdigest()
        return self.incorporate(
            path={"identifier": f"{self.identifier}__fence_{digest[:12]}"}
        ).include(database=False, schema=False)
