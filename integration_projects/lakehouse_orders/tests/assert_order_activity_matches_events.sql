-- The Python model's merge kept every order's activity equal to its events: nothing missed,
-- nothing counted twice.
with expected as (
  select order_id, count(*) as events, max(event_ts) as last_event_ts
  from {{ ref('order_events') }}
  group by order_id
)
select coalesce(e.order_id, a.order_id) as order_id, e.events, a.events as activity_events
from expected e
full outer join {{ ref('order_activity') }} a on a.order_id = e.order_id
where e.order_id is null or a.order_id is null
   or e.events <> a.events or e.last_event_ts <> a.last_event_ts
