{#-- merge: dbt-spark's MERGE, unchanged; the fence wraps it (native OCC + the vB check). --#}
{% macro fenced_merge_sql(source, target, settings) %}
  {{ return(get_merge_sql(target, source, settings.unique_key, dest_columns=none,
                          incremental_predicates=settings.incremental_predicates)) }}
{% endmacro %}
