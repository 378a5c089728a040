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

.PHONY: run
run: setup ## Set up, then run a Python job on the default image
	./bin/airlock run -- python3 -c 'import numpy, matplotlib, platform; print("hello from", platform.node(), "numpy", numpy.__version__, "sum", int(numpy.arange(10).sum()))'

.PHONY: test
test: setup ## Set up, then run unit and end-to-end tests against real dockerd and runsc
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	@# The sandbox conformance suite (engine/enginetest) on both engines, both isolation modes.
	$(GO) test -count=1 -p 1 -tags e2e -timeout 20m -run 'TestSandbox' -v ./engine/oci/ ./engine/docker/ > sandboxes-e2e.log 2>&1 || { grep -B2 -A20 -- '--- FAIL' sandboxes-e2e.log | head -80; exit 1; }; grep -E '^(ok|FAIL)' sandboxes-e2e.log
	@# One conformance suite, unchanged, on every engine and isolation pair.
	@for pair in "docker gvisor" "oci gvisor" "docker seccomp" "oci seccomp"; do \
		set -- $$pair; \
		echo "== e2e: engine $$1, isolation $$2"; \
		AIRLOCK_E2E_ENGINE=$$1 AIRLOCK_E2E_ISOLATION=$$2 $(GO) test -count=1 -tags e2e -timeout 30m -v ./e2e/ || exit 1; \
	done
	@# The JS, deepagents and Python clients against a live airlock serve.
	$(MAKE) --no-print-directory test-sdk

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

.PHONY: bench-artifacts
bench-artifacts: ## Artifact copy-out throughput beside `cp -r` of the same tree
	$(GO) test -run XXX -bench CopyOut -benchtime 5x ./artifacts/

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/

.PHONY: clean
clean: ## Remove build outputs
	rm -rf bin e2e.log sandboxes-e2e.log
