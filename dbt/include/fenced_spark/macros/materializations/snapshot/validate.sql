{#-- A snapshot's fence configs, checked before any SQL runs, so bad input writes nothing. --#}

{% macro fence_validate_snapshot_config() %}
  {%- set node_name = fence_node_name() -%}
  {%- set common = fence_validate_common(node_name) -%}
  {%- set file_format = fence_table_format() -%}
  {% set non_delta_msg -%}
    {{ node_name }}: a fenced snapshot needs a Delta table, but `file_format` is '{{ file_format }}'.
    Remove `file_format` (delta is the default) or set it to 'delta'; to run this snapshot unfenced on another format, set `fenced: false`.
  {%- endset %}
  {% set batch_msg -%}
    {{ node_name }}: `fence_batch_id` is for incremental models: a snapshot records each change of its source once, so running it again never applies a change twice.
    Remove `fence_batch_id`.
  {%- endset %}
  {%- if common.fenced and file_format not in fence_formats() -%}
    {% do exceptions.raise_compiler_error(non_delta_msg) %}
  {%- endif -%}
  {%- if config.get('fence_batch_id') is not none -%}
    {% do exceptions.raise_compiler_error(batch_msg) %}
  {%- endif -%}
  {{ return(common) }}
{% endmacro %}


{% macro fence_validate_snapshot_target(target_relation) %}
  {%- set node_name = fence_node_name() -%}
  {% set not_delta_msg -%}
    {{ node_name }}: the snapshot table exists but is not a Delta table, so it cannot be fenced.
    Rebuild it as Delta (dbt never rebuilds a snapshot: drop it, then run `dbt snapshot`), or set `fenced: false`.
  {%- endset %}
  {%- if target_relation.is_view or not fence_target_is_format(fence_table_format(), target_relation) -%}
    {% do exceptions.raise_compiler_error(not_delta_msg) %}
  {%- endif -%}
{% endmacro %}
