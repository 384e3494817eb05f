{#-- dbt-databricks' incremental configs that this adapter does not run yet. dbt-spark would
     ignore each one silently (a sync merge that deletes nothing, runs green), so each is
     refused before any SQL, naming what would have happened instead. --#}

{% macro fence_databricks_unsupported() %}
  {#-- key: what dbt-spark's run does instead of what the key asks --#}
  {{ return({
      'matched_condition': 'its MERGE would update every matched row',
      'not_matched_condition': 'its MERGE would insert every source row without a match',
      'not_matched_by_source_action': 'its MERGE would leave every target row the source lacks as it is: a sync would delete nothing',
      'not_matched_by_source_condition': 'its MERGE would leave every target row the source lacks as it is: a sync would delete nothing',
      'merge_with_schema_evolution': "its MERGE would not evolve the table's schema",
      'skip_matched_step': 'its MERGE would still update the matched rows',
      'skip_not_matched_step': 'its MERGE would still insert the source rows without a match',
      'source_alias': 'its MERGE would name the source DBT_INTERNAL_SOURCE, and a condition naming the alias would fail',
      'target_alias': 'its MERGE would name the target DBT_INTERNAL_DEST, and a condition naming the alias would fail',
      'liquid_clustered_by': 'the table would not be clustered',
      'incremental_apply_config_changes': "a change of the table's configs would not be applied to it",
  }) }}
{% endmacro %}


{% macro fence_validate_databricks(model_name, raw_strategy) %}
  {#-- false is dbt-databricks' own default for its flags, and what runs here anyway --#}
  {%- set found = namespace(key=none) -%}
  {%- for key in fence_databricks_unsupported() if found.key is none -%}
    {%- set value = config.get(key) -%}
    {%- if value is not none and value is not false and not (value is string and value | lower | trim == 'false') -%}
      {%- set found.key = key -%}
    {%- endif -%}
  {%- endfor -%}
  {% set unsupported_msg -%}
    {{ model_name }}: `{{ found.key }}` (a dbt-databricks config) is not supported yet: dbt-spark would ignore it, and {{ fence_databricks_unsupported()[found.key] }}.
    Remove `{{ found.key }}`, or build this model with dbt-databricks.
  {%- endset %}
  {% set delete_insert_msg -%}
    {{ model_name }}: the delete+insert strategy (dbt-databricks') is not supported yet.
    Where `unique_key` is unique in the table and in each batch, the merge strategy with that key leaves the same rows, in one commit: it updates the rows with the batch's keys instead of deleting them and inserting the batch.
  {%- endset %}
  {%- if raw_strategy == 'delete+insert' -%}
    {% do exceptions.raise_compiler_error(delete_insert_msg) %}
  {%- endif -%}
  {%- if found.key is not none -%}
    {% do exceptions.raise_compiler_error(unsupported_msg) %}
  {%- endif -%}
{% endmacro %}
