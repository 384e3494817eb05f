-- Recomputes the days from `day` on and replaces exactly those rows, in one atomic commit.
{% set since = "date_add(date'2025-12-31', " ~ var('day', 1) ~ ")" %}
{{ config(
    materialized='incremental',
    incremental_strategy='replace_where',
    incremental_predicates=["event_date >= " ~ since],
) }}

select cast(event_ts as date) as event_date, event_type, count(*) as events
from {{ ref('order_events') }}
where cast(event_ts as date) >= {{ since }}
group by 1, 2
