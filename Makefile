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

.PHONY: build-node
build-node: build ## Build bin/airlock-node, which `airlock node` runs (a binary of its own: it holds the Kubernetes client)
	$(GO) build -trimpath -o bin/airlock-node ./cmd/airlock-node

.PHONY: bundle
bundle: ## Build dist/airlock-<version>-linux-<arch>.tar.gz, the signed offline install bundle (after setup)
	@./scripts/bundle.sh

.PHONY: run
run: setup ## Set up, then run a Python job on the default image
	./bin/airlock run -- python3 -c 'import numpy, matplotlib, platform; print("hello from", platform.node(), "numpy", numpy.__version__, "sum", int(numpy.arange(10).sum()))'

.PHONY: test
test: ## Set up (building the Kubernetes control plane beside it), then run unit and end-to-end tests against real dockerd and runsc
	@# Cold, the control plane builds for about 12 min: setup, vet and the
	@# fuzz targets run beside it; the unit tests, some timed, after it.
	@$(MAKE) --no-print-directory -j2 test-host kube-build
	$(GO) test -count=1 ./...
	@# The sandbox conformance suite (engine/enginetest) on both engines, both isolation modes, and the engines' other e2e tests (snapshots, resume, reap; internal/hygiene checks the pattern takes them all).
	$(GO) test -count=1 -p 1 -tags e2e -timeout 20m -run 'TestSandbox|TestSnapshot|TestResume|TestReap' -v ./engine/oci/ ./engine/docker/ > sandboxes-e2e.log 2>&1 || { grep -B2 -A20 -- '--- FAIL' sandboxes-e2e.log | head -80; exit 1; }; grep -E '^(ok|FAIL)' sandboxes-e2e.log
	@# A sandbox's egress network: its two namespaces and their pair, from the sandbox's side; and the e2e tests' stand-in internet. One package at a time: each checks that the host's interfaces are as before, and the other adds one.
	$(GO) test -count=1 -p 1 -tags e2e -timeout 5m ./internal/netns/ ./internal/netnstest/
	@# airlock serve end to end, once, on one pair (oci, gvisor), with a 50-run load test.
	AIRLOCK_E2E_ENGINE=oci AIRLOCK_E2E_ISOLATION=gvisor $(GO) test -count=1 -tags e2e -timeout 15m -skip TestServeSoak -v ./e2e/serve/ > serve-e2e.log 2>&1 || { grep -B2 -A20 -- '--- FAIL' serve-e2e.log | head -80; exit 1; }; grep -E '^(ok|FAIL)|runs at concurrency' serve-e2e.log
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
	@# Kubernetes: the control plane from source, then two airlock nodes in it.
	@$(MAKE) --no-print-directory test-kube

.PHONY: test-host
test-host: setup ## Set up, then vet and every fuzz target briefly (from its committed corpus on)
	$(GO) vet ./...
	@$(MAKE) --no-print-directory fuzz-ci

MCP_CLIENT := mcpserver/testdata/client

.PHONY: test-mcp
test-mcp: build ## The MCP tools through the official SDKs: Go's client over streamable HTTP, npm's over stdio (airlock mcp)
	$(GO) test -count=1 -tags e2e -timeout 5m -run 'TestHTTPTransport' ./mcpserver/
	cd $(MCP_CLIENT) && npm ci --no-audit --no-fund --loglevel=error && AIRLOCK_BIN=$(CURDIR)/bin/airlock AIRLOCK_ROOT=$(AIRLOCK_ROOT) npm test

.PHONY: test-sdk
test-sdk: ## Test the JS, deepagents and Python clients against a live airlock serve (npm ci from the lockfiles)
	GO=$(GO) ./sdk/test.sh

# A Kubernetes control plane for tests, built from the modules pinned in
# tools/kube (cached under $(AIRLOCK_ROOT)/kube/bin by go.sum hash) and run
# on 127.0.0.1 only. `make test` runs test-kube: cold, the build takes ~12 min.
KUBE := cd tools/kube && GO=$(GO) $(GO) run ./cmd/kube

.PHONY: kube-build
kube-build: ## Build the control-plane binaries kube-up starts (cached by go.sum hash under airlock's root)
	@$(KUBE) build

.PHONY: kube-up
kube-up: ## Build (cached) and start etcd, the apiserver, controller manager, scheduler and agent-sandbox on 127.0.0.1; prints export KUBECONFIG=...
	@$(KUBE) up

.PHONY: kube-down
kube-down: ## Stop the kube-up control plane and remove its state (the built binaries stay)
	@$(KUBE) down

.PHONY: kube-clean
kube-clean: ## kube-down, then remove the built control-plane binaries too
	@$(KUBE) clean

.PHONY: test-kube
test-kube: build ## kube-up's promises (loopback only, types validated, kube-down leaves nothing), then two airlock nodes running a rendered warm pool and refusing what they cannot honour
	cd tools/kube && AIRLOCK_BIN=$(CURDIR)/bin/airlock GO=$(GO) $(GO) test -count=1 -tags e2e -timeout 60m -v ./cluster/ > $(CURDIR)/kube-up-e2e.log 2>&1 || { tail -60 $(CURDIR)/kube-up-e2e.log; exit 1; }; grep -E '^(ok|FAIL|--- )' $(CURDIR)/kube-up-e2e.log
	$(GO) test -count=1 -tags e2e -timeout 30m -v ./e2e/kube/ > kube-e2e.log 2>&1 || { grep -B2 -A40 -- '--- FAIL' kube-e2e.log | head -120; exit 1; }; grep -E '^(ok|FAIL|--- )' kube-e2e.log

.PHONY: unit
unit: ## Run the unit tests only (no daemon; as non-root, the tests that need root skip and say why)
	$(GO) test ./...

# Every fuzz target, as package:Target; `make fuzz` and `make fuzz-ci` run
# them all. internal/hygiene's test fails when a func Fuzz in the tree is
# missing here (or one listed here is gone), and when one has no committed
# corpus under its package's testdata/fuzz/<Target>/.
FUZZ_TARGETS := \
	artifacts:FuzzCheckName \
	egress:FuzzHandle \
	egress:FuzzParseCredential \
	egress:FuzzParseRule \
	images:FuzzOpenLayout \
	images:FuzzParseRef \
	internal/agent:FuzzReader \
	internal/termsafe:FuzzWriter \
	mcpserver:FuzzToolArgs \
	runner:FuzzParseJobs \
	seccomp:FuzzParseCustom \
	server:FuzzExecRequest \
	server:FuzzRunCode \
	server:FuzzRunRequest \
	server:FuzzSandboxRequest \
	server:FuzzWSFrames \
	server:FuzzWSMessages \
	store:FuzzLayerCheck \
	store:FuzzStoreIndex \
	store:FuzzUnpackLayer \
	templates:FuzzTemplateFile \
	units:FuzzParseBytes \
	units:FuzzParseCPUs \
	units:FuzzParseDuration

FUZZ_TIME ?= 30s
FUZZ_CI_TIME ?= 3s
# One worker: the machine's cores are shared. New inputs are kept as found
# (minimizing each costs seconds); a crash is still minimized a little.
FUZZ_FLAGS ?= -parallel 1 -fuzzminimizetime 10x

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZ_TIME (30s); fuzz.log has the output
	@$(MAKE) --no-print-directory fuzz-run FUZZ_RUN_TIME=$(FUZZ_TIME)

.PHONY: fuzz-ci
fuzz-ci: ## Run each fuzz target briefly (FUZZ_CI_TIME, 3s), for CI
	@$(MAKE) --no-print-directory fuzz-run FUZZ_RUN_TIME=$(FUZZ_CI_TIME)

# A bare "context deadline exceeded" with no failing input written is Go's
# fuzzing coordinator racing its own -fuzztime deadline (go.dev/issue/75804,
# fixed in Go 1.27), not a finding: it is reported, and does not fail the run.
.PHONY: fuzz-run
fuzz-run:
	$(GO) test -count=1 -run TestFuzzTargetsListed ./internal/hygiene/
	@: > fuzz.log; failed=""; start=$$SECONDS; one=$$(mktemp); trap 'rm -f $$one' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZ_RUN_TIME) $(FUZZ_FLAGS) ./$$pkg/ > $$one 2>&1; rc=$$?; \
		{ echo "== $$t"; cat $$one; } >> fuzz.log; \
		last=$$(grep -a 'fuzz: elapsed' $$one | tail -1); \
		if [ $$rc = 0 ]; then \
			printf '%-32s %s\n' "$$t" "$$last"; \
		elif grep -q 'context deadline exceeded' $$one && ! grep -qE 'Failing input written|failure while testing seed corpus|panic:' $$one; then \
			printf '%-32s %s (ended by the go.dev/issue/75804 deadline race, no finding)\n' "$$t" "$$last"; \
		else \
			printf '%-32s FAILED\n' "$$t"; grep -aA15 -- '--- FAIL' $$one | head -30; failed="$$failed $$t"; \
		fi; \
	done; \
	echo "fuzzing took $$((SECONDS - start))s"; \
	if [ -n "$$failed" ]; then echo "failed:$$failed (fuzz.log has the output; a failing input is written to <package>/testdata/fuzz/<Target>/)"; exit 1; fi

.PHONY: bench
bench: setup ## airlock beside docker run: cold start, first byte, burst, flood, copy-out, batch
	$(GO) run ./bench/all

.PHONY: bench-start
bench-start: setup ## Start-up latency: oci and docker engines beside bare runsc and docker run (30 runs each)
	$(GO) run ./bench/start -n 30

.PHONY: bench-session
bench-session: setup ## A live sandbox: exec beside bare runsc exec and docker exec; cp beside docker cp
	$(GO) run ./bench/session

.PHONY: bench-pause
bench-pause: setup ## Pause and resume of a sandbox holding a 100 MiB Python heap (Go API and CLI)
	$(GO) run ./bench/pause

.PHONY: bench-snapshot
bench-snapshot: setup ## A numpy-ready Python sandbox restored from a template's snapshot beside booted and imported; /run_code from run-code pools beside cold; interleaved
	$(GO) run ./bench/snapshot

.PHONY: bench-pool
bench-pool: setup ## Warm pools: pooled run beside cold API, airlock run and docker run; 60s sustained rate; batch --warm 4
	$(GO) run ./bench/pool -n 30

.PHONY: bench-server
bench-server: setup ## airlock serve beside the CLI: run and exec p50/p99 (30 each, interleaved)
	$(GO) run ./bench/server -n 30

.PHONY: bench-kube
bench-kube: ## Kubernetes: claim to first exec through airlock nodes beside a local warm pool; one-shot pods per second on one node and two
	$(GO) test -count=1 -tags e2e -run '^$$' -bench Kube -benchtime=1x -timeout 60m ./e2e/kube/

.PHONY: bench-egress
bench-egress: setup ## The egress proxy beside direct connections, on loopback, in a sandbox's namespaces and in real sandboxes: throughput, per-request cost
	$(GO) run ./bench/egress -n 20

.PHONY: load-server
load-server: setup ## airlock serve under load: 1,000 one-shot runs at concurrency 8, p50/p99, leaks, RSS, goroutines
	AIRLOCK_LOAD_RUNS=1000 $(GO) test -count=1 -tags e2e -timeout 30m -run TestServeLoad -v ./e2e/serve/

SOAK_OPS ?= 10000

.PHONY: soak
soak: setup ## airlock serve soaked: 10,000 mixed operations at concurrency 4, fails unless flat; then 500 one-shot runs on each engine and isolation pair, nothing leaked
	AIRLOCK_SOAK_OPS=$(SOAK_OPS) AIRLOCK_E2E_ENGINE=oci AIRLOCK_E2E_ISOLATION=gvisor $(GO) test -count=1 -tags e2e -timeout 180m -run TestServeSoak -v ./e2e/serve/ 2>&1 | tee soak.log; exit $${PIPESTATUS[0]}
	@for pair in "docker gvisor" "oci gvisor" "docker seccomp" "oci seccomp"; do \
		set -- $$pair; \
		AIRLOCK_SOAK_RUNS=500 AIRLOCK_E2E_ENGINE=$$1 AIRLOCK_E2E_ISOLATION=$$2 $(GO) test -count=1 -tags e2e -timeout 30m -run TestSoakNoLeaks -v ./e2e/ 2>&1 | tee -a soak.log | grep -E '^(---|ok|FAIL)|runs in'; \
		[ $${PIPESTATUS[0]} = 0 ] || exit 1; \
	done

.PHONY: bench-artifacts
bench-artifacts: ## Artifact copy-out throughput beside `cp -r` of the same tree
	$(GO) test -run XXX -bench CopyOut -benchtime 5x ./artifacts/

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/ ./e2e/bundle/ ./e2e/serve/ ./e2e/kube/
	cd tools/kube && $(GO) vet ./... && $(GO) vet -tags e2e ./cluster/
	cd tools/runsc && CGO_ENABLED=0 $(GO) vet ./precompile/

.PHONY: clean
clean: ## Remove build outputs
	rm -rf bin dist e2e.log sandboxes-e2e.log serve-e2e.log soak-e2e.log soak.log fuzz.log
