{#-- microbatch: each batch dbt hands us is a fenced replace_where on its event_time window,
     with its own vB; a refused batch fails alone, as dbt reports batches. The materialization
     has already refused to run without a batch window. --#}
{% macro fenced_microbatch_predicates(settings) %}
  {{ return([] + (settings.incremental_predicates or []) + fenced_microbatch_window()) }}
{% endmacro %}

{% macro fenced_microbatch_window() %}
  {#-- The window as dbt filters the batch's inputs (string literals, which Spark casts to the
       column's type): a `timestamp '...'` literal would compare a DATE column at the session
       zone's midnight, a day off east of UTC. It also filters the batch's rows: an upstream
       without event_time gives every batch all of its rows, and a batch writes its own. --#}
  {%- set event_time = config.get('event_time') -%}
  {{ return([
      event_time ~ " >= '" ~ model.batch.event_time_start ~ "'",
      event_time ~ " < '" ~ model.batch.event_time_end ~ "'",
  ]) }}
{% endmacro %}
