# The project's own virtual environment (.venv) holds everything; each target installs what it needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
UV_VERSION := 0.13.9
# This machine keeps a CPU build of torch on disk; elsewhere the same pin comes from PyPI.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
STAMP := $(VENV)/.installed
# Bytecode is compiled at install (the libraries by uv, the project here): a process that may not write
# .pyc files (PYTHONDONTWRITEBYTECODE) would otherwise compile every module it imports, every time.
SOURCES := platform pipelines serving monitoring feature_repo infra benchmarks tests

.PHONY: setup demo test test-fast lint serve compile dvc-yaml lock grpc-stubs clean validate-infra infra-rules mutation repro stack stack-down stack-status gates gates-baseline docs

# The project's own bytecode, refreshed on every target (compileall skips what is up to date).
setup: $(STAMP)
	@$(PY) -m compileall -q $(SOURCES) > /dev/null

$(STAMP): pyproject.toml requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(UV) pip install --python $(PY) $(FIND_LINKS) --compile-bytecode -r requirements.lock
	$(UV) pip install --python $(PY) --no-deps -e .
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/mlops demo

# Shuffled order (pytest-randomly) with a fixed, verified seed so CI is reproducible;
# `make test TEST_SEED=default` draws a new one (printed in the header).
# Three pytest-xdist workers on two cores (the end-to-end tests spend much of their time waiting on
# processes they start), each module on one worker (its fixtures built once), end-to-end modules
# handed out first (tests/conftest.py). Not --dist loadgroup: xdist 3.8 cannot rename pytest 9's node ids,
# so its groups are silently ignored. `make test TEST_WORKERS=0` runs in this process, one test after another.
TEST_SEED ?= 338462761
# pytest caches each test module as it rewrites its asserts (a .pyc beside it) only where Python may write
# bytecode; PYTHONDONTWRITEBYTECODE (set on some machines) would make every run rewrite them all again.
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest
TEST_WORKERS ?= 3
# .ci/system-packages.sh installs the Debian packages whose programs the tests start, when run as root
# with apt-get; otherwise it says in one line what to install, and those tests skip.
test: setup validate-infra
	@.ci/system-packages.sh
	$(PYTEST) --durations=25 -p randomly --randomly-seed=$(TEST_SEED) \
		-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

# The unit tier (docs/testing.md): in-process tests on small data, about a minute; run it first.
test-fast: setup
	$(PYTEST) -q -m unit -p randomly --randomly-seed=$(TEST_SEED) -n 2 --dist worksteal

# The import contracts ([tool.importlinter] in pyproject.toml): the layers, and what serving never loads.
# Each folder's conftest.py is checked alone, with tests/served_platform.py beside it (the serving and
# benchmarks conftests import it; alone, mypy would not find it and would type it Any).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/mypy platform pipelines serving monitoring feature_repo infra tests
	for conftest in tests/*/conftest.py; do $(VENV)/bin/mypy $$conftest tests/served_platform.py || exit 1; done
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The documentation site (mkdocs.yml, pages under docs/) into site/, offline.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Mutation testing (mutmut, configured in pyproject.toml): mutants of the decision modules (evaluate,
# the train step's threshold rule and parameters, the validation suite's plan, ingest and the training
# window, window features, registry promotion, the serving predictor) against their fast unit tests;
# prints the score per module and overall, then the survivors (tests/MUTATION.md says why each is
# equivalent). mutmut names modules by path, so the core is reached through a temporary `mlops` link.
mutation: setup
	rm -rf mutants
	ln -sfn platform/mlops mlops
	$(VENV)/bin/mutmut run --max-children 2; status=$$?; \
	$(VENV)/bin/mutmut results --all true | $(PY) -c "$$MUTATION_SCORE"; \
	$(VENV)/bin/mutmut results | grep -v ": no tests$$"; \
	rm -f mlops; exit $$status

# Reads `mutmut results --all true`; a mutant's module is its name up to the mangled function name.
define MUTATION_SCORE
import collections, re, sys
counts = collections.defaultdict(collections.Counter)
for line in sys.stdin:
    found = re.match(r"\s*(.+?)\.x[_\u01c1].*: (.+)$$", line)
    if found:
        counts[found[1]][found[2].strip()] += 1
def score(c):
    tried = c["killed"] + c["survived"] + c["timeout"] + c["suspicious"]
    return f"{c['killed']}/{tried} killed ({100 * c['killed'] / max(tried, 1):.1f} %), {c['no tests']} not run by the selected tests"
for module, c in sorted(counts.items()):
    print(f"{module}: {score(c)}")
print(f"mutation score: {score(sum(counts.values(), collections.Counter()))}")
endef
export MUTATION_SCORE

# Kubernetes manifests, offline: kustomize build of every overlay, Kubernetes/CRD schemas, policies;
# docker-compose.yml against the Compose schema and the repository.
validate-infra: setup
	$(PY) -m infra.validate
	$(PY) -m infra.compose

# CI/CD gates (docs/gates.md): each prints one line, PASS/FAIL/SKIP and why; exit 1 if any failed.
# `make gates GATES="data repro performance latency image"` runs a selection (without the test suite);
# GATES_OPTIONS passes options, e.g. GATES_OPTIONS="--without-docker skip".
GATES ?= lint tests data repro performance latency image
GATES_OPTIONS ?=
gates: setup
	$(PY) -m ci_gates $(GATES) $(GATES_OPTIONS)

# Measure /predict on this machine and write benchmarks/latency_baseline.json (commit it): the baseline is machine-specific.
gates-baseline: setup
	$(PY) -m ci_gates --refresh-baseline $(GATES_OPTIONS)

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
# state under its own home $$MLOPS_HOME (the profile's .mlops-stack; never the embedded .mlops). See docs/operations.md, "One host, production-shaped".
stack: setup
	MLOPS_PROFILE=$${MLOPS_PROFILE:-stack} $(PY) -m native_stack up

stack-down: setup
	MLOPS_PROFILE=$${MLOPS_PROFILE:-stack} $(PY) -m native_stack down

stack-status: setup
	MLOPS_PROFILE=$${MLOPS_PROFILE:-stack} $(PY) -m native_stack status

compile: setup
	$(VENV)/bin/mlops pipeline compile

# dvc.yaml's stages, written from the pipeline's declaration (pipelines/orchestration/declaration.py).
dvc-yaml: setup
	$(PY) -m pipelines.orchestration.dvc_stages

# The Open Inference Protocol's gRPC messages, generated into a private descriptor pool (tritonclient.grpc
# registers the same message names in the default one, and both live in the test processes).
grpc-stubs: setup
	$(PY) -m grpc_tools.protoc -Iserving/oip_grpc --python_out=serving/oip_grpc --pyi_out=serving/oip_grpc \
		serving/oip_grpc/inference.proto
	sed -i 's/^DESCRIPTOR = _descriptor_pool.Default()/DESCRIPTOR = _descriptor_pool.DescriptorPool()/' \
		serving/oip_grpc/inference_pb2.py

lock:
	$(UV) pip compile pyproject.toml --extra dev --python-version 3.11 $(FIND_LINKS) -o requirements.lock --quiet
	sed -i 's/==\([0-9.]*\)+cpu$$/==\1/' requirements.lock

clean:
	rm -rf .mlops .mlops-stack
