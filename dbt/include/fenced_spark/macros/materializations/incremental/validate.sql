{#-- Validate every fence-relevant config before any SQL runs, so bad input writes nothing. --#}

{% macro fence_strategies() %}
  {#-- strategy -> fenced by this adapter; the others run as dbt-spark runs them --#}
  {{ return({'merge': true, 'append': false, 'insert_overwrite': false, 'microbatch': false}) }}
{% endmacro %}


{% macro fence_validate_config() %}
  {%- set model_name = this.render() -%}
  {%- set strategies = fence_strategies() -%}
  {%- set raw_strategy = config.get('incremental_strategy') or 'append' -%}
  {%- set file_format = config.get('file_format') or 'delta' -%}
  {%- set fenced_config = config.get('fenced', true) -%}
  {%- set unique_key = config.get('unique_key') -%}
  {%- set predicates = config.get('predicates') or config.get('incremental_predicates') -%}

  {% set invalid_strategy_msg -%}
    Model {{ model_name }}: invalid `incremental_strategy` {{ raw_strategy | tojson }}.
    Expected one of: {{ strategies.keys() | join(', ') }}
  {%- endset %}
  {% set invalid_fenced_msg -%}
    Model {{ model_name }}: `fenced` must be true or false, got {{ fenced_config | tojson }}.
  {%- endset %}
  {% set non_delta_msg -%}
    Model {{ model_name }}: strategy '{{ raw_strategy }}' is fenced and needs a Delta table, but `file_format` is '{{ file_format }}'.
    Remove `file_format` (delta is the default) or set it to 'delta'; to run this model unfenced on another format, set `fenced: false`.
  {%- endset %}
  {% set missing_key_msg -%}
    Model {{ model_name }}: the merge strategy needs `unique_key` (a column name or a list of column names) to match source rows to target rows.
  {%- endset %}
  {% set invalid_predicates_msg -%}
    Model {{ model_name }}: `incremental_predicates` must be a SQL string or a list of SQL strings, got {{ predicates | tojson }}.
  {%- endset %}

  {%- if raw_strategy not in strategies -%}
    {% do exceptions.raise_compiler_error(invalid_strategy_msg) %}
  {%- endif -%}
  {%- if fenced_config is not boolean -%}
    {% do exceptions.raise_compiler_error(invalid_fenced_msg) %}
  {%- endif -%}
  {%- set fenced = fenced_config and strategies[raw_strategy] -%}
  {%- if fenced and file_format != 'delta' -%}
    {% do exceptions.raise_compiler_error(non_delta_msg) %}
  {%- endif -%}
  {%- if raw_strategy == 'merge' and not unique_key -%}
    {% do exceptions.raise_compiler_error(missing_key_msg) %}
  {%- endif -%}

  {%- if predicates is none -%}
    {%- set predicate_list = none -%}
  {%- elif predicates is string and predicates | trim -%}
    {%- set predicate_list = [predicates] -%}
  {%- elif predicates is sequence and predicates is not mapping and predicates is not string
        and predicates | length > 0
        and predicates | select('string') | reject('equalto', '') | list | length == predicates | length -%}
    {%- set predicate_list = predicates -%}
  {%- else -%}
    {% do exceptions.raise_compiler_error(invalid_predicates_msg) %}
  {%- endif -%}

  {{ return({
      'strategy': raw_strategy,
      'fenced': fenced,
      'unique_key': unique_key,
      'incremental_predicates': predicate_list,
      'on_schema_change': incremental_validate_on_schema_change(config.get('on_schema_change'), default='ignore'),
  }) }}
{% endmacro %}


{% macro fence_validate_target(existing_relation) %}
  {%- set model_name = this.render() -%}
  {% set view_msg -%}
    Model {{ model_name }}: the target exists as a view, not a Delta table, so it cannot be fenced.
    Run once with --full-refresh to replace it with a table, or set `fenced: false`.
  {%- endset %}
  {% set non_delta_msg -%}
    Model {{ model_name }}: the target exists but is not a Delta table, so it cannot be fenced (`file_format` is delta).
    Run once with --full-refresh to rebuild it as Delta, or set `fenced: false`.
  {%- endset %}
  {%- if existing_relation.is_view -%}
    {% do exceptions.raise_compiler_error(view_msg) %}
  {%- elif not existing_relation.is_delta -%}
    {% do exceptions.raise_compiler_error(non_delta_msg) %}
  {%- endif -%}
{% endmacro %}
