{#-- The one model body every benchmark model shares: batch `var('batch')` of the source,
     behind a watermark read of {{ this }} (the read the fence pins to vB). `var('work')` rows
     of busy work, always true, lengthen the write statement without changing its rows: a
     write that outlasts the Thrift server's long poll of its status. --#}
{% macro bench_batch() %}
select id, batch, payload, amount, updated_at
from {{ source('bench', 'raw') }}
{% if is_incremental() %}
where batch = {{ var('batch') }}
  and batch > (select coalesce(max(batch), -1) from {{ this }})
{%- if var('work', 0) %}
  and (select sum(id % 7) from range(0, {{ var('work') }}, 1, 2)) >= 0
{%- endif %}
{% else %}
where batch = 0
{% endif %}
{% endmacro %}
