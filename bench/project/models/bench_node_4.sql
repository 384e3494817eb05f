{#-- Part 8 (bench/nodes.py): one of four copies of bench_merge, run together in one dbt run. --#}
{{ config(incremental_strategy='merge', unique_key='id') }}
{{ bench_batch() }}
