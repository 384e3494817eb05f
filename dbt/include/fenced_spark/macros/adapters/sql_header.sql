{#-- dbt puts a model's or snapshot's sql_header above the statement that builds it; dbt-spark's
     create macros leave it out. The adapter runs it one statement at a time (sql_header.py).
     A data test's header is dbt's to place (its own flag), so a stored test gets none here. --#}

{% macro header_above(language='sql') -%}
  {%- set sql_header = config.get('sql_header', none) -%}
  {%- set kind = model.get('resource_type') if model is mapping else none -%}
  {%- if sql_header is not none and language == 'sql' and kind in ['model', 'snapshot'] -%}
    {{ sql_header }}
  {%- endif -%}
{%- endmacro %}

{% macro fenced_spark__create_table_as(temporary, relation, compiled_code, language='sql') -%}
  {{ header_above(language) }}
  {{ spark__create_table_as(temporary, relation, compiled_code, language) }}
{%- endmacro %}

{% macro fenced_spark__create_view_as(relation, sql) -%}
  {{ header_above() }}
  {{ spark__create_view_as(relation, sql) }}
{%- endmacro %}
