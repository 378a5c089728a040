# airlock's entry points. `make help` lists them.
SHELL := /bin/bash
GO ?= go
AIRLOCK_ROOT ?= /var/lib/airlock
export AIRLOCK_ROOT

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: setup
setup: ## Install and start everything airlock needs (root; idempotent)
	@./scripts/setup.sh

.PHONY: build
build: ## Build bin/airlock
	$(GO) build -trimpath -o bin/airlock ./cmd/airlock

.PHONY: bundle
bundle: ## Build dist/airlock-<version>-linux-<arch>.tar.gz, the signed offline install bundle (after setup)
	@./scripts/bundle.sh

.PHONY: run
run: setup ## Set up, then run a Python job on the default image
	./bin/airlock run -- python3 -c 'import numpy, matplotlib, platform; print("hello from", platform.node(), "numpy", numpy.__version__, "sum", int(numpy.arange(10).sum()))'

.PHONY: test
test: setup ## Set up, then run unit and end-to-end tests against real dockerd and runsc
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	@# The sandbox conformance suite (engine/enginetest) on both engines, both isolation modes.
	$(GO) test -count=1 -p 1 -tags e2e -timeout 20m -run 'TestSandbox' -v ./engine/oci/ ./engine/docker/ > sandboxes-e2e.log 2>&1 || { grep -B2 -A20 -- '--- FAIL' sandboxes-e2e.log | head -80; exit 1; }; grep -E '^(ok|FAIL)' sandboxes-e2e.log
	@# airlock serve end to end, once, on one pair (oci, gvisor), with a 50-run load test.
	AIRLOCK_E2E_ENGINE=oci AIRLOCK_E2E_ISOLATION=gvisor $(GO) test -count=1 -tags e2e -timeout 10m -skip TestServeSoak -v ./e2e/serve/ > serve-e2e.log 2>&1 || { grep -B2 -A20 -- '--- FAIL' serve-e2e.log | head -80; exit 1; }; grep -E '^(ok|FAIL)|runs at concurrency' serve-e2e.log
	@# The soak, short: 500 mixed operations through one airlock serve, flat and leaving nothing (`make soak` runs 10,000).
	AIRLOCK_SOAK_OPS=500 AIRLOCK_E2E_ENGINE=oci AIRLOCK_E2E_ISOLATION=gvisor $(GO) test -count=1 -tags e2e -timeout 20m -run TestServeSoak -v ./e2e/serve/ > soak-e2e.log 2>&1 || { tail -60 soak-e2e.log; exit 1; }; sed -n '/operations at concurrency/,/^--- /p;/^ok/p' soak-e2e.log
	@# One conformance suite, unchanged, on every engine and isolation pair.
	@for pair in "docker gvisor" "oci gvisor" "docker seccomp" "oci seccomp"; do \
		set -- $$pair; \
		echo "== e2e: engine $$1, isolation $$2"; \
		AIRLOCK_E2E_ENGINE=$$1 AIRLOCK_E2E_ISOLATION=$$2 $(GO) test -count=1 -tags e2e -timeout 30m -v ./e2e/ 2>&1 | tee e2e-$$1-$$2.log; \
		if [ $${PIPESTATUS[0]} != 0 ]; then echo "== e2e failures, engine $$1, isolation $$2:"; grep -E -A4 -- '--- FAIL|^\s*FAILED ' e2e-$$1-$$2.log | head -80; exit 1; fi; \
	done
	@# The offline bundle, once: built, installed and run with no network, refused when changed.
	$(GO) test -count=1 -tags e2e -timeout 15m -v ./e2e/bundle/
	@$(MAKE) --no-print-directory test-mcp
	@# The JS, deepagents and Python clients against a live airlock serve.
	$(MAKE) --no-print-directory test-sdk

MCP_CLIENT := mcpserver/testdata/client

.PHONY: test-mcp
test-mcp: build ## The MCP tools through the official SDKs: Go's client over streamable HTTP, npm's over stdio (airlock mcp)
	$(GO) test -count=1 -tags e2e -timeout 5m -run 'TestHTTPTransport' ./mcpserver/
	cd $(MCP_CLIENT) && npm ci --no-audit --no-fund --loglevel=error && AIRLOCK_BIN=$(CURDIR)/bin/airlock AIRLOCK_ROOT=$(AIRLOCK_ROOT) npm test

.PHONY: test-sdk
test-sdk: ## Test the JS, deepagents and Python clients against a live airlock serve (npm ci from the lockfiles)
	GO=$(GO) ./sdk/test.sh

.PHONY: unit
unit: ## Run the unit tests only (no root, no daemon)
	$(GO) test ./...

.PHONY: fuzz
fuzz: ## Run each fuzz target for 30s
	$(GO) test -run XXX -fuzz FuzzParseBytes -fuzztime 30s ./units/
	$(GO) test -run XXX -fuzz FuzzParseCPUs -fuzztime 30s ./units/
	$(GO) test -run XXX -fuzz FuzzParseDuration -fuzztime 30s ./units/
	$(GO) test -run XXX -fuzz FuzzParseRef -fuzztime 30s ./images/
	$(GO) test -run XXX -fuzz FuzzWriter -fuzztime 30s ./internal/termsafe/
	$(GO) test -run XXX -fuzz FuzzCheckName -fuzztime 30s ./artifacts/
	$(GO) test -run XXX -fuzz FuzzUnpackLayer -fuzztime 60s -fuzzminimizetime 10x ./store/

.PHONY: bench
bench: setup ## airlock beside docker run: cold start, first byte, burst, flood, copy-out, batch
	$(GO) run ./bench/all

.PHONY: bench-start
bench-start: setup ## Start-up latency: oci and docker engines beside bare runsc and docker run (30 runs each)
	$(GO) run ./bench/start -n 30

.PHONY: bench-session
bench-session: setup ## A live sandbox: exec beside bare runsc exec and docker exec; cp beside docker cp
	$(GO) run ./bench/session

.PHONY: bench-pool
bench-pool: setup ## Warm pools: pooled run beside cold API, airlock run and docker run; 60s sustained rate; batch --warm 4
	$(GO) run ./bench/pool -n 30

.PHONY: bench-server
bench-server: setup ## airlock serve beside the CLI: run and exec p50/p99 (30 each, interleaved)
	$(GO) run ./bench/server -n 30

.PHONY: load-server
load-server: setup ## airlock serve under load: 1,000 one-shot runs at concurrency 8, p50/p99, leaks, RSS, goroutines
	AIRLOCK_LOAD_RUNS=1000 $(GO) test -count=1 -tags e2e -timeout 30m -run TestServeLoad -v ./e2e/serve/

SOAK_OPS ?= 10000

.PHONY: soak
soak: setup ## airlock serve soaked: 10,000 mixed operations at concurrency 4; p50/p99, RSS, fds, goroutines per 1,000; fails unless flat
	AIRLOCK_SOAK_OPS=$(SOAK_OPS) AIRLOCK_E2E_ENGINE=oci AIRLOCK_E2E_ISOLATION=gvisor $(GO) test -count=1 -tags e2e -timeout 180m -run TestServeSoak -v ./e2e/serve/ 2>&1 | tee soak.log; exit $${PIPESTATUS[0]}

.PHONY: bench-artifacts
bench-artifacts: ## Artifact copy-out throughput beside `cp -r` of the same tree
	$(GO) test -run XXX -bench CopyOut -benchtime 5x ./artifacts/

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/ ./e2e/bundle/ ./e2e/serve/

.PHONY: clean
clean: ## Remove build outputs
	rm -rf bin dist e2e.log sandboxes-e2e.log serve-e2e.log soak-e2e.log soak.log
