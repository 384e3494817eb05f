"""Part 1: the same incremental model under stock dbt-spark and fenced_spark, A B A B."""

import statistics
from dataclasses import dataclass, field

from bench.lakehouse import Lakehouse, build_source, rows_label

# fenced strategy -> (model, the stock dbt-spark strategy it is compared with)
STRATEGIES = {
    "merge": ("bench_merge", "merge"),
    "append_if_unchanged": ("bench_append_if_unchanged", "append"),
    "replace_where": ("bench_replace_where", "append"),
}
ORDER = ("stock", "fenced")  # A, B


@dataclass
class Pair:
    batch: int
    stock: float
    fenced: float

    @property
    def ratio(self) -> float:
        return self.fenced / self.stock


@dataclass
class Series:
    rows: int
    strategy: str
    stock_strategy: str
    pairs: list[Pair] = field(default_factory=list)
    warmup: list[Pair] = field(default_factory=list)
    identical: bool = False  # stock's and fenced's tables hold the same rows afterwards
    table_rows: int = 0

    def ratios(self) -> list[float]:
        return [p.ratio for p in self.pairs]

    def summary(self) -> dict[str, float]:
        ratios = self.ratios()
        return {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "stock_median_s": statistics.median(p.stock for p in self.pairs),
            "fenced_median_s": statistics.median(p.fenced for p in self.pairs),
            "difference_s": statistics.median(p.fenced - p.stock for p in self.pairs),
        }


def model_seconds(results: dict, adapter: str) -> float:
    (node,) = results["results"]
    if node["status"] != "success":
        raise RuntimeError(f"{node['unique_id']} on {adapter}: {node['status']}")
    if adapter == "fenced":
        # Proof that the run was fenced, not handed to dbt-spark.
        response = node["adapter_response"]
        if response.get("fence_outcome") != "committed":
            raise RuntimeError(f"{node['unique_id']}: not a fenced commit: {response}")
    return float(node["execution_time"])


def checksum(house: Lakehouse, table: str) -> tuple:
    (row,) = house.sql(
        f"select count(*), sum(cast(hash(id, batch, payload, amount, updated_at) as bigint)) "
        f"from {table}"
    )
    return tuple(row)


def run(house: Lakehouse, sizes: tuple[int, ...], pairs: int, warmup: int) -> list[Series]:
    out = []
    for rows in sizes:
        tag = rows_label(rows)
        build_source(house.sql, f"bench_src_{tag}", rows, warmup + pairs)
        for strategy, (model, stock_strategy) in STRATEGIES.items():
            series = Series(rows, strategy, stock_strategy)
            for adapter in ORDER:
                house.dbt("run", "--full-refresh", "--select", model, target=adapter, tag=tag)
            for batch in range(1, warmup + pairs + 1):
                seconds = {}
                for adapter in ORDER:
                    results = house.run_batch(model, batch, target=adapter, tag=tag)
                    seconds[adapter] = model_seconds(results, adapter)
                pair = Pair(batch, seconds["stock"], seconds["fenced"])
                (series.warmup if batch <= warmup else series.pairs).append(pair)
                print(
                    f"  {rows_label(rows)} {strategy:<20} batch {batch}: stock {pair.stock:6.2f}s"
                    f"  fenced {pair.fenced:6.2f}s  ratio {pair.ratio:.3f}"
                    + ("  (warm-up)" if batch <= warmup else ""),
                    flush=True,
                )
            stock = checksum(house, f"bench_stock_{tag}.{model}")
            fenced = checksum(house, f"bench_fenced_{tag}.{model}")
            series.identical = stock == fenced
            series.table_rows = int(fenced[0])
            out.append(series)
    return out
