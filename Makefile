# Everything a fresh clone needs: `make demo` and `make test` set up .venv first.
SHELL := /bin/bash
PYTHON ?= python3
# dbt-core 1.11 lives in .venv (the default); `DBT=1.12` gives every target a .venv-1.12.
DBT ?= 1.11
VENV := $(if $(filter 1.11,$(DBT)),.venv,.venv-$(DBT))
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Caches live in the clone (ignored by git) so a re-run downloads nothing; a cache the user
# exported wins (?=), so a warm one is used rather than filled again here.
export PIP_CACHE_DIR ?= $(CURDIR)/.cache/pip
export DBT_FENCED_SPARK_JARS_CACHE ?= $(CURDIR)/.cache/ivy
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export UV_CACHE_DIR ?= $(CURDIR)/.cache/uv
# uv reads its own settings, not pip's: a mirror or certificate set for pip applies to it too.
ifdef PIP_INDEX_URL
export UV_DEFAULT_INDEX ?= $(PIP_INDEX_URL)
endif
ifdef PIP_CERT
export SSL_CERT_FILE ?= $(PIP_CERT)
endif

.PHONY: setup demo scorecard bench test unit functional thrift connect cluster conformance \
	reliability twodrivers scorecard-twodrivers lint format clean leg-session leg-session-slow \
	leg-thrift leg-next leg-connect wheel-check

setup: $(STAMP)

# dbt-core 1.12 requires dbt-core-experimental-parser, whose source build downloads a binary
# from outside the package registries; only `--use-v2-parser` uses it, so uv's override drops it.
$(STAMP): setup.py requirements-dev.txt dbt-1.12-overrides.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
ifeq ($(DBT),1.11)
	$(PY) -m pip install --quiet -e '.[thrift,connect]' 'dbt-core~=$(DBT).0' -r requirements-dev.txt
else
	$(PY) -m pip install --quiet uv
	$(VENV)/bin/uv pip install --quiet --python $(PY) --override dbt-1.12-overrides.txt \
	  -e '.[thrift,connect]' 'dbt-core~=$(DBT).0' -r requirements-dev.txt
endif
	touch $(STAMP)

# The package as users install it: a wheel and an sdist (`python -m build`) that pass `twine
# check` and hold every file of dbt/, then the wheel alone in a fresh venv (no editable install,
# no clone on its path): `dbt --version` lists fenced_spark, `dbt debug` passes on the embedded
# session. In `make test`'s second lane, the shorter one (about 1.5 minutes).
WHEEL_CHECK := .cache/wheel-check
wheel-check: setup
	rm -rf $(WHEEL_CHECK) && mkdir -p $(WHEEL_CHECK)/project
	$(PY) -m build --quiet --outdir $(WHEEL_CHECK)/dist .
	$(VENV)/bin/twine check --strict $(WHEEL_CHECK)/dist/*
	$(PY) -m tests.wheel_check contents $(WHEEL_CHECK)/dist
	$(PYTHON) -m venv $(WHEEL_CHECK)/venv
ifeq ($(DBT),1.11)
	$(WHEEL_CHECK)/venv/bin/pip install --quiet $(WHEEL_CHECK)/dist/*.whl 'dbt-core~=$(DBT).0'
else
	$(WHEEL_CHECK)/venv/bin/pip install --quiet uv
	$(WHEEL_CHECK)/venv/bin/uv pip install --quiet --python $(WHEEL_CHECK)/venv/bin/python \
	  --override dbt-1.12-overrides.txt $(WHEEL_CHECK)/dist/*.whl 'dbt-core~=$(DBT).0'
endif
	$(PY) -m tests.wheel_check installed $(WHEEL_CHECK)/venv $(WHEEL_CHECK)/project

demo: setup
	$(PY) integration_projects/lakehouse_orders/race_demo.py

# Every strategy at every timing, stock vs fenced; regenerates docs/scorecard.md and .png.
scorecard: setup
	$(PY) integration_projects/lakehouse_orders/scorecard.py --command "make scorecard"

# Stock dbt-spark vs fenced_spark in one process and one Spark JVM (and over the harness's Thrift
# and Connect servers): overhead per run, history length, Spark jobs per run, contention;
# regenerates docs/benchmarks.md and .png. BENCH_SIZE=ci is the smaller size (part 1 alone
# 11.5 min); full adds 2M rows (over 1 h). CI does not run it.
# BENCH_ONLY=build (comma-separated parts) measures those parts alone and keeps the last run's
# others in docs/benchmarks.md, each part saying which command measured it.
BENCH_SIZE ?= full
BENCH_ONLY ?=
bench: setup
	$(PY) -m bench.run --size $(BENCH_SIZE) $(if $(BENCH_ONLY),--only $(BENCH_ONLY)) \
	  --command "make bench BENCH_SIZE=$(BENCH_SIZE)$(if $(BENCH_ONLY), BENCH_ONLY=$(BENCH_ONLY))"

# pytest exits 5 when it collected no test: that is a failure here, not a pass.
define pytest
	$(or $(2),$(PY)) -m pytest $(1); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: $(1)" >&2; exit 1; fi; exit $$rc
endef

# The fence tests that also run over a server in `make test` (one server per pytest run).
THRIFT_TESTS := tests/functional/test_server_races.py tests/functional/test_node_transaction.py \
	tests/functional/test_merge_fence.py tests/functional/test_snapshot_processes.py \
	tests/functional/test_run_settings.py tests/functional/test_batch_id.py \
	tests/functional/test_python_models.py tests/functional/test_statements.py \
	tests/functional/test_contention.py
CONNECT_TESTS := tests/functional/test_connect.py tests/functional/test_server_races.py \
	tests/functional/test_merge_races.py tests/functional/test_strict_races.py \
	tests/functional/test_cluster.py tests/functional/test_conflicts.py \
	tests/functional/test_python_models.py \
	tests/functional/test_run_settings.py tests/functional/test_statements.py

# dbt 1.12's leg of `make test`: the unit tests, the strict strategies' races (microbatch's
# batches changed in 1.12) and `dbt retry` after a refusal, on the embedded session. dbt's
# conformance classes (dbt's own materializations, not the fence) run in `make conformance`
# and `make conformance DBT=1.12`, not in CI: about 8 minutes the fence's tests need.
NEXT_DBT := 1.12
NEXT_TESTS := tests/unit tests/functional/test_strict_races.py tests/functional/test_dbt_retry.py

# Everything on the embedded session and the fence over Thrift on 1.11; dbt 1.12's leg and the
# fence over Spark Connect with its executors on a standalone cluster (test_cluster.py needs
# one; the rest do not mind). Two legs run at a time, each in its own pytest process, JVMs,
# folders and ports (one leaves about a third of the 2 cores idle), in two lanes of about equal
# length: session then Thrift, and the session's slowest files, 1.12, then Connect. -O prints a
# leg's output when it ends.
test: setup lint
	$(MAKE) --no-print-directory -j2 -O leg-thrift leg-connect

# The session's slowest files (a SIGKILL at every step, the docs' examples built anew, eight
# writers at once, the races on what was written and on session variables, hostile names, the
# insert strategy): their own leg, in the other lane, keeps the lanes about equal.
SLOW_SESSION_TESTS := tests/functional/test_crash.py tests/functional/test_docs_examples.py \
	tests/functional/test_contention.py tests/functional/test_as_written.py \
	tests/functional/test_session_variables.py tests/functional/test_hostile_names.py \
	tests/functional/test_insert_strategy.py tests/functional/test_start.py \
	tests/functional/test_unconfirmed_tolerance.py tests/functional/test_claims_and_definitions.py \
	tests/functional/test_serial_not_reverted.py tests/functional/test_auto_compacted_contention.py

leg-session: setup
	$(call pytest,tests/functional tests/unit -q -ra --durations=15 \
	  $(addprefix --ignore=,$(SLOW_SESSION_TESTS)))

# dbt's conformance classes that dbt-spark's own suite runs and ours lacked until #66 (dbt show,
# --empty, current timestamps, persist_docs, clone, on_schema_change's variants, grants: about
# 5.5 minutes together on the session), and the catalog's Delta stats (about 30 s). In the
# second lane, which is shorter than the first; `make conformance` runs every class on every
# profile.
CI_CONFORMANCE_TESTS := tests/conformance/test_show.py tests/conformance/test_empty.py \
	tests/conformance/test_timestamps.py tests/conformance/test_persist_docs.py \
	tests/conformance/test_clone.py tests/conformance/test_on_schema_change.py \
	tests/conformance/test_grants.py tests/conformance/test_docs.py::TestDocsGenerate

leg-session-slow: setup
	$(call pytest,$(SLOW_SESSION_TESTS) $(CI_CONFORMANCE_TESTS) -q -ra --durations=10)

leg-thrift: leg-session
	$(call pytest,$(THRIFT_TESTS) --profile thrift -q -ra --durations=10)

leg-next: leg-session-slow wheel-check
ifeq ($(DBT),1.11)
	$(MAKE) --no-print-directory setup DBT=$(NEXT_DBT)
	$(call pytest,$(NEXT_TESTS) -q -ra --durations=5,.venv-$(NEXT_DBT)/bin/python)
endif

leg-connect: leg-next
	$(call pytest,$(CONNECT_TESTS) --profile connect --cluster -q -ra --durations=10)

# Separate `dbt run` processes, each its own Spark driver, racing on one table on a real HDFS
# (a MiniDFSCluster) with a shared Derby metastore (tests/harness/hdfs.py starts both once and
# stops them by PID). Not a leg of `make test`: its legs name their paths.
TWODRIVERS_ARGS ?=
twodrivers: setup
	$(call pytest,tests/twodrivers -q -ra --durations=10 $(TWODRIVERS_ARGS))

# The race scorecard across separate drivers on HDFS (tests/twodrivers/test_race_matrix.py);
# regenerates docs/scorecard-twodrivers.md and .png from its outcomes.
scorecard-twodrivers: setup
	TWODRIVERS_SCORECARD="make scorecard-twodrivers" \
	  $(call pytest,tests/twodrivers/test_race_matrix.py -q -ra --durations=10)

unit: setup
	$(call pytest,tests/unit -q)

functional: setup
	$(call pytest,tests/functional -q -ra)

thrift: setup
	$(call pytest,tests/functional --profile thrift -q -ra)

connect: setup
	$(call pytest,tests/functional --profile connect -q -ra)

# A Spark standalone cluster (master + worker JVMs): the fence's races over Connect and over
# Thrift with the servers' executors on it, then the scorecard over Connect on it.
CLUSTER_TESTS := tests/functional/test_cluster.py tests/functional/test_merge_races.py \
	tests/functional/test_server_races.py tests/functional/test_strict_races.py
cluster: setup
	$(call pytest,$(CLUSTER_TESTS) --profile connect --cluster -q -ra)
	$(call pytest,$(CLUSTER_TESTS) --profile thrift --cluster -q -ra)
	$(PY) integration_projects/lakehouse_orders/scorecard.py --method connect --cluster \
	  --command "make cluster"

# dbt's adapter tests on the three profiles; updates this dbt version's columns of
# docs/conformance.md (`session`, ... for 1.11; `session 1.12`, ... with DBT=1.12).
# Every profile runs and the report is written even when one fails; then make fails if any
# pytest run did (a failed class is a failure, not a line in the doc).
CONFORMANCE_ARGS ?=
COLUMN := $(if $(filter 1.11,$(DBT)),,-$(DBT))
conformance: setup
	mkdir -p .cache/conformance
	rc=0; \
	for profile in session thrift connect; do \
	  $(PY) -m pytest tests/conformance --profile $$profile -q -ra $(CONFORMANCE_ARGS) \
	    --junitxml=.cache/conformance/$$profile$(COLUMN).xml || { echo "conformance failed on $$profile" >&2; rc=1; }; \
	done; \
	$(PY) -m tests.conformance.report --update \
	  --command "make conformance$(if $(COLUMN), DBT=$(DBT))" \
	  .cache/conformance/session$(COLUMN).xml .cache/conformance/thrift$(COLUMN).xml \
	  .cache/conformance/connect$(COLUMN).xml || rc=1; \
	exit $$rc

# The long crash, soak and contention runs (make test runs short ones); regenerates
# docs/reliability.md from their records (.cache/reliability, cleared first). The soak on the
# session: SOAK_TRIALS trials against an unfenced writer and SOAK_FENCED_TRIALS of K = 2, 4, 8
# fenced writers; over Thrift the SOAK_THRIFT_* counts. Contention (test_contention.py, its
# figures recorded by the tests.reliability_report plugin): three rounds of eight on the session
# (threads) and over Thrift (dbt processes), and sixteen writers on the session. Every run goes
# and the report is written even when one fails; then make fails if any did.
CRASH_TRIALS ?= 25
SOAK_TRIALS ?= 1000
SOAK_FENCED_TRIALS ?= 30
SOAK_THRIFT_TRIALS ?= 100
SOAK_THRIFT_FENCED_TRIALS ?= 6
SOAK_SEED ?= 11
RELIABILITY_COMMAND := make reliability CRASH_TRIALS=$(CRASH_TRIALS) SOAK_TRIALS=$(SOAK_TRIALS) \
  SOAK_FENCED_TRIALS=$(SOAK_FENCED_TRIALS) SOAK_THRIFT_TRIALS=$(SOAK_THRIFT_TRIALS) \
  SOAK_THRIFT_FENCED_TRIALS=$(SOAK_THRIFT_FENCED_TRIALS) SOAK_SEED=$(SOAK_SEED)
reliability: export RELIABILITY_RECORDS := $(CURDIR)/.cache/reliability
reliability: setup
	rm -rf $(RELIABILITY_RECORDS) && mkdir -p $(RELIABILITY_RECORDS)
	rc=0; \
	CRASH_TRIALS=$(CRASH_TRIALS) $(PY) -m pytest tests/functional/test_crash.py -q -ra || rc=1; \
	SOAK_TRIALS=$(SOAK_TRIALS) SOAK_FENCED_TRIALS=$(SOAK_FENCED_TRIALS) SOAK_SEED=$(SOAK_SEED) \
	  $(PY) -m pytest tests/functional/test_soak.py -q -ra || rc=1; \
	SOAK_TRIALS=$(SOAK_THRIFT_TRIALS) SOAK_FENCED_TRIALS=$(SOAK_THRIFT_FENCED_TRIALS) \
	  SOAK_SEED=$(SOAK_SEED) $(PY) -m pytest tests/functional/test_soak.py --profile thrift -q -ra \
	  || rc=1; \
	FENCE_CONTENTION_ROUNDS=3 FENCE_CONTENTION_RECORD=session-3x8 $(PY) -m pytest \
	  -p tests.reliability_report tests/functional/test_contention.py -q -ra || rc=1; \
	FENCE_CONTENTION_RUNS=16 FENCE_CONTENTION_RECORD=session-1x16 $(PY) -m pytest \
	  -p tests.reliability_report tests/functional/test_contention.py::TestWritersInThreads \
	  -q -ra || rc=1; \
	FENCE_CONTENTION_ROUNDS=3 FENCE_CONTENTION_RECORD=thrift-3x8 $(PY) -m pytest \
	  -p tests.reliability_report tests/functional/test_contention.py --profile thrift -q -ra \
	  || rc=1; \
	$(PY) -m tests.reliability_report --command "$(RELIABILITY_COMMAND)" || rc=1; \
	exit $$rc

# The import contracts in pyproject.toml: import-linter's lint-imports, with grimp taught dbt's
# pkgutil-style namespace packages (tests/lint_imports.py says why).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	@# The tests are not typed, but a name a refactor moved must not slip through to CI.
	@! $(VENV)/bin/mypy tests --allow-untyped-defs --allow-incomplete-defs 2>&1 \
	  | grep -E 'Module( "[^"]*")? has no attribute|\[name-defined\]|\[import-not-found\]'
	$(PY) -m tests.lint_imports --no-logo --no-cache
	$(PY) -m tests.house_rules

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf .venv .venv-* .fenced_spark logs target
