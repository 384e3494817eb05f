{#-- replace_where: one atomic commit that replaces the rows matching the predicates. Delta
     refuses rows outside them (DELTA_REPLACE_WHERE_MISMATCH), so nothing is half-written;
     `rows_within` keeps only the rows a microbatch batch owns. --#}
{% macro fenced_replace_where_sql(source, target, predicates, rows_within=none) %}
  {%- set dest_columns = adapter.get_columns_in_relation(target) -%}
  insert into {{ target }}
  replace where ({{ predicates | join(') and (') }})
  select {{ dest_columns | map(attribute='quoted') | join(', ') }} from {{ source }}
  {%- if rows_within %}
  where ({{ rows_within | join(') and (') }})
  {%- endif %}
{% endmacro %}
