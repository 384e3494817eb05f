{#-- dbt-spark's returns DESCRIBE EXTENDED's raw rows, which have no `.name`: dbt's snapshot
     staging (`hard_deletes: new_record`) then finds no snapshot column and fills a deleted
     record's row with nulls (dbt-labs/dbt-adapters#1401). The adapter's parsed columns. --#}
{% macro fenced_spark__get_columns_in_relation(relation) -%}
  {{ return(adapter.get_columns_in_relation(relation)) }}
{%- endmacro %}
