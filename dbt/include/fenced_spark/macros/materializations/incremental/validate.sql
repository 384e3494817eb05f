{#-- Validate every fence-relevant config before any SQL runs, so bad input writes nothing. --#}

{% macro fence_strategies() %}
  {#-- How each strategy runs: 'fenced'; 'auto' = fenced when the model reads {{ this }};
       'unfenced' = as dbt-spark runs it, by design. --#}
  {{ return({
      'merge': 'fenced',
      'insert': 'fenced',
      'append_if_unchanged': 'fenced',
      'replace_where': 'fenced',
      'microbatch': 'fenced',
      'append': 'auto',
      'insert_overwrite': 'unfenced',
  }) }}
{% endmacro %}


{% macro fence_validate_config() %}
  {%- set model_name = fence_node_name() -%}
  {%- set strategies = fence_strategies() -%}
  {%- set raw_strategy = config.get('incremental_strategy') or 'append' -%}
  {%- set strategy = 'append_if_unchanged' if raw_strategy == 'safeappend' else raw_strategy -%}
  {%- set file_format = fence_table_format() -%}
  {%- set unique_key = config.get('unique_key') -%}
  {%- set predicates = config.get('predicates') or config.get('incremental_predicates') -%}
  {%- set batch_id = config.get('fence_batch_id') -%}

  {% set invalid_strategy_msg -%}
    {{ model_name }}: invalid `incremental_strategy` {{ raw_strategy | tojson }}.
    Expected one of: {{ strategies.keys() | join(', ') }} (and 'safeappend', a deprecated alias of append_if_unchanged).
  {%- endset %}
  {% set safeappend_msg -%}
    {{ model_name }}: `incremental_strategy: safeappend` is deprecated; use 'append_if_unchanged', which does the same.
  {%- endset %}
  {% set only_fenced_msg -%}
    {{ model_name }}: strategy '{{ strategy }}' exists only fenced, but `fenced` is false.
    Remove `fenced: false`, or pick an unfenced strategy ('append' or 'insert_overwrite').
  {%- endset %}
  {% set non_delta_msg -%}
    {{ model_name }}: strategy '{{ strategy }}' is fenced and needs a Delta table, but `file_format` is '{{ file_format }}'.
    Remove `file_format` (delta is the default) or set it to 'delta'; to run this model unfenced on another format, set `fenced: false`.
  {%- endset %}
  {% set missing_key_msg -%}
    {{ model_name }}: the insert strategy needs `unique_key` (a column name or a list of column names): it inserts the rows whose key is not in the table yet.
    To insert every row, use 'append'.
  {%- endset %}
  {% set invalid_batch_msg -%}
    {{ model_name }}: `fence_batch_id` must be a non-empty string or a whole number naming the batch this run applies (e.g. "{{ '{{' }} var('ds') {{ '}}' }}"), got {{ batch_id | tojson }}.
  {%- endset %}
  {% set batch_unfenced_msg -%}
    {{ model_name }}: `fence_batch_id` makes the fence apply each batch once, but `fenced` is false.
    Remove `fenced: false`, or remove `fence_batch_id`.
  {%- endset %}
  {% set batch_replaces_msg -%}
    {{ model_name }}: `fence_batch_id` is not for the {{ strategy }} strategy: each run replaces {{ 'its batch window' if strategy == 'microbatch' else 'the partitions it writes' }}, so running a batch again never applies it twice.
    Remove `fence_batch_id`.
  {%- endset %}
  {% set invalid_predicates_msg -%}
    {{ model_name }}: `incremental_predicates` must be a SQL string or a list of SQL strings, got {{ predicates | tojson }}.
  {%- endset %}
  {% set missing_predicates_msg -%}
    {{ model_name }}: the replace_where strategy needs `incremental_predicates`: the rows it replaces (e.g. "event_date >= date_sub(current_date(), 3)").
    Without one it would silently become an append, so this is an error.
  {%- endset %}

  {% set python_microbatch_msg -%}
    {{ model_name }}: the microbatch strategy is not for Python models: dbt gives a Python model's `dbt.ref` and `dbt.source` no batch window, so every batch would hold all rows. Write it in SQL, or use replace_where with `incremental_predicates`.
  {%- endset %}

  {%- do fence_validate_databricks(model_name, raw_strategy) -%}
  {%- if strategy not in strategies -%}
    {% do exceptions.raise_compiler_error(invalid_strategy_msg) %}
  {%- endif -%}
  {%- if strategy == 'microbatch' and model.language == 'python' -%}
    {% do exceptions.raise_compiler_error(python_microbatch_msg) %}
  {%- endif -%}
  {%- if raw_strategy == 'safeappend' -%}
    {% do exceptions.warn(safeappend_msg) %}
  {%- endif -%}
  {%- set common = fence_validate_common(model_name) -%}
  {%- set fenced_config = common.fenced -%}
  {%- if not fenced_config and strategy in ['append_if_unchanged', 'replace_where'] -%}
    {% do exceptions.raise_compiler_error(only_fenced_msg) %}
  {%- endif -%}
  {%- if batch_id is not none -%}
    {%- if batch_id is boolean or not (batch_id is integer or (batch_id is string and batch_id | trim)) -%}
      {% do exceptions.raise_compiler_error(invalid_batch_msg) %}
    {%- elif not fenced_config -%}
      {% do exceptions.raise_compiler_error(batch_unfenced_msg) %}
    {%- elif strategy in ['microbatch', 'insert_overwrite'] -%}
      {% do exceptions.raise_compiler_error(batch_replaces_msg) %}
    {%- endif -%}
  {%- endif -%}

  {#-- dbt-spark runs a merge without a key as a MERGE that inserts every row (ON FALSE): an
       append, fenced like one. --#}
  {%- set keyless_merge = strategy == 'merge' and not unique_key -%}
  {%- set mode = 'auto' if keyless_merge else strategies[strategy] -%}
  {%- set reads_self = mode == 'auto' and adapter.fence_reads_self(header_query(compiled_code, model.language), this, model.language) -%}
  {%- set hooks_read_self = mode == 'auto' and fenced_config and not reads_self and fence_pre_hooks_read_self() -%}
  {%- set reads_self = reads_self or hooks_read_self -%}
  {#-- a batch id fences a blind append too: the only run it can conflict with is another
       run of its batch --#}
  {%- set fenced = fenced_config and (mode == 'fenced' or reads_self or batch_id is not none) -%}
  {%- if fenced and file_format not in fence_formats() -%}
    {% do exceptions.raise_compiler_error(non_delta_msg) %}
  {%- endif -%}
  {%- if strategy == 'insert' and not unique_key -%}
    {% do exceptions.raise_compiler_error(missing_key_msg) %}
  {%- endif -%}

  {%- if predicates is none -%}
    {%- set predicate_list = none -%}
  {%- elif predicates is string and predicates | trim -%}
    {%- set predicate_list = [predicates] -%}
  {%- elif predicates is sequence and predicates is not mapping and predicates is not string
        and predicates | length > 0
        and predicates | select('string') | reject('equalto', '') | list | length == predicates | length -%}
    {%- set predicate_list = predicates -%}
  {%- else -%}
    {% do exceptions.raise_compiler_error(invalid_predicates_msg) %}
  {%- endif -%}
  {%- if strategy == 'replace_where' and not predicate_list -%}
    {% do exceptions.raise_compiler_error(missing_predicates_msg) %}
  {%- endif -%}

  {{ return({
      'strategy': 'append_if_unchanged' if reads_self else strategy,
      'configured_strategy': raw_strategy,
      'fenced': fenced,
      'reads_self': reads_self,
      'hooks_read_self': hooks_read_self,
      'keyless_merge': keyless_merge,
      'fence_retries': common.fence_retries,
      'fence_accept_unverified': common.fence_accept_unverified,
      'fence_isolation': common.fence_isolation,
      'fence_batch_id': batch_id,
      'unique_key': unique_key,
      'incremental_predicates': predicate_list,
      'on_schema_change': incremental_validate_on_schema_change(config.get('on_schema_change'), default='ignore'),
  }) }}
{% endmacro %}


{% macro fence_validate_target(existing_relation) %}
  {%- set model_name = fence_node_name() -%}
  {% set non_delta_msg -%}
    {{ model_name }}: the target exists but is not a Delta table, so it cannot be fenced (`file_format` is delta).
    Run once with --full-refresh to rebuild it as Delta, or set `fenced: false`.
  {%- endset %}
  {#-- A view never gets here: the materialization replaces it. --#}
  {%- if not fence_target_is_format(fence_table_format(), existing_relation) -%}
    {% do exceptions.raise_compiler_error(non_delta_msg) %}
  {%- endif -%}
{% endmacro %}


{% macro fence_validate_unique_key(staging, unique_key, relation=none, found=none) %}
  {#-- Runs on the staged model before the write, or (a write whose source is the model SQL
       itself) after Spark refused it: a key that is not a column of the model's result
       would otherwise surface as Spark's unresolved-column error mid-MERGE. `relation`:
       the model's table, where the adapter calls this outside the materialization, with what
       fence_missing_unique_key `found`. --#}
  {%- set found = found or fence_missing_unique_key(staging, unique_key) -%}
  {% set missing_column_msg -%}
    Model {{ (relation or this).render() }}: `unique_key` names {{ found.missing | join(', ') }}, which the model does not select.
    Its columns are: {{ found.columns | join(', ') }}. Nothing was written.
  {%- endset %}
  {#-- No columns at all is a DESCRIBE that said nothing, not a model without the key. --#}
  {%- if found.missing and found.columns -%}
    {% do exceptions.raise_compiler_error(missing_column_msg) %}
  {%- endif -%}
{% endmacro %}


{% macro fence_validate_first_build(settings) %}
  {#-- A first (full) build is dbt-spark's CREATE, which never uses the key: a key the model
       does not select would pass it and fail the next run's MERGE after Spark ran. Checked on
       the model's SQL as Spark analyses it (no job), before the CREATE. --#}
  {%- if settings.unique_key and settings.strategy in ['merge', 'insert'] and model.language == 'sql' -%}
    {%- set columns = adapter.fence_query_columns(header_query(compiled_code)) -%}
    {%- do fence_validate_unique_key(none, settings.unique_key, found=fence_columns_missing(columns, settings.unique_key)) -%}
  {%- endif -%}
{% endmacro %}


{% macro fence_missing_unique_key(staging, unique_key) %}
  {#-- The keys that are not columns of the staged model, and its columns. --#}
  {{ return(fence_columns_missing(adapter.get_columns_in_relation(staging), unique_key)) }}
{% endmacro %}


{% macro fence_columns_missing(relation_columns, unique_key) %}
  {#-- The keys that are not among these columns, and the columns' names. --#}
  {%- set keys = [unique_key] if unique_key is string else unique_key -%}
  {%- set columns = relation_columns | map(attribute='name') | list -%}
  {%- set types = {} -%}
  {%- for column in relation_columns -%}
    {%- do types.update({column.name | lower: column.dtype | lower}) -%}
  {%- endfor -%}
  {%- set missing = [] -%}
  {%- for key in keys -%}
    {#-- dbt-spark puts the key into the MERGE as written, so a hostile column name comes
         backquoted: compare the name inside the quotes. An unquoted `k.id` is a struct's
         field: its column must be a struct that has each field named on the path. --#}
    {%- set quoted = key | length > 1 and key[0] == '`' and key[-1] == '`' -%}
    {%- set path = [key[1:-1].replace('``', '`')] if quoted else key.split('.') -%}
    {%- set head = path[0] | lower -%}
    {%- if head not in types -%}
      {%- do missing.append(key) -%}
    {%- elif path | length > 1 -%}
      {%- set dtype = types[head] -%}
      {%- if not dtype.startswith('struct<') -%}
        {%- do missing.append(key) -%}
      {%- else -%}
        {%- for field in path[1:] -%}
          {%- if (field | lower) ~ ':' not in dtype -%}
            {%- do missing.append(key) -%}
          {%- endif -%}
        {%- endfor -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return({'missing': missing | unique | list, 'columns': columns}) }}
{% endmacro %}


{% macro fence_pre_hooks_read_self() %}
  {#-- An `append` whose pre-hook reads {{ this }} (SET VAR wm = (select max(id) from ...),
       CACHE TABLE, a temp view) is a read-modify-write, as one whose SQL does. The hooks are
       rendered as run_hooks renders them, once more: a hook's Jinja runs twice. --#}
  {%- set rendered = [] -%}
  {%- for hook in pre_hooks -%}
    {%- do rendered.append(render(hook.get('sql')) | trim) -%}
  {%- endfor -%}
  {{ return(adapter.fence_hooks_read_self(rendered, this)) }}
{% endmacro %}
