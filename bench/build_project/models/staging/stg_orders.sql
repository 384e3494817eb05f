select id as order_id, customer_id, status, cast(order_date as date) as order_date
from {{ ref('raw_orders') }}
