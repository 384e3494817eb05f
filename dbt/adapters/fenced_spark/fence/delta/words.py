"""What Delta calls things: the session confs the fence sets around its write, the names of
Delta's commit conflicts, the operations after which earlier commits are no longer in the
table, and the errors that say a table is gone or no longer Delta."""

import re

from dbt.adapters.fenced_spark.fence.outcome import Gone

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
MAX_COMMIT_ATTEMPTS = "spark.databricks.delta.maxCommitAttempts"
# Delta sets it in the committing session after each commit, to the version it committed.
LAST_COMMIT = "spark.databricks.delta.lastCommitVersionInSession"

# Delta's commit conflicts. PySpark maps none of them to a class, so match the text. The error
# class is named when the text has it (the session's message starts with it); over Spark
# Connect the text may carry only the Java exception's name.
_ERROR_CLASS = re.compile(
    r"DELTA_CONCURRENT_\w+|DELTA_MAX_COMMIT_RETRIES_EXCEEDED"
    r"|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED"
)
_EXCEPTION = re.compile(
    r"Concurrent(Append|DeleteRead|DeleteDelete|Transaction|Write)Exception"
    r"|MetadataChangedException|ProtocolChangedException"
)


def conflict_name(error: BaseException) -> str | None:
    text = str(error)
    match = _ERROR_CLASS.search(text) or _EXCEPTION.search(text)
    return match.group(0) if match else None


# The operations after which what came before is no longer in the table.
RESETS = {
    "RESTORE",
    "CREATE TABLE",
    "CREATE TABLE AS SELECT",
    "CREATE OR REPLACE TABLE",
    "CREATE OR REPLACE TABLE AS SELECT",
    "REPLACE TABLE",
    "REPLACE TABLE AS SELECT",
}

# What Spark and Delta say when a table is gone, or is no longer Delta.
GONE = {
    Gone.DROPPED: re.compile(r"TABLE_OR_VIEW_NOT_FOUND|DELTA_TABLE_NOT_FOUND"),
    Gone.NOT_DELTA: re.compile(r"DELTA_ONLY_OPERATION|DELTA_MISSING_DELTA_TABLE|not a Delta table"),
}

# What a read pinned to vB says when vB's files (or the table) are gone since vB.
GONE_SINCE_VB = re.compile(
    r"DELTA_VERSION_NOT_FOUND|VersionNotFound|TABLE_OR_VIEW_NOT_FOUND|DELTA_TABLE_NOT_FOUND"
    r"|FileNotFound|PATH_NOT_FOUND"
)
