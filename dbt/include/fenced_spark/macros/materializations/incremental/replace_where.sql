{#-- replace_where: one atomic commit that replaces the rows matching the predicates, in the
     table format's own SQL (formats/); `rows_within` keeps only the rows a microbatch batch
     owns. --#}
{% macro fenced_replace_where_sql(source, target, predicates, rows_within=none) %}
  {{ return(fence_format_replace_sql(fence_table_format(), source, target, predicates, rows_within)) }}
{% endmacro %}
