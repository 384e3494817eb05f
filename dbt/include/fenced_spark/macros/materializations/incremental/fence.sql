{#-- The fence around one incremental run; see docs/fence.md for the steps and why. --#}

{% macro fence_write_sql(strategy, source, target, settings) %}
  {{ return(adapter.dispatch('fence_write_sql', 'dbt')(strategy, source, target, settings)) }}
{% endmacro %}

{% macro fenced_spark__fence_write_sql(strategy, source, target, settings) %}
  {%- if strategy == 'merge' -%}
    {{ return(fenced_merge_sql(source, target, settings)) }}
  {%- elif strategy == 'append_if_unchanged' -%}
    {{ return(fenced_append_if_unchanged_sql(source, target, settings)) }}
  {%- elif strategy == 'replace_where' -%}
    {{ return(fenced_replace_where_sql(source, target, settings.incremental_predicates)) }}
  {%- elif strategy == 'microbatch' -%}
    {{ return(fenced_replace_where_sql(source, target, fenced_microbatch_predicates(settings))) }}
  {%- endif -%}
  {% do exceptions.raise_compiler_error('No fenced SQL for strategy ' ~ strategy) %}
{% endmacro %}


{% macro fence_schema_changes(fence, on_schema_change, staging, existing_relation) %}
  {#-- ALTERs commit to the target before the write: strict, tagged, and the write then
       expects the version they produced. 'fail' and 'ignore' commit nothing. --#}
  {%- if on_schema_change in ['ignore', 'fail'] -%}
    {%- do process_schema_changes(on_schema_change, staging, existing_relation) -%}
    {{ return(fence) }}
  {%- endif -%}
  {%- set changes = check_for_schema_changes(staging, existing_relation) -%}
  {%- if not changes['schema_changed'] -%}
    {{ return(fence) }}
  {%- endif -%}
  {%- do adapter.fence_schema_change_begin(fence) -%}
  {%- do sync_column_schemas(on_schema_change, existing_relation, changes) -%}
  {{ return(adapter.fence_schema_change_end()) }}
{% endmacro %}


{% macro fenced_incremental(existing_relation, settings) %}
  {%- if settings.reads_self -%}
    {{ log("fenced_spark: " ~ this ~ " appends and reads {{ this }}: running as append_if_unchanged (fenced)", info=true) }}
  {%- endif -%}
  {#-- 1. capture vB, before pre-hooks and before any model SQL is evaluated --#}
  {%- set read_version = adapter.fence_capture(this) -%}
  {%- set fence = {
      'table': this.fence_name, 'display': this.render(), 'strategy': settings.strategy,
      'read_version': read_version, 'expected_version': read_version,
      'invocation_id': invocation_id, 'node': model.unique_id, 'attempt': 1,
  } -%}
  {{ run_hooks(pre_hooks) }}

  {#-- 2. pin every self-read to vB and stage the model SQL in a run-unique temp view --#}
  {%- set staging = this.staging_view(invocation_id) -%}
  {%- do adapter.fence_stage(this, staging, compiled_code, fence) -%}
  {%- if settings.strategy == 'merge' -%}
    {%- do fence_validate_unique_key(staging, settings.unique_key) -%}
  {%- endif -%}

  {#-- 3. schema changes commit first, fenced --#}
  {%- set fence = fence_schema_changes(fence, settings.on_schema_change, staging, existing_relation) -%}

  {#-- 4-7. pre-check, tagged write, verify, revert on violation --#}
  {%- set write_sql = fence_write_sql(settings.strategy, staging, this, settings) -%}
  {%- set response = adapter.fence_write(
      write_sql, fence, this, staging, compiled_code, settings.fence_retries) -%}
  {%- do store_result('main', response=response) -%}

  {%- set should_revoke = should_revoke(existing_relation, full_refresh_mode=False) -%}
  {%- do apply_grants(this, config.get('grants'), should_revoke) -%}
  {%- do persist_docs(this, model) -%}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [this]}) }}
{% endmacro %}
