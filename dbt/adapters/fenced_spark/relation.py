import hashlib
from dataclasses import dataclass

from dbt.adapters.spark.relation import SparkRelation


@dataclass(frozen=True, eq=False, repr=False)
class FencedSparkRelation(SparkRelation):
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
