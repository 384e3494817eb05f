-- Each day's batch holds exactly that day's raw events: none missing, none twice.
select r.event_id, count(b.event_id) as copies
from {{ ref('raw_events') }} r
left join {{ ref('order_events_by_batch') }} b on b.event_id = r.event_id
where r.day <= {{ var('day', 1) }}
group by r.event_id
having count(b.event_id) <> 1
