{% materialization incremental, adapter='fenced_spark', supported_languages=['sql', 'python'] -%}
  {%- set settings = fence_validate_config() -%}
  {%- set existing_relation = load_relation(this) -%}
  {%- if existing_relation is none or existing_relation.is_view or should_full_refresh() -%}
    {%- do fence_validate_first_build(settings) -%}
  {%- endif -%}
  {%- if settings.keyless_merge and not settings.reads_self and settings.fence_batch_id is none and existing_relation is not none and not should_full_refresh() -%}
    {{ log("fenced_spark: " ~ this ~ " " ~ fence_appends(settings) ~ " and does not read {{ this }}: a blind append, unfenced as dbt-spark runs it", info=true) }}
  {%- endif -%}
  {%- if existing_relation is not none and existing_relation.is_view and not should_full_refresh() -%}
    {#-- a view holds no data to protect: dbt-spark drops it and builds the table --#}
    {{ log("fenced_spark: " ~ this ~ " exists as a view, which holds no data: replaced by a Delta table as dbt-spark does (unfenced)", info=true) }}
    {{ fence_tag_batch_build(settings) }}
    {{ return(materialization_incremental_spark()) }}
  {%- endif -%}
  {%- if config.get('fenced', true) is false and existing_relation is not none and not should_full_refresh() -%}
    {{ log("fenced_spark: " ~ this ~ " runs unfenced (fenced: false): dbt-spark's " ~ settings.configured_strategy ~ ", with no check of the version it read", info=true) }}
  {%- endif -%}
  {%- if not settings.fenced or existing_relation is none or should_full_refresh() -%}
    {#-- first run, full refresh, fenced: false or an unfenced strategy: dbt-spark as is; a
         batch's first run or full refresh is that batch's write --#}
    {{ fence_tag_batch_build(settings) }}
    {{ return(materialization_incremental_spark()) }}
  {%- endif -%}
  {%- if settings.strategy == 'microbatch' and not model.batch -%}
    {% do exceptions.raise_compiler_error("Model " ~ this ~ ": microbatch ran without a batch window; run it through dbt's microbatch (`event_time`, `batch_size`, `begin`).") %}
  {%- endif -%}
  {%- do fence_validate_target(existing_relation) -%}
  {{ return(fenced_incremental(existing_relation, settings)) }}
{%- endmaterialization %}


{% macro fence_tag_batch_build(settings) %}
  {#-- the table built from one batch (fence_batch_id) is that batch's write: tagged so --#}
  {%- if settings.fenced and settings.fence_batch_id is not none -%}
    {%- do adapter.fence_tag_build(this, settings.strategy, model.unique_id, settings.fence_batch_id) -%}
  {%- endif -%}
{% endmacro %}
