-- An idempotent reload of the day being loaded: the pre-hook deletes it, the model inserts it
-- again. On fenced_spark the DELETE is a step of the run (tagged, strict) and the insert
-- continues from it; on stock dbt-spark both run as written.
{{ config(
    materialized='incremental',
    incremental_strategy='append_if_unchanged' if target.type == 'fenced_spark' else 'append',
    pre_hook="{% if is_incremental() %}delete from {{ this }} where day >= {{ var('day', 1) }}{% endif %}",
) }}

select event_id, order_id, event_type, cast(event_ts as timestamp) as event_ts, day
from {{ ref('raw_events') }}
{% if is_incremental() %}
where day >= {{ var('day', 1) }} and day <= {{ var('day', 1) }}
{% else %}
where day <= {{ var('day', 1) }}
{% endif %}
{{ race_slowdown() }}
