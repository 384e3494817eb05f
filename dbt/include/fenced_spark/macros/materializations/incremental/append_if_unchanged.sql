{#-- append_if_unchanged: dbt-spark's INSERT INTO, committed strictly as vB+1 (the fence sets
     maxCommitAttempts=0 around it). Also what `append` runs when the model reads {{ this }}. --#}
{% macro fenced_append_if_unchanged_sql(source, target, settings) %}
  {{ return(get_insert_into_sql(source, target)) }}
{% endmacro %}
