-- A watermark taken at compile time (e.g. to prune a big source). On fenced_spark that read is
-- the node's first read of its table: it is pinned to vB, and this `append` is fenced (it runs
-- as append_if_unchanged). On stock dbt-spark it is a plain append.
{{ config(materialized='incremental', incremental_strategy='append') }}
{% set watermark = "timestamp'1970-01-01 00:00:00'" %}
{% if execute and is_incremental() %}
  {% set latest = run_query("select max(event_ts) from " ~ this).columns[0].values()[0] %}
  {% set watermark = "timestamp'" ~ latest ~ "'" %}
{% endif %}

select event_id, order_id, event_type, cast(event_ts as timestamp) as event_ts
from {{ ref('raw_events') }}
where day <= {{ var('day', 1) }}
  and cast(event_ts as timestamp) > {{ watermark }}
{{ race_slowdown() }}
