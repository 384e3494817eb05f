-- Events loaded one day per batch by dbt's microbatch; a rerun of a day replaces that day.
{{ config(
    materialized='incremental',
    incremental_strategy='microbatch',
    event_time='event_ts',
    batch_size='day',
    begin='2026-01-01',
    partition_by=['event_date'],
) }}

select event_id, order_id, event_type, event_ts, cast(event_ts as date) as event_date
from {{ ref('raw_events') }}
where true {{ race_slowdown() }}
