{#-- What models and snapshots check alike, before any SQL runs. --#}

{% macro fence_node_name() %}
  {#-- How errors name the node: "Model analytics.orders", "Snapshot snapshots.orders_snap". --#}
  {{ return(('Snapshot ' if model.resource_type == 'snapshot' else 'Model ') ~ this.render()) }}
{% endmacro %}


{% macro fence_validate_common(node_name) %}
  {#-- The fence's own configs, shared by models and snapshots. --#}
  {%- set fenced_config = config.get('fenced', true) -%}
  {%- set retries = config.get('fence_retries', 0) -%}
  {%- set accepted = config.get('fence_accept_unverified') -%}
  {%- set isolation = config.get('fence_isolation', 'snapshot') -%}
  {%- set accepted_list = [] if accepted is none else ([accepted] if accepted is not sequence or accepted is string else accepted) -%}

  {% set invalid_fenced_msg -%}
    {{ node_name }}: `fenced` must be true or false, got {{ fenced_config | tojson }}.
  {%- endset %}
  {% set invalid_retries_msg -%}
    {{ node_name }}: `fence_retries` must be a whole number of retries, 0 or more; got {{ retries | tojson }}.
  {%- endset %}
  {% set invalid_isolation_msg -%}
    {{ node_name }}: `fence_isolation` must be 'snapshot' (refused only by a commit that changed what it read or writes, the default) or 'version' (refused by any commit after the version it read), got {{ isolation | tojson }}.
  {%- endset %}
  {% set invalid_accepted_msg -%}
    {{ node_name }}: `fence_accept_unverified` must be a table version (a whole number) or a list of them, got {{ accepted | tojson }}.
  {%- endset %}

  {%- if fenced_config is not boolean -%}
    {% do exceptions.raise_compiler_error(invalid_fenced_msg) %}
  {%- endif -%}
  {%- if retries is not integer or retries < 0 -%}
    {% do exceptions.raise_compiler_error(invalid_retries_msg) %}
  {%- endif -%}
  {%- if accepted_list | reject('integer') | list or accepted_list | select('lt', 0) | list -%}
    {% do exceptions.raise_compiler_error(invalid_accepted_msg) %}
  {%- endif -%}
  {%- if isolation not in ['snapshot', 'version'] -%}
    {% do exceptions.raise_compiler_error(invalid_isolation_msg) %}
  {%- endif -%}
  {{ return({'fenced': fenced_config, 'fence_retries': retries, 'fence_accept_unverified': accepted_list, 'fence_isolation': isolation}) }}
{% endmacro %}

