# upgrade-repo: the developer interface. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
BIN       ?= bin
BINARY    := $(BIN)/upgrade-repo
PKGS      ?= ./...
# Tool versions are pinned here; tools install from the Go module proxy into $(BIN).
GOLANGCI_VERSION ?= v2.6.2
TESTFLAGS ?=
FUZZTIME  ?= 10m
# Where `make run` keeps its demo release ISO.
DEMO_ISO  ?= .cache/demo/release.iso
LISTEN    ?= 127.0.0.1:8080
IMAGE     ?= upgrade-repo:dev
IMAGE_KUBEADM ?= upgrade-repo-kubeadm:dev
# Where `make release-kubeadm` writes the release ISO of a kubeadm cluster.
OUT       ?= .cache/kubeadm-release

export CGO_ENABLED ?= 0

##@ General

.PHONY: help
help: ## List the targets.
	@if [ -t 1 ]; then on=$$'\033[36m' off=$$'\033[0m'; else on= off=; fi; \
	awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
	  /^[a-zA-Z0-9_.-]+:.*?##/ { printf "  %s%-18s%s %s\n", on, $$1, off, $$2 } \
	  /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install the system packages tests and benchmarks use (xorriso, containerd, nginx, zstd).
	@bash hack/deps.sh

##@ Build

.PHONY: build
build: ## Build the static upgrade-repo binary and its lean upgrade-repo-serve into bin/.
	$(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/ ./cmd/upgrade-repo ./cmd/upgrade-repo-serve

.PHONY: run
run: build ## Build a demo release ISO (once) and serve it on 127.0.0.1:8080 (installs xorriso if missing).
	@bash hack/deps.sh xorriso
	@bash hack/run.sh $(BINARY) $(DEMO_ISO) $(LISTEN)

.PHONY: generate
generate: ## Regenerate deepcopy, CRDs and RBAC (controller-gen) and the chart README.
	@bash hack/generate.sh

.PHONY: image
image: ## Build the container image FROM scratch (needs a docker engine).
	@bash hack/image.sh $(IMAGE)

.PHONY: image-kubeadm
image-kubeadm: ## Build the kubeadm upgrade image FROM scratch (Dockerfile.kubeadm; IMAGE_KUBEADM).
	@DOCKERFILE=Dockerfile.kubeadm bash hack/image.sh $(IMAGE_KUBEADM)

.PHONY: dist
dist: ## The air-gapped bundle dist/upgrade-repo-VERSION-linux-amd64.tar.gz: CLI, chart, manifests, image archives (docker), SHA256SUMS, INSTALL.md.
	@bash hack/dist.sh

.PHONY: release-kubeadm
release-kubeadm: build ## Pack a kubeadm cluster's release ISO into OUT (K8S_WORK, or IMAGES and BIN_DIR).
	@UPGRADE_REPO=$(BINARY) bash hack/kubeadm-release.sh $(OUT)

##@ Test

.PHONY: test
test: deps ## Run every unit and integration test (real xorriso, containerd, memberlist), then the checks; ends with a summary.
	@GO=$(GO) bash hack/test.sh $(TESTFLAGS) -timeout 15m $(PKGS)

.PHONY: test-long
test-long: deps ## Also run the slow tests (a file over 4 GiB inside an ISO).
	UPGRADE_REPO_LONG=1 $(GO) test $(TESTFLAGS) -timeout 60m $(PKGS)

.PHONY: lint
lint: ## gofmt, go vet and golangci-lint.
	@bash hack/lint.sh $(GOLANGCI_VERSION)

.PHONY: verify
verify: ## Check generated files are up to date and the chart lints and renders.
	@bash hack/verify.sh

.PHONY: fuzz
fuzz: deps ## Fuzz the ISO reader for FUZZTIME (default 10m).
	$(GO) test ./iso -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 10x

.PHONY: fuzz-serve
fuzz-serve: ## Fuzz the serve fast path against net/http (same bytes back) for FUZZTIME.
	$(GO) test ./repo -run '^$$' -fuzz '^FuzzFastPathAnswersAsNetHTTP$$' -fuzztime $(FUZZTIME)

.PHONY: fuzz-apply
fuzz-apply: ## Fuzz the layer applier that writes large files ahead against containerd's, for FUZZTIME (on /dev/shm).
	TMPDIR=/dev/shm $(GO) test ./preload/containerd -run '^$$' -fuzz '^FuzzApplyAhead$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 10x

.PHONY: fuzz-import
fuzz-import: ## Fuzz the image archive importer for FUZZTIME (its stores on /dev/shm: each run creates files).
	TMPDIR=/dev/shm $(GO) test ./preload/containerd -run '^$$' -fuzz '^FuzzImportIndex$$' -fuzztime $(FUZZTIME)

.PHONY: e2e
e2e: ## Run every e2e test on a kind cluster of E2E_FORMATION (four; KIND_NODE_IMAGE picks the node image).
	@bash hack/e2e.sh

.PHONY: e2e-matrix
e2e-matrix: ## Run TestUpgrade in every formation (single two three witness four), each on a fresh kind cluster.
	@bash hack/e2e-matrix.sh

##@ Benchmarks

.PHONY: bench-iso
bench-iso: deps ## Benchmark opening and reading ISO images.
	$(GO) test ./iso -run '^$$' -bench . -benchmem -count 1

.PHONY: bench-serve
bench-serve: build deps ## upgrade-repo against nginx: throughput, requests/s, CPU, RSS.
	@bash hack/bench-serve.sh

.PHONY: bench-preload
bench-preload: build deps ## upgrade-repo preload against `zstdcat | ctr images import`.
	@bash hack/bench-preload.sh

.PHONY: bench-kind-preload
bench-kind-preload: build deps ## The v1.34.4 release's preload inside a kind node (v1.33.13) against `zstdcat | ctr images import` and the floor (BENCH_ROUNDS).
	@bash hack/bench-kind-preload.sh

.PHONY: bench-nodes
bench-nodes: ## The sequencer's node phase over 100 and 1,000 kwok nodes (SIZES): wall time against the ideal, CPU, peak RSS, API requests per node, its time per node.
	@GO=$(GO) bash hack/bench-nodes.sh

.PHONY: bench-ha
bench-ha: build ## Formation kubeadm-ha upgraded by hand, then by an UpgradePlan through its faults (kind; the v1.33.13 node image).
	@bash hack/bench-ha.sh

.PHONY: bench-distribute
bench-distribute: build deps ## Agents sharing an ISO against lone downloads (BENCH_NODES, BENCH_ISO_SIZE).
	@bash hack/bench-distribute.sh

.PHONY: bench-acquire
bench-acquire: build deps ## serve --iso-url against curl + sha512sum: download, restart, resume (BENCH_ISO_SIZE).
	@bash hack/bench-acquire.sh

.PHONY: bench-remote
bench-remote: build deps ## A release known from its ISO's URL (ranges) against downloading it (BENCH_ISO_SIZE, 6GiB).
	@bash hack/bench-remote.sh

.PHONY: bench-mirror
bench-mirror: build deps ## A release image pulled through the node's mirror from a peer against `zstdcat | ctr images import` (BENCH_IMAGE_MB, 1024).
	@bash hack/bench-mirror.sh

.PHONY: bench-directory
bench-directory: ## The gossip directory of 100 and 1,000 simulated members: state, deltas, convergence.
	$(GO) test ./peer/memberlist -run '^$$' -bench DirectoryScale -benchtime 1x -timeout 30m

##@ Housekeeping

.PHONY: clean
clean: ## Remove build output and the demo ISO.
	rm -rf $(BIN) .cache
