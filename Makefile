# Everything runs from the project's own virtualenv, created on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch, from PyTorch's CPU index as the Dockerfile installs it (PyPI's Linux wheel
# is the CUDA build, gigabytes of libraries a CPU user never loads); installed first so that no
# dependency pulls a CUDA build. Where that index cannot be reached (a machine with only a package
# mirror) the plain pin comes from pip's configured indexes: asking for the index anyway would only
# retry it for every dependency, minutes of warnings, before pip went on without it.
TORCH ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast lint bench e2e clean repeat failure-demo

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import urllib.request as r; r.urlopen('$(TORCH_INDEX)/torch/', timeout=10)" 2>/dev/null \
		&& $(BIN)/python -m pip install --quiet $(TORCH) --index-url $(TORCH_INDEX) \
		|| $(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(STAMP)

install: $(STAMP)

# The main job: a small distributed PPO experiment on this machine that learns CartPole.
demo: install
	SURREAL_HOME=$${SURREAL_HOME:-$$PWD/.surreal} $(BIN)/surreal delete demo >/dev/null 2>&1 || true
	SURREAL_HOME=$${SURREAL_HOME:-$$PWD/.surreal} $(BIN)/surreal create demo --algo ppo --env CartPole-v1 --agents 2 --steps 100000 --seed 1
	SURREAL_HOME=$${SURREAL_HOME:-$$PWD/.surreal} $(BIN)/surreal status demo

# The layer contracts are checked by tests/test_packaging.py, so this is the whole suite, on JOBS
# pytest-xdist workers (docs/decisions.md; the schedule is in tests/conftest.py).
JOBS ?= 2
XDIST := -n $(JOBS)
test: install
	$(BIN)/python -m pytest -q -ra --durations=15 $(XDIST)

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow" $(XDIST)

# A path's tests K times in a row, then each test's failures out of K: make repeat TESTS=tests/containers K=10
TESTS ?= tests
K ?= 10
repeat: install
	$(BIN)/python scripts/repeat_tests.py $(TESTS) -n $(K)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	bash scripts/staged.sh $(abspath $(BIN))/lint-imports --config $(CURDIR)/pyproject.toml --no-cache
	bash scripts/staged.sh $(abspath $(BIN))/mypy --config-file $(CURDIR)/pyproject.toml -p surreal

bench: install
	$(BIN)/python benchmarks/ppo_throughput.py
	$(BIN)/python benchmarks/es_throughput.py
	$(BIN)/python benchmarks/offpolicy_vs_sb3.py --algo sac --agents 2,4,8 --shards 1,2
	$(BIN)/python benchmarks/offpolicy_vs_sb3.py --algo td3 --env Pendulum-v1 --agents 2,4,8 --shards 1,2
	$(BIN)/python benchmarks/offpolicy_vs_sb3.py --algo dqn --env CartPole-v1 --agents 2,4,8 --shards 1,2
	$(BIN)/python benchmarks/learner_ceiling.py --learners 1,2
	$(BIN)/python benchmarks/learner_update.py
	$(BIN)/python benchmarks/checkpoint_write.py
	$(BIN)/python benchmarks/pixel_bytes.py
	$(BIN)/python benchmarks/render_scale.py
	$(BIN)/python benchmarks/box_paths.py
	$(BIN)/python benchmarks/calibration.py
	$(BIN)/python benchmarks/sizing_grid.py

# The failure policy's outcomes, measured: each role SIGKILLed past its budget, on real processes and
# in containers (benchmarks/failure_outcomes.py; minutes: not part of bench).
failure-demo: install
	$(BIN)/python benchmarks/failure_outcomes.py --backend local && $(BIN)/python benchmarks/failure_outcomes.py --backend containers

clean:
	rm -rf $(VENV) .surreal .pytest_cache .ruff_cache .mypy_cache

# --- Kubernetes (docs/kubernetes.md) -------------------------------------------------------
IMAGE ?= surreal:local
KIND ?= kind
KIND_CLUSTER ?= surreal

.PHONY: image kind-up kind-load kueue-up e2e-containers
# `--queue` needs JobSet and Kueue on the cluster (pinned releases; newer ones work the same).
JOBSET_VERSION ?= v0.8.0
KUEUE_VERSION ?= v0.13.0

# The CPU image every pod runs (Dockerfile; BASE_IMAGE=... for a CUDA base): docker where a Docker
# engine answers, podman otherwise; with no registry reachable, a debootstrap base (scripts/image.sh).
image:
	IMAGE=$(IMAGE) bash scripts/image.sh

# An experiment's rendered objects run as real containers (podman or Docker, no cluster): builds the
# image from this tree first when it changed. Part of `make test` too (skipped without an engine).
e2e-containers: install
	$(BIN)/python -m pytest -q -ra tests/containers

# A local cluster: one control plane, two workers labelled as the CPU pool.
kind-up:
	$(KIND) get clusters | grep -qx '$(KIND_CLUSTER)' || \
		$(KIND) create cluster --name $(KIND_CLUSTER) --config manifests/kind-cluster.yaml

# Put the image on the kind nodes (pods pull it IfNotPresent, so no registry is needed).
kind-load:
	$(KIND) load docker-image $(IMAGE) --name $(KIND_CLUSTER)

# JobSet and Kueue on the cluster, and the LocalQueue team-a (manifests/kueue-team-a.yaml) in the
# e2e namespace: `make e2e` then also runs the queued experiment's tests (SURREAL_E2E_QUEUE).
kueue-up:
	kubectl apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/download/$(JOBSET_VERSION)/manifests.yaml
	kubectl apply --server-side -f https://github.com/kubernetes-sigs/kueue/releases/download/$(KUEUE_VERSION)/manifests.yaml
	kubectl wait --for=condition=Available --timeout=300s -n jobset-system deployment --all
	kubectl wait --for=condition=Available --timeout=300s -n kueue-system deployment --all
	kubectl apply -n $${SURREAL_E2E_NAMESPACE:-default} -f manifests/kueue-team-a.yaml

# create/status/scale/logs/delete against a real cluster: the kind one unless told otherwise.
e2e: install
	SURREAL_E2E_KUBECONFIG=$${SURREAL_E2E_KUBECONFIG:-$${KUBECONFIG:-$$HOME/.kube/config}} \
	SURREAL_E2E_CONTEXT=$${SURREAL_E2E_CONTEXT:-kind-$(KIND_CLUSTER)} \
	SURREAL_E2E_IMAGE=$(IMAGE) SURREAL_E2E_QUEUE=$${SURREAL_E2E_QUEUE:-} \
		$(BIN)/python -m pytest -q -m e2e tests/kube/test_e2e.py
