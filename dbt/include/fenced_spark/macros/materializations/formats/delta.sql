{#-- Delta's SQL for the fence (formats.sql dispatches to these by name). --#}

{% macro fenced_spark__fence_delta_target_ok(relation) %}
  {#-- is_delta is none for a table this invocation created (an earlier microbatch batch):
       we created it, as delta. Only a known non-Delta table is refused. --#}
  {{ return(relation.is_delta != false) }}
{% endmacro %}


{% macro fenced_spark__fence_delta_replace_where_sql(source, target, predicates, rows_within) %}
  {#-- INSERT ... REPLACE WHERE: Delta refuses rows outside the predicates
       (DELTA_REPLACE_WHERE_MISMATCH), so nothing is half-written. --#}
  {%- set dest_columns = adapter.get_columns_in_relation(target) -%}
  insert into {{ target }}
  replace where ({{ predicates | join(') and (') }})
  select {{ dest_columns | map(attribute='quoted') | join(', ') }} from {{ source }}
  {%- if rows_within %}
  where ({{ rows_within | join(') and (') }})
  {%- endif %}
{% endmacro %}
