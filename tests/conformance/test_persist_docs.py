"""persist_docs: documented columns a model lacks, and quoted column names (dbt-spark's
alter_column_comment skips a column the table does not have, with a warning)."""

from dbt.tests.adapter.persist_docs.test_persist_docs import (
    BasePersistDocsAllColumnsMissing,
    BasePersistDocsQuotedColumnCaseSensitive,
    BasePersistDocsQuotedDescriptionNotAppliedOnMismatch,
)


class TestPersistDocsAllColumnsMissing(BasePersistDocsAllColumnsMissing):
    pass


class TestPersistDocsQuotedColumnCaseSensitive(BasePersistDocsQuotedColumnCaseSensitive):
    pass


class TestPersistDocsQuotedDescriptionNotAppliedOnMismatch(
    BasePersistDocsQuotedDescriptionNotAppliedOnMismatch
):
    pass
