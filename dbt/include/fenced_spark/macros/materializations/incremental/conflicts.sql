{#-- What the write touches, for the fence's conflict analysis (docs/fence.md, "What conflicts
     with what"); what the model read of {{ this }} the adapter finds in its pinned SQL. --#}
{% macro fence_conflict_scope(settings) %}
  {%- set scope = {'isolation': settings.fence_isolation} -%}
  {%- if settings.strategy in ['merge', 'insert'] -%}
    {%- do scope.update({'keys': [settings.unique_key] if settings.unique_key is string else settings.unique_key,
                         'key_predicates': settings.incremental_predicates or []}) -%}
  {%- elif settings.configured_strategy in ['append_if_unchanged', 'safeappend'] -%}
    {#-- the name's promise: the table's rows are as the model read them --#}
    {%- do scope.update({'any_change': true, 'why_any': 'append_if_unchanged is refused by any change to the rows of its table'}) -%}
  {%- elif settings.strategy == 'replace_where' -%}
    {%- do scope.update({'replaces': settings.incremental_predicates}) -%}
  {%- elif settings.strategy == 'microbatch' -%}
    {%- do scope.update({'replaces': fenced_microbatch_predicates(settings)}) -%}
  {%- endif -%}
  {#-- an append that reads {{ this }} (or a merge without a key) adds rows and removes none:
       only what it read can conflict --#}
  {{ return(scope) }}
{% endmacro %}
