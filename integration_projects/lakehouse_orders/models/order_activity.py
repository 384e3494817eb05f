# Per-order activity, in Python: an incremental merge on order_id whose watermark is read
# from its own table (dbt.this). fenced_spark runs it in the connection's SparkSession and
# pins that read to the version it captured, as it pins a SQL model's reads of its table.
from pyspark.sql import functions as F


def model(dbt, session):
    dbt.config(materialized="incremental", incremental_strategy="merge", unique_key="order_id")
    events = dbt.ref("order_events")
    if dbt.is_incremental:
        since = session.sql(f"select max(last_event_ts) from {dbt.this}").collect()[0][0]
        # Orders with a new event are recomputed from all of their events.
        touched = events.filter(F.col("event_ts") > F.lit(since)).select("order_id").distinct()
        events = events.join(touched, "order_id")
    return events.groupBy("order_id").agg(
        F.count("*").alias("events"),
        F.max("event_ts").alias("last_event_ts"),
        F.max(F.when(F.col("event_type") == "shipped", F.col("event_ts"))).alias("shipped_ts"),
    )
