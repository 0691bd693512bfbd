# The project's own virtual environment (.venv) holds everything; each target installs what it needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
UV_VERSION := 0.13.9
# This machine keeps a CPU build of torch on disk; elsewhere the same pin comes from PyPI.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint serve compile lock clean validate-infra infra-rules mutation repro stack stack-down stack-status gates gates-baseline

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(UV) pip install --python $(PY) $(FIND_LINKS) -r requirements.lock
	$(UV) pip install --python $(PY) --no-deps -e .
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/mlops demo

# Shuffled order (pytest-randomly) with a fixed, verified seed so CI is reproducible;
# `make test TEST_SEED=default` draws a new one (printed in the header).
TEST_SEED ?= 338462761
test: setup validate-infra
	$(PY) -m pytest --durations=25 -p randomly --randomly-seed=$(TEST_SEED)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy platform pipelines serving monitoring feature_repo infra tests

# Mutation testing (mutmut, configured in pyproject.toml): mutants of the decision functions (evaluate,
# the train step's threshold rule and parameters, the validation suite's plan) against their unit tests;
# prints the score and the survivors (tests/MUTATION.md says why each is equivalent).
mutation: setup
	rm -rf mutants
	ln -sfn platform/mlops mlops
	$(VENV)/bin/mutmut run --max-children 2; status=$$?; rm -f mlops; exit $$status
	$(VENV)/bin/mutmut export-cicd-stats
	$(PY) -c 'import json; s = json.load(open("mutants/mutmut-cicd-stats.json")); k, u = s["killed"], s["no_tests"]; n = k + s["survived"] + s["timeout"] + s["suspicious"]; print(f"mutation score: {k}/{n} mutants killed ({100 * k / n:.1f} %); {u} in code the selected tests do not run")'
	$(VENV)/bin/mutmut results | grep -v ": no tests$$" || true

# Kubernetes manifests, offline: kustomize build of every overlay, Kubernetes/CRD schemas, policies;
# docker-compose.yml against the Compose schema and the repository.
validate-infra: setup
	$(PY) -m infra.validate
	$(PY) -m infra.compose

# CI/CD gates (README "CI/CD gates"): each prints one line, PASS/FAIL/SKIP and why; exit 1 if any failed.
# `make gates GATES="data repro performance latency image"` runs a selection (without the 12-minute suite);
# GATES_OPTIONS passes options, e.g. GATES_OPTIONS="--without-docker skip".
GATES ?= lint tests data repro performance latency image
GATES_OPTIONS ?=
gates: setup
	$(PY) -m infra.gates $(GATES) $(GATES_OPTIONS)

# Measure /predict on this machine and write benchmarks/latency_baseline.json (commit it): the baseline is machine-specific.
gates-baseline: setup
	$(PY) -m infra.gates --refresh-baseline $(GATES_OPTIONS)

# Regenerate infra/base/monitoring/prometheus-rules.yaml from monitoring/prometheus/alerts.yml.
infra-rules: setup
	$(PY) -m infra.rules

serve: setup
	$(VENV)/bin/mlops serve

# dvc.yaml's stages call `mlops`: the venv goes first on PATH. Reruns only what is stale.
repro: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc repro

# The production-shaped stack on this host (Debian's postgresql, redis-server, prometheus,
# prometheus-pushgateway): ports from MLOPS_PROFILE=stack unless the environment moves them;
# state under $$MLOPS_HOME/stack (default .mlops/stack). See README "One host, production-shaped".
stack: setup
	MLOPS_PROFILE=$${MLOPS_PROFILE:-stack} $(PY) -m infra.stack up

stack-down: setup
	MLOPS_PROFILE=$${MLOPS_PROFILE:-stack} $(PY) -m infra.stack down

stack-status: setup
	MLOPS_PROFILE=$${MLOPS_PROFILE:-stack} $(PY) -m infra.stack status

compile: setup
	$(VENV)/bin/mlops pipeline compile

lock:
	$(UV) pip compile pyproject.toml --extra dev --python-version 3.11 $(FIND_LINKS) -o requirements.lock --quiet
	sed -i 's/==\([0-9.]*\)+cpu$$/==\1/' requirements.lock

clean:
	rm -rf .mlops
