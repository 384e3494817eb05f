-- Orders as of `day`: day 1 creates the table, each later day merges that day's changes.
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='order_id') }}

select order_id, status, amount, day as updated_day
from {{ ref('raw_orders') }}
{% if is_incremental() %}
where day = {{ var('day', 1) }}
{% else %}
where day <= {{ var('day', 1) }}
{% endif %}
{{ race_slowdown() }}
