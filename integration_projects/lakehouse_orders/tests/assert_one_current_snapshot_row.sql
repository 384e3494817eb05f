-- A snapshot has exactly one current row per order, and it matches the order's newest raw row.
with current_rows as (
  select order_id, status, amount from {{ ref('orders_snapshot') }} where dbt_valid_to is null
),
newest as (
  select order_id, status, amount
  from (
    select *, row_number() over (partition by order_id order by day desc) as n
    from {{ ref('raw_orders') }}
    where day <= {{ var('day', 1) }}
  )
  where n = 1
)
select order_id, 'duplicate current row' as problem from current_rows group by order_id having count(*) > 1
union all
select n.order_id, 'current row differs from raw' as problem
from newest n left join current_rows c on n.order_id = c.order_id
where c.order_id is null or c.status <> n.status or c.amount <> n.amount
