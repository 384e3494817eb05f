{#-- Every order's history, as of `day`: a new row when its status or amount changes. On
     fenced_spark this snapshot is fenced (read at vB, tagged MERGE, verified). --#}
{% snapshot orders_snapshot %}
{{ config(
    target_schema=target.schema,
    unique_key='order_id',
    strategy='check',
    check_cols=['status', 'amount'],
    hard_deletes='invalidate',
) }}
select order_id, status, amount
from (
  select *, row_number() over (partition by order_id order by day desc) as newest
  from {{ ref('raw_orders') }}
  where day <= {{ var('day', 1) }}
)
where newest = 1
{{ race_slowdown() }}
{% endsnapshot %}
