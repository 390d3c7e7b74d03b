# trainingjob-operator. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

# Compiles without the compiler's garbage collector until a process holds 2 GiB: a cold build ~24% faster on
# 2 cores (kube-apiserver 222 s against 291 s), each compile's memory bounded (docs/development.md). The hack/
# scripts build their tools the same way. Not for go test: the operator and control plane its tests start
# would inherit it.
GO_BUILD_ENV := GOGC=off GOMEMLIMIT=2GiB
GO_BUILD := $(GO_BUILD_ENV) CGO_ENABLED=0 go build -trimpath
CONTROLLER_GEN := $(GO_BUILD_ENV) go tool controller-gen
# Control-plane binaries for the integration tests, built once from pinned Go modules (hack/testbin.sh).
TESTBIN_COMPONENTS ?= etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
GO_TEST_FLAGS ?= -count=1
# The Helm chart (deploy/helm): the same objects as deploy/, checked by tests/integration/helm_test.go.
CHART := deploy/helm/trainingjob-operator

.PHONY: help
help: ## Show the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: generate
generate: ## Regenerate deepcopy, the CRD and RBAC from the Go markers.
	go generate ./crd/...
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./crd/...
	$(CONTROLLER_GEN) crd:allowDangerousTypes=true paths=./crd/... output:crd:dir=deploy/crd
	$(CONTROLLER_GEN) rbac:roleName=trainingjob-operator paths="./controllers/...;./metrics/..." output:rbac:dir=deploy/rbac
	@# The Helm chart installs the same generated CRD, RBAC rules, policy and monitoring objects as deploy/.
	cp deploy/crd/ml.example.com_trainingjobs.yaml $(CHART)/files/crd.yaml
	cp deploy/rbac/role.yaml deploy/policy/immutable-while-running.yaml deploy/policy/worker-pod.yaml deploy/policy/multikueue-managed-by.yaml deploy/monitoring/prometheusrule.yaml \
		deploy/monitoring/podmonitor.yaml deploy/monitoring/trainingjob-dashboard.json $(CHART)/files/

.PHONY: verify
verify: generate ## Fail when generated files drift, code is unformatted, vet or golangci-lint complain, or a binary or a file over 1 MB is tracked.
	@git diff --exit-code -- crd deploy/crd deploy/rbac $(CHART)/files || { echo "generated files are out of date: run make generate and commit"; exit 1; }
	@test -z "$$(git ls-files --others --exclude-standard -- crd deploy/crd deploy/rbac $(CHART)/files)" || { echo "untracked generated files: run make generate and commit"; exit 1; }
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt needed: $$out"; exit 1; }
	@go mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	go vet ./...
	go vet -tags frameworks ./tests/frameworks
	go vet -tags cluster ./tests/cluster/...
	hack/check-tracked-files.sh
	$(MAKE) --no-print-directory lint

.PHONY: lint
lint: ## Run golangci-lint (pinned, built once by hack/golangci-lint.sh; configuration .golangci.yml).
	"$$(hack/golangci-lint.sh)" run ./...

# Packages whose tests need no server; their few tests that start one skip under -short.
UNIT_PKGS = $$(go list ./... | grep -v -e /tests/integration -e /tests/e2e -e /tests/chaos -e /tests/images)

.PHONY: unit
unit: ## Run the unit tests only: no control plane, object store or framework (seconds once built).
	go test -short $(GO_TEST_FLAGS) $(UNIT_PKGS)

.PHONY: build
build: ## Build the manager, trainingjob-local, the kubectl plugin, the benchmarks and the example trainer into bin/.
	$(GO_BUILD) -o bin/ ./cmd/manager ./cmd/supervisor ./cmd/trainingjob-local ./cmd/kubectl-trainingjob ./examples/trainer
	$(GO_BUILD) -o bin/progress-bench ./tests/performance/progress
	$(GO_BUILD) -o bin/multikueue-bench ./tests/performance/multikueue
	$(GO_BUILD) -o bin/scale-bench ./tests/performance/scale
	$(GO_BUILD) -o bin/peer-bench ./tests/performance/peers

# NODES_RUNTIME=containerd runs the demo and make up on real nodes (kubelet, containerd, runc, cluster DNS;
# hack/node.sh installs and builds them once; root only) instead of process nodes.
NODES_RUNTIME ?= process
NODE_FLAGS = $(if $(filter containerd,$(NODES_RUNTIME)),--nodes-runtime containerd --node-assets "$$(hack/node.sh)" --runner-rootfs "$$(hack/rootfs.sh)")
# KUEUE=1 also runs the real Kueue manager (hack/kueue.sh builds it once), TrainingJob as its external framework.
KUEUE_FLAGS = $(if $(or $(KUEUE),$(MULTIKUEUE)),--kueue --kueue-assets "$$(hack/kueue.sh)") $(if $(MULTIKUEUE),--multikueue-workers $(MULTIKUEUE))

# demo builds only what it runs, the operator's binaries beside the control plane's (the first time, minutes of
# compiling each, and links that use one core); the control plane's build in a process group of its own, ended
# with the recipe.
.PHONY: demo
demo: ## Run examples/trainingjob-local.yaml to Completed on a local control plane and process node (NODES_RUNTIME=containerd: on real nodes).
	@mkdir -p bin
	set -m; hack/testbin.sh $(TESTBIN_COMPONENTS) >bin/.demo-assets & testbin=$$!; set +m; \
		trap 'kill -- -$$testbin 2>/dev/null || true' EXIT; \
		$(GO_BUILD) -o bin/ ./cmd/manager ./cmd/supervisor ./cmd/trainingjob-local ./examples/trainer; \
		wait $$testbin; trap - EXIT
	bin/trainingjob-local up --assets "$$(cat bin/.demo-assets)" --path bin $(NODE_FLAGS) \
		-f examples/trainingjob-local.yaml --exit-when-done
	@echo "--- rank 0 log (bin/trainingjob-local logs -n demo logistic-regression):"
	@bin/trainingjob-local logs -n demo logistic-regression

# make test runs the framework and real-node suites' short parts: what only they prove (each framework's own
# rendezvous and a user's own script on the real libraries; the example, a user's own script and a restart
# in place in real containers on real nodes). make test-frameworks and make test-cluster run them whole.
FRAMEWORKS_SHORT = ^(TestPyTorchDDP|TestXGBoost|TestMPI|TestDefaultRunner|TestOwnDDPScriptWithTqdm|TestOwnScriptPlainEpochs|TestOwnScriptExitCode)$$
CLUSTER_SHORT = ^(TestExampleOverClusterDNS|TestGangRestartInPlace|TestOwnScriptOnRealNodes)$$
MULTIKUEUE_SHORT = ^(TestDispatchedAndMirrored|TestDeleteRemovesTheCopy|TestForeignWorkloadIsNeverFinished)$$
MULTIKUEUE_RUN ?= .
FRAMEWORKS_RUN ?= .
CLUSTER_RUN ?= .
CLUSTER_PKGS ?= ./tests/cluster/...

.PHONY: test-frameworks
test-frameworks: ## Run the Python examples with real PyTorch (DDP, torchrun, resume) and XGBoost (Rabit) as TrainingJobs on the local stack; installs Debian's packages once (hack/frameworks.sh); make test runs its short part (FRAMEWORKS_SHORT).
	@mkdir -p bin
	FRAMEWORKS_PYTHON="$$(hack/frameworks.sh)" KUBEBUILDER_ASSETS="$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" VERSITYGW="$$(hack/objstore.sh)" \
		go test $(GO_TEST_FLAGS) -tags frameworks -timeout 20m -v -run '$(FRAMEWORKS_RUN)' ./tests/frameworks $(call logger-set,bin/test-frameworks.log)

.PHONY: test-cluster
test-cluster: ## Run tests/cluster (make test runs its short part, CLUSTER_SHORT): TrainingJobs in real containers on real nodes (kubelet, containerd, runc, cluster DNS, images built here), then the local stack's modes one after the other in one state directory (tests/cluster/modes; one package at a time); root only; hack/node.sh installs the parts once.
	@mkdir -p bin
	NODE_ASSETS="$$(hack/node.sh)" HELM="$$(hack/helm.sh)" RUNNER_ROOTFS="$$(hack/rootfs.sh)" KUBEBUILDER_ASSETS="$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" VERSITYGW="$$(hack/objstore.sh)" \
		go test $(GO_TEST_FLAGS) -p 1 -tags cluster -timeout 20m -v -run '$(CLUSTER_RUN)' $(CLUSTER_PKGS) $(call logger-set,bin/test-cluster.log)

.PHONY: test-multikueue
test-multikueue: ## Run tests/multikueue (make test runs its short part, MULTIKUEUE_SHORT): a manager and two worker clusters, each with the real Kueue manager and the operator; dispatch, status mirrored, one job per worker, deletion, a lost worker cluster resumed from S3.
	@mkdir -p bin
	KUBEBUILDER_ASSETS="$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" VERSITYGW="$$(hack/objstore.sh)" KUEUE_ASSETS="$$(hack/kueue.sh)" \
		go test $(GO_TEST_FLAGS) -tags multikueue -timeout 20m -v -run '$(MULTIKUEUE_RUN)' ./tests/multikueue $(call logger-set,bin/test-multikueue.log)

.PHONY: bench-multikueue
bench-multikueue: build ## Measure MultiKueue on the local stack (a manager, two workers): manager create → worker pods running, worker state → manager state, over 100 jobs.
	bin/multikueue-bench -assets "$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" -kueue "$$(hack/kueue.sh)" -bin bin -jobs 100 -out bin

.PHONY: bench-progress
bench-progress: build ## Measure how fast rank 0's progress reaches the gauges and the status, 100 and 1,000 jobs.
	bin/progress-bench -assets "$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" -manager bin/manager -jobs 100,1000

.PHONY: bench
bench: build ## Scale benchmark, quick (a few minutes): 1, 100 and 1,000 TrainingJobs, twice each; report and profiles in bin/scale-report/.
	bin/scale-bench -assets "$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" -manager bin/manager -jobs 1,100,1000 -repeats 2 -idle 10s -running-idle 35s -out bin/scale-report

.PHONY: bench-full
bench-full: build ## Scale benchmark, long: up to 10,000 TrainingJobs, twice each.
	bin/scale-bench -assets "$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" -manager bin/manager -jobs 1,100,1000,5000,10000 -repeats 2 -out bin/scale-report

.PHONY: bench-peers
bench-peers: build ## Beside the peers (Kubeflow Trainer v2.3 on JobSet v0.12, Training Operator v1.9.3, built by hack/peers.sh): 100 and 1,000 jobs of 2 workers each, at each one's published client rate and a tuned one; report in bin/peer-report/.
	bin/peer-bench -assets "$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" -manager bin/manager -peers "$$(hack/peers.sh)" -jobs 100,1000 -out bin/peer-report

.PHONY: bench-restart
bench-restart: build ## Gang restart at 8, 64 and 256 ranks split into its phases, beside a fresh start of the same size, with kube-controller-manager at its default client rate and at 200 QPS; report in bin/restart-report/.
	bin/peer-bench -assets "$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" -manager bin/manager -ranks 8,64,256 -kcm-qps 20,200 -repeats 2 -out bin/restart-report

.PHONY: bench-checkpoints
bench-checkpoints: ## Measure rotation of 10,000 checkpoints: plan alone, and a whole sync on a directory and on a real S3 server.
	VERSITYGW="$$(hack/objstore.sh)" go test ./checkpoint -run '^$$' -bench 'ScanAndPlan10000|Sync10000' -benchmem -count 3

.PHONY: test-goodput
test-goodput: build ## Run the goodput fault-injection run for 3 minutes (a kill of rank 1 every 30 s, one of them a hang): each category of status.goodput within 2 points of the test's own timeline, logged as a table; and the issue's 70 one-second epochs with two kills (in place, then a recreate) on the run's own clock: goodput within 2 points, each category within 1 s (make test runs 45 s and 30 epochs of them).
	KUBEBUILDER_ASSETS="$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" VERSITYGW="$$(hack/objstore.sh)" KUEUE_ASSETS="$$(hack/kueue.sh)" GOODPUT_SECONDS=$${GOODPUT_SECONDS:-180} \
		GOODPUT_EPOCHS=$${GOODPUT_EPOCHS:-70} go test -count=1 -v -timeout 30m -run '^(TestGoodputUnderFaults|TestGoodputOnTheRunsClock)$$' ./tests/e2e

.PHONY: bench-inputs
bench-inputs: ## Measure a 1 GiB dataset in the local S3 server fetched for two ranks: time to InputsReady, bytes read by the first and a restarted attempt (tests/e2e TestInputsFetchedOnce, logged).
	KUBEBUILDER_ASSETS="$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" VERSITYGW="$$(hack/objstore.sh)" KUEUE_ASSETS="$$(hack/kueue.sh)" INPUTS_BYTES=$${INPUTS_BYTES:-1073741824} \
		go test -count=1 -v -timeout 20m -run '^TestInputsFetchedOnce$$' ./tests/e2e

.PHONY: bench-search
bench-search: ## Measure the same 12-trial search with and without pruning on a local stack: worker-seconds, best loss, time to it (bin/search-bench.md).
	@mkdir -p bin
	$(GO_BUILD) -o bin/ ./cmd/manager ./cmd/supervisor ./cmd/trainingjob-local ./examples/trainer
	KUBEBUILDER_ASSETS="$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" PYTHONDONTWRITEBYTECODE=1 \
		"$$(hack/python.sh)" tests/performance/search/bench.py --report bin/search-bench.md

.PHONY: bench-supervisor
bench-supervisor: ## Measure the supervisor's cost: 1 GiB of output, millions of short lines and a tqdm bar redrawn 10,000 times a second, directly and through it; report in bin/supervisor-report.md.
	@mkdir -p bin
	$(GO_BUILD) -ldflags="-s -w" -o bin/supervisor-static ./cmd/supervisor
	go run ./tests/performance/supervisor -supervisor bin/supervisor-static -out bin/supervisor-report.md

.PHONY: up
up: build ## Start the local control plane, process node and operator and keep them running (Ctrl-C stops); KUEUE=1 adds Kueue; MULTIKUEUE=2 runs a MultiKueue manager and 2 worker clusters; LOG_LEVEL=1 logs each decision of the operator.
	bin/trainingjob-local up --assets "$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" --path bin $(NODE_FLAGS) $(KUEUE_FLAGS) $(if $(FILE),-f $(FILE)) $(if $(LOG_LEVEL),--log-level $(LOG_LEVEL))

.PHONY: chaos
chaos: ## The fault suite, long: the real operator SIGKILLed at random moments of 20 rounds of lifecycles and at each step; leader loss, API server restart and node loss 3 times each; prints the Reliability table (also in bin/chaos-report.md); CHAOS_SEED replays a run.
	mkdir -p bin
	KUBEBUILDER_ASSETS="$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" CHAOS_ROUNDS=$${CHAOS_ROUNDS:-20} CHAOS_KILLS=$${CHAOS_KILLS:-5} \
		CHAOS_REPEATS=$${CHAOS_REPEATS:-3} CHAOS_REPORT=$(CURDIR)/bin/chaos-report.md go test -count=1 -v -timeout 80m ./tests/chaos

.PHONY: testbin
testbin: ## Build the control-plane binaries for the tests (cached outside the repo).
	hack/testbin.sh $(TESTBIN_COMPONENTS)

# logger-set keeps a go test run's output in $(1) and fails when controller-runtime printed that its
# logger was never set: that stack trace lands in the middle of the tests' output (set the logger).
logger-set = 2>&1 | tee $(1); ! grep -n 'log.SetLogger(...) was never called' $(1)

.PHONY: test
test: ## Run the tests CI runs: unit, integration (real API server), e2e (local stack, the real Kueue manager), MultiKueue's short part (three clusters), chaos (one round), checkpoint stores (real S3 and GCS servers), the short parts of the real frameworks (PyTorch, XGBoost, MPI) and of real containers on real nodes (tests/cluster), and a short fuzzing run.
	hack/prepare.sh
	@mkdir -p bin
	KUBEBUILDER_ASSETS="$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" VERSITYGW="$$(hack/objstore.sh)" HELM="$$(hack/helm.sh)" PROMETHEUS="$$(hack/prometheus.sh)" \
		KUEUE_ASSETS="$$(hack/kueue.sh)" go test $(GO_TEST_FLAGS) -timeout 20m -parallel 6 ./... $(call logger-set,bin/test.log)
	python3 -m unittest discover -s runner/tests
	$(MAKE) --no-print-directory test-python
	$(MAKE) --no-print-directory test-frameworks FRAMEWORKS_RUN='$(FRAMEWORKS_SHORT)'
	$(MAKE) --no-print-directory test-cluster CLUSTER_RUN='$(CLUSTER_SHORT)' CLUSTER_PKGS=./tests/cluster
	$(MAKE) --no-print-directory test-multikueue MULTIKUEUE_RUN='$(MULTIKUEUE_SHORT)'
	$(MAKE) --no-print-directory fuzz FUZZTIME=2000x

# The Python SDK's tests start their own local stack (process nodes) from bin/; Debian's packages from hack/python.sh.
.PHONY: test-python
test-python: ## Run the Python SDK's tests (sdk/python, pytest) against a local stack: the client, and searches with Optuna.
	@mkdir -p bin
	$(GO_BUILD) -o bin/ ./cmd/manager ./cmd/supervisor ./cmd/trainingjob-local ./examples/trainer
	KUBEBUILDER_ASSETS="$$(hack/testbin.sh $(TESTBIN_COMPONENTS))" PYTHONDONTWRITEBYTECODE=1 \
		"$$(hack/python.sh)" -m pytest -q -p no:cacheprovider sdk/python/tests

# Fuzz targets (package:target); their seed corpora run with every go test, found inputs are kept in testdata/fuzz.
FUZZ_TARGETS := ./builders:FuzzParseStorageURI ./builders:FuzzJob ./internal/derive:FuzzParseSample \
	./checkpoint:FuzzDirStoreKey ./checkpoint:FuzzScan ./checkpoint:FuzzAgentResumeFrom ./internal/inputs:FuzzParse \
	./internal/supervisor/recognize:FuzzLine
FUZZTIME ?= 1m
# make test fuzzes a number of inputs (Nx), not a duration: with a duration, a loaded machine can spend it all
# gathering the baseline coverage, which Go reports as a failure ("context deadline exceeded").

.PHONY: fuzz
fuzz: ## Fuzz the builders, the progress parser, checkpoint keys and the agent's protocol, FUZZTIME each (default 1m).
	@for t in $(FUZZ_TARGETS); do echo "fuzz $${t#*:} ($${t%%:*}, $(FUZZTIME))"; \
		go test $${t%%:*} -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) >/tmp/fuzz-$$$$.log 2>&1 || { cat /tmp/fuzz-$$$$.log; exit 1; }; done

.PHONY: run
run: ## Run the operator against the cluster of the current kubeconfig.
	go run ./cmd/manager --metrics-bind-address=:8443 --health-probe-bind-address=:8081
