-- The watermark append: it reads {{ this }}, so fenced_spark runs it as append_if_unchanged.
{{ config(materialized='incremental', incremental_strategy='append') }}

select event_id, order_id, event_type, cast(event_ts as timestamp) as event_ts
from {{ ref('raw_events') }}
where day <= {{ var('day', 1) }}
{% if is_incremental() %}
  and cast(event_ts as timestamp) > (select max(event_ts) from {{ this }})
{% endif %}
{{ race_slowdown() }}
