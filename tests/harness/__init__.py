"""The one harness for "a server to test against" and "another writer": the tests, `bench/`
and the scorecard all start their Spark servers and race their foreign writers through it.

- `servers`: a Spark Thrift or Spark Connect server with Delta, started from the venv's
  pyspark, on `local[N]` or on a standalone cluster; SQL clients of it.
- `cluster`: a Spark standalone master and worker, separate JVMs, from pyspark's classes.
- `hdfs`: a shared lakehouse for separate drivers: a real HDFS (MiniDFSCluster) and a Derby
  network server as the shared metastore, on 127.0.0.1; dbt profiles for `dbt run` processes
  on it, and lone driver processes that set it up and read it back.
- `writer`: another writer (its own session or client) that commits when told, and the
  "a Spark job has run for a while" condition races fire on.
"""
