{#-- microbatch: each batch dbt hands us is a fenced replace_where on its event_time window,
     with its own vB; a refused batch fails alone, as dbt reports batches. The materialization
     has already refused to run without a batch window. --#}
{% macro fenced_microbatch_predicates(settings) %}
  {%- set event_time = config.get('event_time') -%}
  {%- set predicates = [] + (settings.incremental_predicates or []) -%}
  {%- do predicates.append(event_time ~ " >= timestamp '" ~ model.batch.event_time_start ~ "'") -%}
  {%- do predicates.append(event_time ~ " < timestamp '" ~ model.batch.event_time_end ~ "'") -%}
  {{ return(predicates) }}
{% endmacro %}
