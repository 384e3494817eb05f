select o.order_id, o.customer_id, o.status, o.order_date, coalesce(sum(p.amount), 0) as amount
from {{ ref('stg_orders') }} o
left join {{ ref('stg_payments') }} p on p.order_id = o.order_id
group by o.order_id, o.customer_id, o.status, o.order_date
