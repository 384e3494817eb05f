-- Every order carries its latest raw state up to `day`, and every raw order is present.
with latest as (
  select order_id, status, amount,
         row_number() over (partition by order_id order by day desc) as rn
  from {{ ref('raw_orders') }}
  where day <= {{ var('day', 1) }}
)
select l.order_id
from latest l
left join {{ ref('orders') }} o on o.order_id = l.order_id
where l.rn = 1
  and (o.order_id is null or o.status <> l.status or o.amount <> l.amount)
