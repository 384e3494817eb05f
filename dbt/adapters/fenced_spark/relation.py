import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

from dbt.adapters.spark.column import SparkColumn
from dbt.adapters.spark.relation import SparkRelation

from dbt.adapters.fenced_spark import config_keys


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
    @classmethod
    def create_from(
        cls, quoting: Any, relation_config: Any, **kwargs: Any
    ) -> "FencedSparkRelation":
        # dbt's parser names every relational node through here once its config is merged:
        # the one place an adapter sees a node's whole config at parse time.
        relation = super().create_from(quoting, relation_config, **kwargs)
        config_keys.check(relation_config, relation.render())
        return relation

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
