# gantry — one binary, three services. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules --warn-undefined-variables

# Tool versions, pinned. protoc-gen-go must match google.golang.org/protobuf in proto/go.mod.
BUF_VERSION                 := v1.75.0
PROTOC_GEN_GO_VERSION       := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION  := v1.6.2
GRPC_GATEWAY_VERSION        := v2.32.0
STATICCHECK_VERSION         := v0.8.2
# promtool (deploy/prometheus's rule tests) is Debian's: scripts/install-promtool.sh unpacks it from
# the prometheus package (bookworm: 2.42) in seconds, where go install compiled all of Prometheus
# (25 min on a fresh 2-core machine). The rules and their tests are kept valid for this series.
PROMTOOL_SERIES             := 2.42
# The google/api protos ship in the grpc-gateway v1 module (v2 no longer carries them); the OpenAPI
# options come from the v2 module at GRPC_GATEWAY_VERSION.
GOOGLEAPIS_MODULE           := github.com/grpc-ecosystem/grpc-gateway@v1.16.0

TMP      := $(CURDIR)/.tmp
TOOLBIN  := $(TMP)/bin
BIN      := $(CURDIR)/bin
export GOBIN := $(TOOLBIN)
export PATH  := $(TOOLBIN):$(PATH)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/gantry-dev/gantry/pkg/buildinfo.Version=$(VERSION) -X github.com/gantry-dev/gantry/pkg/buildinfo.Commit=$(COMMIT)
MODULES := ./... ./proto/...
IMAGE   ?= gantry:dev
ETCD_IMAGE ?= gantry-etcd:dev
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

## ---- develop --------------------------------------------------------------

.PHONY: run
# make run opens the chat routes to local callers with the example Omnibot configuration (without a
# configuration, chat denies everything) and turns on the demo Slack workspace (used only while no bot
# has a Slack token). ARGS come later, so -chat-config=... or -chat-demo=false in ARGS wins. The binary
# is make build's (same flags, so one build cache and a stamped version), then exec'd: Ctrl-C reaches
# gantry alone and its clean exit is make's.
# The local CA also gives a service certificates for its own names (<service>.example.com,
# <service>.internal), as the certificate examples of docs/secrets.md show.
RUN_CHAT_CONFIG ?= deploy/chat.yaml
RUN_CA_DOMAIN_REGEX ?= (?P<service_name>[a-z0-9-]+)\.(example\.com|internal)
RUN_FLAGS := -chat-config=$(RUN_CHAT_CONFIG) -chat-demo
ARGS ?=
run docs-check: export ACM_PRIVATE_CA_DOMAIN_REGEX_DEVELOPMENT ?= $(RUN_CA_DOMAIN_REGEX)
# The example bot's signing secret, so Slack's requests can be tried locally with a signature made by
# hand (docs/chat-inbound.md); a real app's comes from its settings page.
RUN_SLACK_SIGNING_SECRET ?= demo-signing-secret
run docs-check: export CREDENTIALS_SLACK_SIGNING_SECRET_A00000001 ?= $(RUN_SLACK_SIGNING_SECRET)
run: build ## Run the whole stack on the embedded defaults (REST :8080, admin :9901; chat on a demo Slack workspace)
	exec $(BIN)/gantry $(RUN_FLAGS) $(ARGS)

.PHONY: build
build: ## Build the static gantry binary into bin/ (the first build compiles every dependency: minutes)
	@test -x $(BIN)/gantry || echo "building gantry: the first build compiles every dependency and takes a few minutes (later builds take seconds)"
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/gantry ./cmd/gantry

.PHONY: test
# TestLinearizable is make linearize's (CI runs it as a step of its own, without the race detector).
test: ## Run every test (unit, gateway, end to end) with the race detector
	go test -race -count=1 -timeout 20m -skip '^TestLinearizable$$' $(MODULES)

.PHONY: test-load
# The unit suite (every package but internal/e2e and internal/chaos) beside a CPU hog on every core,
# as CI's loaded machine runs it: a test that waits for an amount of wall time instead of an event
# fails here. CI runs it once; LOAD_COUNT=5 before landing a change to timing-sensitive code.
LOAD_COUNT ?= 1
test-load: ## Run the unit suite (-race) beside a CPU hog per core, LOAD_COUNT times each (default 1)
	COUNT='$(LOAD_COUNT)' scripts/test-load.sh

.PHONY: test-helm
# The Helm chart (deploy/helm/gantry) rendered with helm's own engine for its default values and every
# ci/*-values.yaml, each manifest decoded strictly into the k8s.io/api types. A module of its own
# (outside go.work, hence GOWORK=off), so helm's and Kubernetes' dependencies stay out of gantry's
# go.mod and make test; the first run compiles them (minutes), later runs take seconds.
CHARTCHECK := deploy/helm/chartcheck
test-helm: ## Render the Helm chart for every values file and decode each manifest strictly (k8s.io/api)
	cd $(CHARTCHECK) && GOWORK=off go vet ./... && GOWORK=off go test -count=1 ./...

.PHONY: test-kube
# The Helm chart and Kubernetes service-account tokens against a real kube-apiserver and etcd, both
# built from their Go modules (k8s.io/kubernetes, its staging modules replaced by the published
# k8s.io/* of the same release): every manifest of the defaults and each ci/*-values.yaml created
# with a server-side dry run in namespaces enforcing the restricted Pod Security Standard, and a
# gantry process authenticating tokens minted by the TokenRequest API (keys from a jwks_file and by
# OIDC discovery). A module of its own (deploy/helm/kubecheck, GOWORK=off). Not part of CI's default
# run: the first build of kube-apiserver takes 10-20 minutes on two cores (8 min of CPU; 20 min on a
# machine shared with other builds); later runs about 20 s.
KUBECHECK := deploy/helm/kubecheck
test-kube: ## Dry-run the Helm chart and verify service-account tokens against a real kube-apiserver (first run 10-20 min)
	cd $(KUBECHECK) && GOWORK=off go vet ./... && GOWORK=off go test -count=1 -timeout=30m ./...

.PHONY: test-short
test-short: ## Run the tests without the end-to-end suite
	go test -short -count=1 $(MODULES)

.PHONY: test-ui
# The web UI's browser tests alone (chromedp driving chromium; make test runs them too). Screenshots
# of the main pages land in UI_SCREENSHOTS, default a new temporary folder the tests name.
UI_SCREENSHOTS ?=
test-ui: ## Run only the web UI browser tests (chromium; screenshots into UI_SCREENSHOTS)
	GANTRY_UI_SCREENSHOTS=$(UI_SCREENSHOTS) go test -race -count=1 -run 'TestUI' ./internal/e2e

.PHONY: docs-check
# Every sh/bash/console block of README.md and docs/*.md, in order per file, against a fresh stack
# configured as make run's (RUN_FLAGS and its environment) on free ports (internal/docscheck: the
# rules, and how to mark a block that must not run).
# DOCS="docs/chat.md ..." checks only those files.
DOCS ?=
# It builds bin/gantry first: README.md's examples run make build, whose first build compiles every
# dependency (minutes on a fresh, loaded machine), and are then a cached rebuild.
docs-check: build ## Run every shell example of README.md and docs/ against a fresh stack; names the first failing line
	GANTRY_DOCS_CHECK=1 GANTRY_DOCS_CHECK_FILES='$(DOCS)' GANTRY_DOCS_CHECK_FLAGS='$(RUN_FLAGS)' go test -count=1 -timeout 30m -run '^TestDocs$$' ./internal/docscheck

## ---- reliability and security (see SECURITY.md) ---------------------------

FUZZTIME     ?= 30s
FUZZPARALLEL ?= 2
FUZZSKIP     ?=
CYCLES       ?= 25
DURATION     ?= 10m

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s); crashers land in testdata/fuzz/
	FUZZTIME=$(FUZZTIME) FUZZPARALLEL=$(FUZZPARALLEL) FUZZSKIP='$(FUZZSKIP)' scripts/fuzz.sh

.PHONY: chaos
chaos: ## SIGKILL gantry (bbolt), then gantry and etcd members (etcd), CYCLES times each (default 25), nothing acknowledged may be lost; freeze an etcd follower, then the leader, under load (recovery times); fill the disk
	GANTRY_CHAOS_CYCLES=$(CYCLES) go test -v -count=1 -timeout 30m -run '^(TestCrashDurability(Etcd)?|TestFrozenEtcdMember|TestFullDisk)$$' ./internal/chaos

.PHONY: soak
soak: ## Mixed load for DURATION (default 10m), sampling heap and goroutines; prints the table
	GANTRY_SOAK_DURATION=$(DURATION) go test -v -count=1 -timeout 0 -run '^TestSoak$$' ./internal/chaos

# make linearize checks the credential REST API for linearizability with porcupine (internal/linearize)
# on 3 etcd member processes, 2 secrets replicas and the gateway, under one fault per round, in turn:
# the etcd leader cut off from its peers, SIGSTOP of the leader, of a follower, SIGKILL of the
# leader, a follower cut off, SIGSTOP of a secrets replica, SIGKILL + restart of one (internal/chaos
# TestLinearizable). ROUNDS rounds (default all: each fault once; a number cycles through them) of
# DURATION load each (default 30s here, whatever soak's default; the fault holds the middle half). A
# history that fails its check is written as porcupine's HTML visualization into LINEARIZE_OUT. CI
# runs ROUNDS=1 (the leader cut off).
ROUNDS        ?= all
LINEARIZE_OUT ?= $(TMP)/linearize
LINEARIZE_DURATION = $(if $(filter file,$(origin DURATION)),30s,$(DURATION))
.PHONY: linearize
linearize: ## Linearizability check (porcupine) of the REST API under etcd and replica faults: ROUNDS rounds (default all: each fault once) of DURATION (default 30s)
	GANTRY_LINEARIZE_ROUNDS=$(ROUNDS) GANTRY_LINEARIZE_DURATION=$(LINEARIZE_DURATION) LINEARIZE_OUT='$(LINEARIZE_OUT)' go test -v -count=1 -timeout 60m -run '^TestLinearizable$$' ./internal/chaos

.PHONY: flake
# Every new concurrency or timing test goes through this before it lands (CONTRIBUTING.md).
PKG   ?=
RUN   ?=
COUNT ?= 50
flake: ## Run one test COUNT times (default 50, -race) beside a CPU hog on every core: make flake PKG=./services/chat RUN='^TestX$$'
	PKG='$(PKG)' RUN='$(RUN)' COUNT='$(COUNT)' scripts/flake.sh

# make bench starts gantry (make build's binary) as a process of its own on free loopback ports, a bare
# net/http server process returning the same bytes as each read (this machine's limit), measures the
# raw fdatasync rate, and drives every workload from a separate process (scripts/bench): one table,
# each figure with its settings (write limit on/off, access log, audit) and its share of its limit.
# BENCHTIME is the load time per workload (5s), or short: the quick form (about 1 s each, ~30 s in all).
BENCHTIME ?= 5s
.PHONY: bench
bench: build ## Benchmark table from a separate process: reads, writes (write limit on and off), chat, and this machine's limits
	go run ./scripts/bench -gantry $(BIN)/gantry $(if $(filter short,$(BENCHTIME)),-short,-duration $(BENCHTIME))

# make bench-flood is the large-body attack (docs/reliability.md) from processes of their own:
# gantry, an attacking process (64 connections, each offering a 900 KB body once a second, with no
# credential or a forged kmsauth token, bearer token or session cookie) and a reader and a small
# writer probing in windows with and without it. It prints each probe's p99 with the attack over its p99 without.
.PHONY: bench-flood
bench-flood: build ## Reads and small writes under a flood of 900 KB bodies with forged credentials (separate processes)
	go run ./scripts/bench flood -gantry $(BIN)/gantry $(if $(filter short,$(BENCHTIME)),-short)

# make bench-peer runs the read and write workloads against gantry and OpenBao in turn, 3 rounds
# interleaved, and prints the ratios. BAO is an OpenBao binary (docs/performance.md, "Side by side
# with OpenBao", says how to build one); without it the target says so and succeeds. STORE=etcd is
# the scaled-out deployment: a 3-member etcd cluster (make build-etcd's bin/etcd), two secrets
# replicas and a gateway, each a process of its own, against OpenBao's 3-node raft cluster with a
# file audit device and without.
BAO ?=
STORE ?= bolt
.PHONY: bench-peer
bench-peer: ## gantry against OpenBao side by side: BAO=/path/to/bao make bench-peer [STORE=etcd] (skipped without BAO)
	$(if $(BAO),$(MAKE) --no-print-directory build $(if $(filter etcd,$(STORE)),build-etcd) &&) go run ./scripts/bench peer -gantry $(BIN)/gantry -bao '$(BAO)' -store $(STORE) -etcd $(BIN)/etcd

# make bench-inproc is the older in-process table: go test -bench with 16 clients inside the measured
# process (./internal/e2e), printed by scripts/benchtable. It FLATTERS: the load generator shares the
# process and its CPU with gantry and caps the bare limit it is compared with (reads at 31% of the limit
# there, 18% measured from outside). Useful for allocations per request and profiles.
BENCH     ?= ^Benchmark(Limit|Reads|SecretsWrites|Writes|FsyncLimit|BoltCommitLimit|ChatActionPassThrough)
INPROC_BENCHTIME ?= 5000x
.PHONY: bench-inproc
bench-inproc: ## In-process benchmark table (flattering: the generator shares gantry's process); allocations and profiles
	go test -run '^$$' -bench '$(BENCH)' -benchtime=$(INPROC_BENCHTIME) -benchmem -timeout 30m ./internal/e2e/ | go run ./scripts/benchtable

.PHONY: bench-all
bench-all: ## Run every benchmark of both modules (figures only; never fails on a number)
	go test -run '^$$' -bench . -benchmem $(MODULES)

.PHONY: vet
vet: ## go vet both modules
	go vet $(MODULES)

.PHONY: lint
lint: vet $(TOOLBIN)/staticcheck ## gofmt, import groups, go vet and staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$unformatted" || { echo "gofmt needed:"; echo "$$unformatted"; exit 1; }
	@go run ./scripts/importorder $$(git ls-files '*.go')
	@late=$$(git grep -l 'zaptest\.NewLogger' -- '*.go' ':!pkg/logging/logtest' || true); test -z "$$late" || { echo "use logtest.New(t), not zaptest.NewLogger (a late log line panics the test binary):"; echo "$$late"; exit 1; }
	staticcheck $(MODULES)

.PHONY: tidy
tidy: ## go mod tidy in every module (the root, proto, and the chart check)
	go mod tidy
	cd proto && go mod tidy
	cd $(CHARTCHECK) && GOWORK=off go mod tidy

.PHONY: check-tidy
check-tidy: tidy ## Fail when go.mod or go.sum are not tidy
	git diff --exit-code -- go.mod go.sum proto/go.mod proto/go.sum $(CHARTCHECK)/go.mod $(CHARTCHECK)/go.sum

.PHONY: check-secrets
check-secrets: ## Fail when a tracked file outside testdata/ is a private key, keyring, session key or database
	scripts/check-tracked-secrets.sh

.PHONY: check-pins
check-pins: ## Fail when github.com/prometheus/common drifts past v0.72.x (v0.73+ needs a module the proxy refuses)
	@v=$$(go list -m -f '{{.Version}}' github.com/prometheus/common); case "$$v" in v0.72.*) ;; *) echo "github.com/prometheus/common is $$v; keep it at v0.72.1"; exit 1;; esac

## ---- API contract -----------------------------------------------------------

.PHONY: tools
tools: $(TOOLBIN)/buf $(TOOLBIN)/protoc-gen-go $(TOOLBIN)/protoc-gen-go-grpc $(TOOLBIN)/protoc-gen-grpc-gateway $(TOOLBIN)/protoc-gen-openapiv2 $(TOOLBIN)/staticcheck $(TOOLBIN)/promtool ## Install the pinned tools into .tmp/bin (promtool from Debian's prometheus package)

$(TOOLBIN)/buf:
	go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(TOOLBIN)/protoc-gen-go:
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLBIN)/protoc-gen-go-grpc:
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(TOOLBIN)/protoc-gen-grpc-gateway $(TOOLBIN)/protoc-gen-openapiv2 &:
	go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION) github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
$(TOOLBIN)/staticcheck:
	go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(TOOLBIN)/promtool:
	PROMTOOL_SERIES=$(PROMTOOL_SERIES) scripts/install-promtool.sh $(TOOLBIN)

.PHONY: prometheus-rules
prometheus-rules: $(TOOLBIN)/promtool ## Check deploy/prometheus's alerting rules and run their unit tests (promtool test rules)
	promtool check rules deploy/prometheus/gantry-rules.yml
	cd deploy/prometheus && promtool test rules gantry-rules.test.yml

.PHONY: googleapis
googleapis: ## Copy the google/api protos and protoc-gen-openapiv2's options from the Go module cache into third_party/
	@dir=$$(go mod download -json $(GOOGLEAPIS_MODULE) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	mkdir -p third_party/googleapis/google/api; \
	for f in annotations http httpbody; do install -m 0644 "$$dir/third_party/googleapis/google/api/$$f.proto" third_party/googleapis/google/api/; done
	@dir=$$(cd proto && go mod download -json github.com/grpc-ecosystem/grpc-gateway/v2@$(GRPC_GATEWAY_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	mkdir -p third_party/googleapis/protoc-gen-openapiv2/options; \
	for f in annotations openapiv2; do install -m 0644 "$$dir/protoc-gen-openapiv2/options/$$f.proto" third_party/googleapis/protoc-gen-openapiv2/options/; done

.PHONY: buf-lint
buf-lint: googleapis $(TOOLBIN)/buf ## buf lint (STANDARD + COMMENTS)
	buf lint

# The API must not break against the previous main: on main itself (CI clones it with its history)
# that is main~1, on another branch the commit it forked from main. BREAKING_AGAINST=<ref> overrides.
# The against input is unpacked with the third_party protos beside it, as buf.yaml's workspace
# expects: buf's own .git#ref=... input would lack the ignored third_party/ folder.
BREAKING_AGAINST ?=
.PHONY: buf-breaking
buf-breaking: googleapis $(TOOLBIN)/buf ## Fail on a breaking API change against the previous main (or BREAKING_AGAINST=<ref>)
	@ref='$(BREAKING_AGAINST)'; \
	if [ -z "$$ref" ]; then \
	  main=main; git rev-parse -q --verify main >/dev/null || main=origin/main; \
	  if [ "$$(git rev-parse HEAD)" = "$$(git rev-parse $$main)" ]; then ref=$$main~1; else ref=$$(git merge-base HEAD $$main); fi; \
	fi; \
	against=$$(mktemp -d); trap 'rm -rf "$$against"' EXIT; \
	git archive --format=tar "$$ref" buf.yaml proto | tar -x -C "$$against"; \
	cp -R third_party "$$against"/; \
	echo "buf breaking --against $$ref"; \
	buf breaking --against "$$against"

.PHONY: generate
generate: googleapis tools ## Regenerate Go, gRPC, gateway and OpenAPI code from proto/ (offline)
	buf lint
	find proto -name '*.pb.go' -o -name '*.pb.gw.go' -o -name '*.swagger.json' | xargs -r rm -f
	buf generate
	@# proto/secretsstore is the stored form of records, served by nothing: no API document for it.
	rm -f proto/secretsstore/v1/*.swagger.json
	@# Lint ignore directives are for buf, not for readers of the API documents.
	find proto -name '*.swagger.json' -exec sed -i 's/\\nbuf:lint:ignore [A-Z_]*//g' {} +

.PHONY: check-generate
check-generate: generate ## Fail when the committed generated code differs from a fresh generation
	@git add -N proto >/dev/null 2>&1 || true
	git diff --exit-code -- proto
	@test -z "$$(git status --porcelain -- proto)" || { git status --porcelain -- proto; echo "untracked generated files"; exit 1; }

.PHONY: docs-config
docs-config: ## Regenerate the settings reference in docs/configuration.md from the settings table
	go run ./scripts/gendocs

.PHONY: check-docs-config
check-docs-config: ## Fail when docs/configuration.md differs from the settings table
	go run ./scripts/gendocs -check

## ---- containers ---------------------------------------------------------------

# The mount points of the internal TLS volumes in the image (docker-compose's tls-init writes the CA
# into ca and one leaf into each other folder): a fresh named volume takes the ownership of its mount
# point, so they must exist, owned by the image's user.
PKI_FOLDERS := ca gateway secrets secrets-a secrets-b chat client

.PHONY: image
image: build ## Build the FROM scratch image from bin/gantry (no base image is pulled)
	rm -rf $(BIN)/rootfs $(BIN)/rootfs-data $(BIN)/rootfs-datadir $(BIN)/rootfs-pki
	mkdir -p $(BIN)/rootfs/etc/ssl/certs $(BIN)/rootfs-data $(BIN)/rootfs-datadir/data
	chmod 0700 $(BIN)/rootfs-datadir/data
	mkdir -p $(addprefix $(BIN)/rootfs-pki/,$(PKI_FOLDERS))
	cp /etc/ssl/certs/ca-certificates.crt $(BIN)/rootfs/etc/ssl/certs/
	printf 'root:x:0:0:root:/:/sbin/nologin\ngantry:x:65532:65532:gantry:/data:/sbin/nologin\n' > $(BIN)/rootfs/etc/passwd
	printf 'root:x:0:\ngantry:x:65532:\n' > $(BIN)/rootfs/etc/group
	docker build -t $(IMAGE) .

.PHONY: build-etcd
build-etcd: ## Build the static etcd server (cmd/etcd, from the etcd Go module) into bin/
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o $(BIN)/etcd ./cmd/etcd

.PHONY: image-etcd
image-etcd: image build-etcd ## Build the FROM scratch etcd image (gantry-etcd:dev) for docker-compose.etcd.yml
	docker build -f Dockerfile.etcd -t $(ETCD_IMAGE) .

.PHONY: up-etcd
up-etcd: image-etcd ## Start the scaled-out stack: 3 etcd members, 2 secrets replicas, chat, gateway (REST :28080)
	$(COMPOSE) -f docker-compose.etcd.yml up -d

.PHONY: down-etcd
down-etcd: ## Stop the scaled-out stack and delete its volumes
	$(COMPOSE) -f docker-compose.etcd.yml down -v

.PHONY: up
up: image ## Start gateway, secrets and chat as separate containers
	$(COMPOSE) up -d

.PHONY: down
down: ## Stop the containers; the volumes (secrets, keyring, internal TLS) are kept
	$(COMPOSE) down

.PHONY: down-volumes
down-volumes: ## Stop the containers and DELETE their volumes: every secret, the keyring and the internal CA
	$(COMPOSE) down -v

.PHONY: clean
clean: ## Remove build outputs and the tool cache
	rm -rf $(BIN) $(TMP) third_party

.PHONY: smoke
smoke: image ## Docker smoke test: compose up, curl through the gateway, compose down
	scripts/compose-smoke.sh
