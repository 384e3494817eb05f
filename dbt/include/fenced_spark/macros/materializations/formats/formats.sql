{#-- The table formats the fence runs on, and the calls into a format's own SQL. The fence
     steps (incremental/fence.sql, snapshot/snapshot.sql) stay neutral: what differs by
     format is a dispatched macro `fence_<format>_<what>`, each format in a file of its own
     beside this one (delta.sql). dbt reads a dispatched name from the source, so each call
     below names every format's macro in full. --#}

{% macro fence_formats() %}
  {#-- `file_format`s a fenced node may have; another format runs only unfenced. --#}
  {{ return(['delta']) }}
{% endmacro %}


{% macro fence_table_format() %}
  {#-- The node's table format, as dbt-spark reads it: `file_format`, delta by default. --#}
  {{ return(config.get('file_format') or 'delta') }}
{% endmacro %}


{% macro fence_target_is_format(table_format, relation) %}
  {#-- False only for an existing table known to be of another format. --#}
  {%- set by_format = {'delta': adapter.dispatch('fence_delta_target_ok', 'dbt')} -%}
  {{ return(by_format[table_format](relation)) }}
{% endmacro %}


{% macro fence_format_replace_sql(table_format, source, target, predicates, rows_within) %}
  {#-- One commit that replaces the rows matching `predicates` with the source's rows. --#}
  {%- set by_format = {'delta': adapter.dispatch('fence_delta_replace_where_sql', 'dbt')} -%}
  {{ return(by_format[table_format](source, target, predicates, rows_within)) }}
{% endmacro %}
