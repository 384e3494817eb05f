{#-- Demo only. scorecard.py races the models through these two hooks; in a normal run both
     render nothing. --#}

{#-- A pre-hook that reads and writes no table: it runs after the fenced run captured vB and
     before it writes. The harness lands the foreign commit from another session when it sees
     this statement; the hook itself commits nothing. --#}
{% macro demo_notebook_race() %}
  {%- if var('race_window', false) -%} select 'race window' {%- endif -%}
{% endmacro %}

{#-- A per-row predicate that is always true and sleeps once: Spark evaluates it inside the
     write's own tasks, so the write takes long enough for a foreign commit to land during it.
     Only the first row to reach it in this JVM sleeps (System.setProperty returns the previous
     value, which reflect() spells 'null' only the first time): sleeping in every task of the write would hold every
     core of a small machine, queue the foreign writer's job behind it, and its commit would
     land after ours. --#}
{% macro race_slowdown() %}
  {%- if var('slow_ms', 0) | int > 0 -%}
    and (reflect('java.lang.System', 'setProperty', 'dbt.race_slowdown.{{ invocation_id }}', 'slept')
           <> 'null'
         or reflect('java.lang.Thread', 'sleep', cast({{ var('slow_ms') }} as bigint)) is not null)
  {%- endif -%}
{% endmacro %}
