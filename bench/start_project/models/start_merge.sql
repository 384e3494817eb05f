{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          file_format='delta') }}
select 1 as id, 'first' as status
