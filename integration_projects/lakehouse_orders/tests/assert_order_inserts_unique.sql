-- `insert` loads each event once, however often its batch is delivered.
select event_id, count(*) as copies
from {{ ref('order_inserts') }}
group by event_id
having count(*) > 1
