{#-- The one model body every benchmark model shares: batch `var('batch')` of the source,
     behind a watermark read of {{ this }} (the read the fence pins to vB). --#}
{% macro bench_batch() %}
select id, batch, payload, amount, updated_at
from {{ source('bench', 'raw') }}
{% if is_incremental() %}
where batch = {{ var('batch') }}
  and batch > (select coalesce(max(batch), -1) from {{ this }})
{% else %}
where batch = 0
{% endif %}
{% endmacro %}
