{#-- Demo only. scorecard.py races the models through these two hooks; in a normal run both
     render nothing. --#}

{#-- A pre-hook that reads and writes no table: it runs after the fenced run captured vB and
     before it writes. The harness lands the foreign commit from another session when it sees
     this statement; the hook itself commits nothing. --#}
{% macro demo_notebook_race() %}
  {%- if var('race_window', false) -%} select 'race window' {%- endif -%}
{% endmacro %}

{#-- A per-row predicate that is always true and sleeps: Spark evaluates it inside the write's
     own tasks, so the write takes long enough for a foreign commit to land during it. --#}
{% macro race_slowdown() %}
  {%- if var('slow_ms', 0) | int > 0 -%}
    and reflect('java.lang.Thread', 'sleep', cast({{ var('slow_ms') }} as bigint)) is not null
  {%- endif -%}
{% endmacro %}
