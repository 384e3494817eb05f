-- Stock dbt-spark runs the same model as its (unfenced) append.
{{ config(incremental_strategy='append_if_unchanged' if target.type == 'fenced_spark' else 'append') }}
{{ bench_batch() }}
