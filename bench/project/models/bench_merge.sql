{{ config(incremental_strategy='merge', unique_key='id') }}
{{ bench_batch() }}
