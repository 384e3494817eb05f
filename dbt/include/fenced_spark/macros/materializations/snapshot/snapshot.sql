{#-- dbt snapshot, fenced: the snapshot table is read at vB, staged in a temp view unique to the
     run and node, new columns are our own strict step, and the MERGE is tagged and verified as
     a merge is. dbt's and dbt-spark's snapshot macros build the SQL; see docs/fence.md. --#}

{% materialization snapshot, adapter='fenced_spark' %}
  {%- set settings = fence_validate_snapshot_config() -%}
  {%- set target_relation = load_relation(this) -%}
  {%- if not settings.fenced or target_relation is none -%}
    {#-- first run (creates the table) or fenced: false: dbt-spark as is --#}
    {{ return(materialization_snapshot_spark()) }}
  {%- endif -%}
  {%- do fence_validate_snapshot_target(target_relation) -%}
  {{ return(fenced_snapshot(target_relation, settings)) }}
{% endmaterialization %}


{% macro fenced_snapshot(target_relation, settings) %}
  {%- set columns = config.get('snapshot_table_column_names') or get_snapshot_table_column_names() -%}

  {#-- 1. vB, before the hooks: their reads of the snapshot table are pinned, their writes to
       it are strict steps of ours --#}
  {%- do adapter.fence_begin(target_relation, 'snapshot', model.unique_id, settings.fence_accept_unverified) -%}
  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}
  {%- do adapter.fence_phase('model') -%}

  {%- set strategy_macro = strategy_dispatch(config.get('strategy')) -%}
  {%- set strategy = strategy_macro(model, 'snapshotted_data', 'source_data', model['config'], true) -%}
  {{ adapter.valid_snapshot_target(target_relation, columns) }}

  {#-- 2. dbt's staging select, its reads of the snapshot table pinned to vB, in a temp view
       unique to this run and node (dbt-spark's is a persistent `<snapshot>__dbt_tmp`, which
       two overlapping runs replace and drop under each other) --#}
  {%- set staging_sql = snapshot_staging_table(strategy, header_query(sql), target_relation) -%}
  {%- set staging = target_relation.staging_view(invocation_id) -%}
  {%- do adapter.fence_stage(target_relation, staging, staging_sql) -%}
  {%- do adapter.expand_target_column_types(from_relation=staging, to_relation=target_relation) -%}

  {#-- 3. new columns commit first, a fenced step, as on_schema_change does for models --#}
  {%- set internal = ['dbt_change_type', 'DBT_CHANGE_TYPE', 'dbt_unique_key', 'DBT_UNIQUE_KEY'] -%}
  {%- set missing_columns = adapter.get_missing_columns(staging, target_relation) | rejectattr('name', 'in', internal) | list -%}
  {%- if missing_columns -%}
    {%- do adapter.fence_phase('schema_change') -%}
    {%- do create_columns(target_relation, missing_columns) -%}
    {%- do adapter.fence_phase('model') -%}
  {%- endif -%}

  {#-- 4-7. pre-check, tagged MERGE, verify (it must read vB), revert on violation --#}
  {%- set insert_cols = [] -%}
  {%- for column in adapter.get_columns_in_relation(staging) | rejectattr('name', 'in', internal) -%}
    {%- do insert_cols.append(adapter.quote(column.name)) -%}
  {%- endfor -%}
  {%- set merge_sql = snapshot_merge_sql(target=target_relation, source=staging, insert_cols=insert_cols) -%}
  {%- set scope = {
      'isolation': settings.fence_isolation, 'any_change': true,
      'why_any': 'a snapshot is refused by any change to the rows of its table'} -%}
  {%- set response = adapter.fence_write(
      merge_sql, target_relation, staging, staging_sql, settings.fence_retries, scope) -%}
  {%- do store_result('main', response=response) -%}

  {%- do apply_grants(target_relation, config.get('grants'), should_revoke(true, full_refresh_mode=False)) -%}
  {%- do persist_docs(target_relation, model) -%}
  {#-- post-hooks run after the verdict; their writes to the snapshot table are tagged --#}
  {%- do adapter.fence_phase('post_hook') -%}
  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}
  {{ return({'relations': [target_relation]}) }}
{% endmacro %}
