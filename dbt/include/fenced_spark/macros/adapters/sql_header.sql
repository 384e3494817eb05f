{#-- dbt puts a model's or snapshot's sql_header above the statement that builds it; dbt-spark's
     create macros leave it out. The adapter runs its whole statements one at a time
     (sql_header.py); a fragment that ends it and opens the query (`with x as (...)`, no `;`)
     goes in front of the query inside the statement: Spark has no WITH ... CREATE TABLE.
     A data test's header is dbt's to place (its own flag), so a stored test gets none here. --#}

{% macro header_parts(query, language='sql') -%}
  {#-- [what goes above the statement, the query with the header's fragment in front] --#}
  {%- set sql_header = config.get('sql_header', none) -%}
  {%- set kind = model.get('resource_type') if model is mapping else none -%}
  {%- if sql_header is none or language != 'sql' or kind not in ['model', 'snapshot'] -%}
    {{ return(['', query]) }}
  {%- endif -%}
  {{ return(adapter.sql_header_parts(sql_header, query, model.name)) }}
{%- endmacro %}

{% macro header_query(query, language='sql') -%}
  {{ return(header_parts(query, language)[1]) }}
{%- endmacro %}

{% macro fenced_spark__create_table_as(temporary, relation, compiled_code, language='sql') -%}
  {%- set above, query = header_parts(compiled_code, language) -%}
  {{ above }}
  {{ spark__create_table_as(temporary, relation, query, language) }}
{%- endmacro %}

{% macro fenced_spark__create_view_as(relation, sql) -%}
  {%- set above, query = header_parts(sql) -%}
  {{ above }}
  {{ spark__create_view_as(relation, query) }}
{%- endmacro %}

{% macro fenced_spark__get_columns_in_query(select_sql) -%}
  {#-- dbt's snapshot check strategy asks for the columns of the node's SQL without its header:
       a fragment that opens that SQL goes in front, as everywhere else it is the query. --#}
  {%- set code = model.get('compiled_code') if model is mapping else none -%}
  {%- if code and code in select_sql and header_query(code) not in select_sql -%}
    {%- set select_sql = header_query(select_sql) -%}
  {%- endif -%}
  {{ return(default__get_columns_in_query(select_sql)) }}
{%- endmacro %}
