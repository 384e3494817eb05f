{#-- append with fence_batch_id and no read of {{ this }}: dbt-spark's INSERT INTO. It read
     nothing of its target, so only another run's write of its batch conflicts with it. --#}
{% macro fenced_append_sql(source, target, settings) %}
  {{ return(get_insert_into_sql(source, target)) }}
{% endmacro %}
