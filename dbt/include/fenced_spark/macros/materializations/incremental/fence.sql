{#-- The fence around one incremental run; see docs/fence.md for the steps and why. --#}

{% macro fence_write_sql(strategy, source, target, settings) %}
  {{ return(adapter.dispatch('fence_write_sql', 'dbt')(strategy, source, target, settings)) }}
{% endmacro %}

{% macro fenced_spark__fence_write_sql(strategy, source, target, settings) %}
  {%- if strategy == 'merge' -%}
    {{ return(fenced_merge_sql(source, target, settings)) }}
  {%- elif strategy == 'append' -%}
    {{ return(fenced_append_sql(source, target, settings)) }}
  {%- elif strategy == 'insert' -%}
    {{ return(fenced_insert_sql(source, target, settings)) }}
  {%- elif strategy == 'append_if_unchanged' -%}
    {{ return(fenced_append_if_unchanged_sql(source, target, settings)) }}
  {%- elif strategy == 'replace_where' -%}
    {{ return(fenced_replace_where_sql(source, target, settings.incremental_predicates)) }}
  {%- elif strategy == 'microbatch' -%}
    {{ return(fenced_replace_where_sql(source, target, fenced_microbatch_predicates(settings), fenced_microbatch_window())) }}
  {%- endif -%}
  {% do exceptions.raise_compiler_error('No fenced SQL for strategy ' ~ strategy) %}
{% endmacro %}


{% macro fence_schema_changes(on_schema_change, staging, existing_relation) %}
  {#-- ALTERs commit to the target before the write: each is a strict, tagged step of ours,
       and the write then expects the version they produced. 'fail' and 'ignore' commit
       nothing. --#}
  {%- if on_schema_change in ['ignore', 'fail'] -%}
    {%- do process_schema_changes(on_schema_change, staging, existing_relation) -%}
    {{ return(none) }}
  {%- endif -%}
  {%- set changes = check_for_schema_changes(staging, existing_relation) -%}
  {%- if changes['schema_changed'] -%}
    {%- do adapter.fence_phase('schema_change') -%}
    {%- do sync_column_schemas(on_schema_change, existing_relation, changes) -%}
    {%- do adapter.fence_phase('model') -%}
  {%- endif -%}
{% endmacro %}


{% macro fence_appends(settings) %}
  {{ return('merges without unique_key (inserts every row, as in dbt-spark)' if settings.keyless_merge else 'appends') }}
{% endmacro %}


{% macro fenced_incremental(existing_relation, settings) %}
  {%- if settings.reads_self -%}
    {%- set how = 'read {{ this }} at compile time' if adapter.fence_read_at_compile_time() else 'reads {{ this }}' -%}
    {%- if settings.hooks_read_self and not adapter.fence_read_at_compile_time() -%}
      {%- set how = 'reads {{ this }} in a pre-hook' -%}
    {%- endif -%}
    {%- if model.language == 'python' -%}
      {%- set how = 'is a Python model (counted as reading its whole table)' -%}
    {%- endif -%}
    {{ log("fenced_spark: " ~ this ~ " " ~ fence_appends(settings) ~ " and " ~ how ~ ": running as append_if_unchanged (fenced)", info=true) }}
  {%- endif -%}
  {#-- 1. vB: captured now, unless the node read its target earlier (at compile time); an
       earlier run of this node that never reached its verdict refuses the run here. From
       here to the write, pre-hooks' reads of the target are pinned and their writes to it
       are strict steps of ours. --#}
  {%- set applied = adapter.fence_begin(this, settings.strategy, model.unique_id, settings.fence_accept_unverified, settings.fence_batch_id) -%}
  {%- if applied is not none -%}
    {#-- fence_batch_id: this batch is in the table already; no hook, no write --#}
    {%- do store_result('main', response=applied) -%}
    {{ return({'relations': [this]}) }}
  {%- endif -%}
  {{ run_hooks(pre_hooks) }}

  {#-- 2. pin every self-read to vB. Nothing needs the model's columns before the write
       (on_schema_change 'ignore'): the pinned SQL is the write's own source, a subquery, and
       no view is made, described or dropped (a unique_key it lacks is named when the write
       or the conflict analysis's join fails). Otherwise it is staged in a run-unique temp view. --#}
  {%- set staging = this.staging_view(invocation_id) -%}
  {%- set inline = model.language == 'sql' and settings.on_schema_change == 'ignore' -%}
  {#-- the model's query: a sql_header's fragment that opens it in front, its reads pinned too --#}
  {%- set query = header_query(compiled_code, model.language) -%}
  {%- set staged_sql = adapter.fence_stage(this, staging, query, model.language, inline) -%}
  {%- set source = staged_sql if inline else staging -%}
  {%- if not inline and settings.strategy in ['merge', 'insert'] and settings.unique_key -%}
    {%- do fence_validate_unique_key(staging, settings.unique_key) -%}
  {%- endif -%}

  {#-- 3. schema changes commit first, fenced --#}
  {%- if not inline -%}
    {%- do fence_schema_changes(settings.on_schema_change, staging, existing_relation) -%}
  {%- endif -%}

  {#-- 4-7. pre-check, tagged write, verify, revert on violation --#}
  {%- set write_sql = fence_write_sql(settings.strategy, source, this, settings) -%}
  {#-- target/run: what ran, as dbt's statement('main') writes it for stock's models --#}
  {%- do write(fence_run_file(none if inline else staged_sql, write_sql, settings)) -%}
  {%- set response = adapter.fence_write(
      write_sql, this, staging, query, settings.fence_retries,
      fence_conflict_scope(settings)) -%}
  {%- do store_result('main', response=response) -%}

  {%- set should_revoke = should_revoke(existing_relation, full_refresh_mode=False) -%}
  {%- do apply_grants(this, config.get('grants'), should_revoke) -%}
  {%- do persist_docs(this, model) -%}
  {#-- post-hooks run after the verdict; their writes to the target are tagged, not strict --#}
  {%- do adapter.fence_phase('post_hook') -%}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [this]}) }}
{% endmacro %}


{% macro fence_run_file(staged_sql, write_sql, settings) %}
  {%- set header -%}
-- dbt-fenced-spark: fenced {{ settings.strategy }} into {{ this }} ({{ model.unique_id }}).
-- The fence read the table's Delta log before this (vB, and a pre-check unless vB was read
-- just before the write), looked for an earlier run's unverified commit, and reads it again
-- after the write (verification); its statements are in logs/dbt.log. The model SQL below
-- reads {{ this }} pinned to the version it captured. See docs/fence.md.
  {%- endset -%}
  {%- if model.language == 'python' -%}
    {#-- target/run/<model>.py: the model's code, then what ran, as comments --#}
    {%- set ran = (header ~ "\n" ~ write_sql | trim).split("\n") -%}
    {{ return(compiled_code | trim ~ "\n\n" ~ staged_sql ~ "\n# " ~ ran | join("\n# ") ~ "\n") }}
  {%- endif -%}
  {%- if staged_sql is none -%}
    {{ return(header ~ "\n" ~ write_sql | trim ~ "\n") }}
  {%- endif -%}
  {{ return(header ~ "\n" ~ staged_sql | trim ~ ";\n\n" ~ write_sql | trim ~ "\n") }}
{% endmacro %}
