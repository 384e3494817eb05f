-- Recomputes the days from `day` on and replaces exactly those rows. fenced_spark does it in one
-- atomic, fenced commit (replace_where); stock dbt-spark overwrites the same day partitions.
{% set since = "date_add(date'2025-12-31', " ~ var('day', 1) ~ ")" %}
{{ config(
    materialized='incremental',
    incremental_strategy='replace_where' if target.type == 'fenced_spark' else 'insert_overwrite',
    incremental_predicates=["event_date >= " ~ since],
    partition_by=['event_date'],
) }}

select event_type, count(*) as events, cast(event_ts as date) as event_date
from {{ ref('order_events') }}
where cast(event_ts as date) >= {{ since }}
{{ race_slowdown() }}
group by event_type, cast(event_ts as date)
