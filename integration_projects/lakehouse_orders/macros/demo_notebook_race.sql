{#-- Renders nothing unless race_demo.py sets `notebook_sql`: then that statement runs as a
     pre-hook, i.e. after the fenced run captured vB and before it writes. --#}
{% macro demo_notebook_race() %}
  {{- var('notebook_sql', '') -}}
{% endmacro %}
