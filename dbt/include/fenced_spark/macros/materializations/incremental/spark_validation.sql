{#-- dbt-spark's materialization also runs our first runs and full refreshes. By then
     fence_validate_config has checked the strategy and format against this adapter's table,
     which includes names dbt-spark's own list does not know (append_if_unchanged, ...). --#}
{% macro dbt_spark_validate_get_incremental_strategy(raw_strategy, file_format) %}
  {{ return(raw_strategy) }}
{% endmacro %}
