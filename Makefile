# The two commands of the quick start:
#   make run   start the local stack, seed a topic, run the worker until caught up,
#              print what it wrote
#   make test  install what is missing, start LocalStack and tansu, run every test
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

BROKER ?= dev
SAMPLE ?= 5000
CARGO ?= cargo
BIN := target/debug/ingest
RUN_DIR = $${INGEST_RUN:-$${TMPDIR:-/tmp}/ingest-stack}
export AWS_ACCESS_KEY_ID ?= test
export AWS_SECRET_ACCESS_KEY ?= test
export AWS_REGION ?= us-east-1

.SILENT: run stack tansu stop sim-sweep
.PHONY: run test build stack tansu stop clean-stack fmt lint check bench-throttle bench-dynamodb bench-metrics bench-pipeline chaos fuzz sim-sweep

# The build's system packages first (libssl-dev, pkg-config; once).
build:
	bash localstack/install-system.sh build
	$(CARGO) build

# Start LocalStack (and tansu when BROKER=tansu).
stack:
	bash localstack/start.sh
	if [ "$(BROKER)" = tansu ]; then bash localstack/tansu.sh; fi

run: build stack
	if [ "$(BROKER)" = tansu ]; then
	  brokers=127.0.0.1:9092
	  $(BIN) create-topics --brokers $$brokers --topic orders:6 --topic ingest-dead-letters:1
	else
	  brokers=127.0.0.1:19092
	  mkdir -p $(RUN_DIR)
	  if [ -f $(RUN_DIR)/dev-broker.pid ]; then kill $$(cat $(RUN_DIR)/dev-broker.pid) 2>/dev/null || true; sleep 0.5; fi
	  $(BIN) dev-broker --listen $$brokers --topic orders:6 --topic ingest-dead-letters:1 \
	    > $(RUN_DIR)/dev-broker.log 2>&1 &
	  echo $$! > $(RUN_DIR)/dev-broker.pid
	  trap 'kill $$(cat $(RUN_DIR)/dev-broker.pid) 2>/dev/null; rm -f $(RUN_DIR)/dev-broker.pid' EXIT
	  for i in $$(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && break; sleep 0.1; done
	fi
	$(BIN) produce --brokers $$brokers --topic orders --sample $(SAMPLE)
	INGEST__KAFKA__BROKERS=$$brokers $(BIN) run --config config/local.toml --until-caught-up
	$(BIN) show-table --table orders --limit 3 --endpoint-url http://127.0.0.1:4566

# Everything the tests need, then every test (unit, then integration against
# LocalStack and tansu, which the tests share).
# The chaos suite's short mode runs last: it kills and restarts the shared
# broker, whose group coordinator (tansu) may stay slow for the tests after it.
# tansu starts with fresh data: every test makes its own topics, and the
# SQLite file the benches and the chaos suite fill slows the broker down (at
# 1.9 GB, four end-to-end tests timed out on its requests).
test: build stack
	TANSU_FRESH=1 bash localstack/tansu.sh
	bash localstack/install-system.sh test
	$(CARGO) test -- --test-threads=2 --skip chaos
	$(CARGO) test --test chaos

tansu:
	bash localstack/tansu.sh

# The chaos suite's full plan: 100,000 records, workers killed, stopped,
# joining and leaving, broker restarts, DynamoDB outages, a capacity step;
# report in target/chaos/report.{md,json}. `make test` runs its short mode.
chaos: build stack tansu
	CHAOS=full $(CARGO) test --test chaos -- --nocapture

# Bounded fuzzing (proptest on stable): the record decoder and the proxy's
# request parser, 100,000 cases per target; `make test` runs 2,000.
fuzz:
	FUZZ_CASES=100000 $(CARGO) test --test fuzz

# Throttle strategies side by side through the capacity-enforcing proxy
# (about 25 minutes); reports in target/bench/throttle.{md,json}.
bench-throttle: build stack tansu
	$(CARGO) bench --profile dev --bench throttle

# Throttle strategies on DynamoDB's other shapes (a hot key range, a live
# writer with and without a budget, two jobs, an on-demand maximum and its
# step, a capacity step; about 40 minutes); reports in
# target/bench/dynamodb.{md,json}. BENCH_SCENARIO, BENCH_ONLY, BENCH_WORKERS
# narrow it; BENCH_BROKER=mock runs it on librdkafka's mock cluster (a
# Kafka-like group coordinator) instead of tansu.
bench-dynamodb: build stack tansu
	$(CARGO) bench --profile dev --bench dynamodb

# Records/s with the metrics endpoint off and on, alternately (a few
# minutes); reports in target/bench/metrics.{md,json}.
bench-metrics: build stack tansu
	$(CARGO) bench --profile dev --bench metrics

# One worker's own speed and cost, with DynamoDB out of the way: raw consume
# against ingest through `ingest throttle-proxy --upstream none` (0 and 5 ms),
# records of 200 B, 1 KB and 4 KB, 1 and 2 workers; release build (the first
# takes several minutes); reports in target/bench/pipeline{,-mock}.{md,json}.
# BENCH_RECORDS, BENCH_SIZES, BENCH_LATENCIES, BENCH_WORKERS narrow a run.
# Its broker is a tansu of its own with fresh data on 127.0.0.1:9094 (the
# tests' SQLite file grows with every run, and its reads slow down with it);
# then the speed rows again on librdkafka's mock, in memory, which serves
# faster than tansu's 15 MB/s (target/bench/pipeline-mock.{md,json}).
bench-pipeline: stack
	bash localstack/install-system.sh build
	trap 'kill $$(cat $(RUN_DIR)/tansu-bench.pid 2>/dev/null) 2>/dev/null; rm -f $(RUN_DIR)/tansu-bench.pid' EXIT
	TANSU_NAME=tansu-bench TANSU_PORT=9094 TANSU_FRESH=1 bash localstack/tansu.sh
	INGEST_TEST_BROKERS=127.0.0.1:9094 $(CARGO) bench --bench pipeline
	BENCH_BROKER=mock $(CARGO) bench --bench pipeline

# Every shipped `ingest sim` scenario over seeds 1 to SEEDS (8): each
# strategy's throttled requests, utilization, most requests, least job and
# least client, in target/bench/sim-sweep.md (JSON in target/bench/sim/).
SEEDS ?= 8
sim-sweep: build
	mkdir -p target/bench/sim
	out=target/bench/sim-sweep.md
	echo "# ingest sim: every shipped scenario, seeds 1-$(SEEDS)" > $$out
	for f in config/scenarios/*.toml; do
	  name=$$(basename $$f .toml)
	  { echo; echo '```'; $(BIN) sim --scenario $$f --seeds $(SEEDS) --json target/bench/sim/$$name.json | grep -v '^wrote'; echo '```'; } >> $$out
	done
	echo "wrote $$out"

stop:
	bash localstack/stop.sh

# Stop everything and wipe the durable broker's data.
clean-stack: stop
	rm -rf $(RUN_DIR)

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

check: lint test
