-- A merge must never duplicate a key.
select order_id, count(*) as copies
from {{ ref('orders') }}
group by order_id
having count(*) > 1
