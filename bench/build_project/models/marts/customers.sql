select c.customer_id, c.name, c.country, count(o.order_id) as orders,
       coalesce(sum(o.amount), 0) as lifetime_value
from {{ ref('stg_customers') }} c
left join {{ ref('orders') }} o on o.customer_id = c.customer_id
group by c.customer_id, c.name, c.country
