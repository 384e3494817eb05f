-- The reload holds every raw event up to `day` exactly once.
select r.event_id, count(e.event_id) as copies
from {{ ref('raw_events') }} r
left join {{ ref('order_events_reload') }} e on e.event_id = r.event_id
where r.day <= {{ var('day', 1) }}
group by r.event_id
having count(e.event_id) <> 1
