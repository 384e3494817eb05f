{#-- insert: the model's rows whose unique_key is not in the table yet; existing rows are never
     touched. A MERGE with no WHEN MATCHED clause, so it keeps Delta's conflict detection during
     the write and the fence checks that it read vB, as for merge. --#}
{% macro fenced_insert_sql(source, target, settings) %}
  {%- set keys = [settings.unique_key] if settings.unique_key is string else settings.unique_key -%}
  {%- set predicates = [] + (settings.incremental_predicates or []) -%}
  {%- for key in keys -%}
    {%- do predicates.append('DBT_INTERNAL_SOURCE.' ~ key ~ ' = DBT_INTERNAL_DEST.' ~ key) -%}
  {%- endfor -%}
  {%- set sql -%}
merge into {{ target }} as DBT_INTERNAL_DEST
    using {{ source }} as DBT_INTERNAL_SOURCE
    on {{ predicates | join('\n    and ') }}
    when not matched then insert *
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
