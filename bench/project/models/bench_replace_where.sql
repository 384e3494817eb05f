-- The predicate covers only the new batch, so it replaces nothing: the same rows land as with
-- stock dbt-spark's append, which is what it is compared with.
{{ config(
    incremental_strategy='replace_where' if target.type == 'fenced_spark' else 'append',
    incremental_predicates=['batch >= ' ~ var('batch', 0)],
) }}
{{ bench_batch() }}
