# Two commands for a newcomer: `make demo` and `make test`. Both build .venv from a clean clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: demo test test-slow lint bench image clean e2e-bin cluster cluster-down e2e e2e-podgroups bench-e2e bench-scale bench-churn chart

# pip's own output (and the build backend's notices) go to .venv/pip.log, shown only on failure.
PIP_QUIET = > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log >&2; exit 1; }

$(VENV)/.stamp-runtime: pyproject.toml
	@echo "setting up $(VENV) (pip's log: $(VENV)/pip.log)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install --quiet --upgrade pip $(PIP_QUIET)
	@$(PIP) install --quiet -e . $(PIP_QUIET)
	@touch $@

$(VENV)/.stamp-test: pyproject.toml $(VENV)/.stamp-runtime
	@echo "adding the test tools to $(VENV)"
	@$(PIP) install --quiet -e '.[test]' $(PIP_QUIET)
	@touch $@

$(VENV)/.stamp-bench: pyproject.toml $(VENV)/.stamp-test
	@$(PIP) install --quiet -e '.[test,bench]' $(PIP_QUIET)
	@touch $@

demo: $(VENV)/.stamp-runtime
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash examples/demo.sh

lint: $(VENV)/.stamp-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q

test-slow: $(VENV)/.stamp-test
	$(PY) -m pytest -q -m slow

bench: $(VENV)/.stamp-bench
	@command -v wrk >/dev/null 2>&1 || { echo "installing wrk (load generator)"; \
		(apt-get update -qq && apt-get install -y -qq wrk) >/dev/null 2>&1 || \
		sudo -n sh -c 'apt-get update -qq && apt-get install -y -qq wrk' >/dev/null 2>&1 || \
		{ echo "make bench needs wrk: install it with your package manager" >&2; exit 1; }; }
	$(PY) -m benchmarks

# The Helm chart's generated parts from their one source: copies of manifests/base's objects
# and policies/*.yaml in charts/topoplace/files/, the policy schema in values.schema.json
# (make test fails until this is run after changing them).
chart: $(VENV)/.stamp-runtime
	$(PY) charts/sync.py

# The real control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
# kubectl), the kubelet and our node runtime, built from source with Go >= 1.26 into
# ~/.cache/topoplace/e2e/<versions>/bin; Helm into ~/.cache/topoplace/e2e/helm-<version>/bin.
# Kueue into ~/.cache/topoplace/e2e/kueue-<version> (TOPOPLACE_E2E_KUEUE=0: none).
# Prometheus and promtool into ~/.cache/topoplace/e2e/prometheus-<version> (TOPOPLACE_E2E_PROMETHEUS=0: none).
e2e-bin:
	bash e2e/build-bin.sh
	bash e2e/build-helm.sh
	bash e2e/build-prometheus.sh

# Start it on 127.0.0.1 with Topoplace installed and a real kubelet per simulated node;
# leaves it running.
cluster: $(VENV)/.stamp-test e2e-bin  # the object store add-on is moto, a test dependency
	$(PY) -m e2e.cluster up

cluster-down: $(VENV)/.stamp-runtime
	$(PY) -m e2e.cluster down

# Cluster up, the scenarios in tests/e2e, cluster down (also when a scenario fails); fails too
# when a kubelet left anything on the host.
e2e: $(VENV)/.stamp-test e2e-bin
	@$(PY) -m e2e.cluster up || { $(PY) -m e2e.cluster down; exit 1; }; \
	$(PY) -m pytest -q -m e2e -p no:cacheprovider tests/e2e; rc=$$?; \
	$(PY) -m e2e.cluster down || { [ $$rc -ne 0 ] || rc=1; }; exit $$rc

# The same with Kubernetes' own gang and topology-aware scheduling turned on (Workload API and
# its gates, off in the default cluster): its own cluster, only tests/e2e/test_podgroups.py.
e2e-podgroups: $(VENV)/.stamp-test e2e-bin
	@TOPOPLACE_E2E_WORKLOAD_SCHEDULING=1 $(PY) -m e2e.cluster up || { $(PY) -m e2e.cluster down; exit 1; }; \
	$(PY) -m pytest -q -m e2e -p no:cacheprovider tests/e2e/test_podgroups.py; rc=$$?; \
	$(PY) -m e2e.cluster down || { [ $$rc -ne 0 ] || rc=1; }; exit $$rc

# Pod create latency through the real API server, webhook called vs skipped, and pod create to
# worker start with a dataset, cold and cached, and a 4-pod job kept together or not, create to
# all Running (uses a running `make cluster`, or starts one).
# Kyverno is a peer row only: a failed build leaves the row out with the reason (its log).
bench-e2e: $(VENV)/.stamp-bench e2e-bin
	-e2e/build-kyverno.sh
	$(PY) -m benchmarks --only e2e,e2e-datasets,e2e-nrt,e2e-across,e2e-burst --output benchmarks/results-e2e.md

# Fleet scale on the real API server: 5, 1,000 and 5,000 simulated Nodes (no kubelets) with a
# NodeResourceTopology each; its own control plane, torn down at the end. Not in make e2e.
# SCALE_ARGS passes flags, e.g. SCALE_ARGS="--pods 300" (python -m benchmarks.scale --help).
bench-scale: $(VENV)/.stamp-bench e2e-bin
	$(PY) -m benchmarks.scale $(SCALE_ARGS)

# The agents' writes for 1,000 pod starts and stops on make cluster's real kubelets (bench-scale's
# Nodes have none), from the API server's audit log; writes benchmarks/results-churn.json, which
# bench-scale's `agent writes/s per pod/s` column reads. Uses a running `make cluster`, or starts
# one. CHURN_ARGS passes flags (python -m benchmarks.scale.churn --help).
bench-churn: $(VENV)/.stamp-bench e2e-bin
	$(PY) -m benchmarks.scale.churn $(CHURN_ARGS)

image:
	@if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then \
		docker build -t topoplace:dev . ; \
	elif command -v podman >/dev/null 2>&1; then \
		podman build -t topoplace:dev . ; \
	else \
		echo "make image: no running container engine (docker or podman) found" >&2; exit 1; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis *.egg-info .e2e demo-out
