-- The daily aggregate equals a recomputation from the events, day by day. Analysts may add
-- their own rows with event_type 'correction' (the scorecard's foreign writer does): those
-- are theirs, not the model's.
with recomputed as (
  select cast(event_ts as date) as event_date, event_type, count(*) as events
  from {{ ref('order_events') }}
  group by 1, 2
),
daily as (
  select * from {{ ref('daily_order_events') }} where event_type <> 'correction'
)
select coalesce(r.event_date, d.event_date) as event_date
from recomputed r
full outer join daily d
  on d.event_date = r.event_date and d.event_type = r.event_type
where r.events is null or d.events is null or r.events <> d.events
