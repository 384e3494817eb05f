"""Delta Lake, the fence's first table format: its log's readers (log_tail on the session,
sql_log over SQL), a commit's actions and the table's definitions, and the token its writes
carry. The steps above see a table format only through what this package gives them."""
