{#-- dbt puts a model's sql_header above the statements that build it; dbt-spark's create
     macros leave it out. The adapter runs it one statement at a time (sql_header.py). --#}

{% macro fenced_spark__create_table_as(temporary, relation, compiled_code, language='sql') -%}
  {%- set sql_header = config.get('sql_header', none) if language == 'sql' else none -%}
  {{ sql_header if sql_header is not none }}
  {{ spark__create_table_as(temporary, relation, compiled_code, language) }}
{%- endmacro %}

{% macro fenced_spark__create_view_as(relation, sql) -%}
  {%- set sql_header = config.get('sql_header', none) -%}
  {{ sql_header if sql_header is not none }}
  {{ spark__create_view_as(relation, sql) }}
{%- endmacro %}
