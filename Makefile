# The two commands: `make run` (the product, with demo data) and `make test` (the whole suite).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# LDAP sign-in is an optional extra (requirements-ldap.lock): python-ldap compiles against
# Debian's libldap2-dev and libsasl2-dev, so it is installed where those headers are (LDAP=auto),
# always (LDAP=yes: the build fails without them) or never (LDAP=no). Without it everything
# runs but the LDAP sign-in, and its tests are skipped (CI, which installs the headers, fails).
LDAP ?= auto
LDAP_HEADERS := $(shell test -f /usr/include/ldap.h && test -f /usr/include/sasl/sasl.h && echo yes)
WITH_LDAP := $(if $(filter yes,$(LDAP)),yes,$(if $(filter auto,$(LDAP)),$(LDAP_HEADERS)))
# The virtual environment is reused while the lock files and the pyproject.toml files are unchanged.
# It holds the portal's pinned dependencies (requirements.lock: what it runs on, all the image
# installs; requirements-dev.lock: the tests' and tools') and, editable, the two distributions
# beside it: gpu_spec (the rules both sides share) and node_agent (the GPU node agent, for the
# demo and tests).
LOCKS := requirements.lock requirements-dev.lock requirements-ldap.lock
PYPROJECTS := pyproject.toml gpu_spec/pyproject.toml node_agent/pyproject.toml
STAMP := $(VENV)/.installed-$(shell cat $(LOCKS) $(PYPROJECTS) | sha1sum | cut -c1-12)$(if $(WITH_LDAP),-ldap)
PORT ?= 8000
# make run's Prometheus (when the binary is installed) and the demo DCGM exporter it scrapes;
# not 9090 / 9100, where Debian's prometheus package runs its own service and node exporter.
PROMETHEUS ?= $(shell command -v prometheus || echo /usr/bin/prometheus)
PROMETHEUS_PORT ?= 9095
DEMO_METRICS_PORT ?= 9400

.PHONY: venv run manage test fuzz lint bench lock schema docs clean

$(STAMP): $(LOCKS) $(PYPROJECTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock -r requirements-dev.lock
	$(PY) -m pip install --quiet --no-deps -e ./gpu_spec -e ./node_agent
ifeq ($(WITH_LDAP),yes)
	$(PY) -m pip install --quiet -r requirements-ldap.lock
else
	@$(PY) -m pip uninstall --quiet --yes django-auth-ldap python-ldap 2>/dev/null || true
	@echo "LDAP sign-in left out (no libldap2-dev / libsasl2-dev headers): everything else works. To add it: sudo apt-get install libldap2-dev libsasl2-dev, then make again."
endif
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

# The browser tests' JavaScript tools (axe-core, pinned in package-lock.json), installed from the
# lock file only; the tests read them from disk, so nothing downloads while they run.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --ignore-scripts
	@touch $@

node_modules: node_modules/.package-lock.json

# Serves http://127.0.0.1:$(PORT) with a Celery worker and beat beside it, and a local
# Kubernetes API stand-in per demo cluster (devcluster/, development only) that approved quotas
# are pushed to: `kubectl --kubeconfig .run/kubeconfig get clusterqueues,resourcequotas -A`,
# and simulated GPU node agents (fake backend) for the demo clusters' nodes.
# With no DATABASE_URL / REDIS_URL it runs on SQLite and a filesystem broker under .data/.
# Settings: portal/settings/demo.py (DEBUG, the built-in SECRET_KEY, plain HTTP).
# Static files are collected first (hashed, gzip and brotli: served as in production).
# Where the prometheus binary is installed, a Prometheus on 127.0.0.1:$(PROMETHEUS_PORT) scrapes
# DCGM-exporter and kube-state-metrics series of demo-h100's simulated GPUs (served by the
# agents' process on $(DEMO_METRICS_PORT)), and demo-h100 reads its GPU usage from it; without
# it, everything else runs as before (demo-h100 reads its node agents).
run: venv
	@export DJANGO_SETTINGS_MODULE=portal.settings.demo DEMO_KUBECONFIG_DIR=$(CURDIR)/.run DEMO_AGENT_DIR=$(CURDIR)/.run/agents; \
	rm -f .run/kubeconfig; \
	$(PY) -m devcluster.demo --run-dir .run --state-dir .data/devcluster demo-a100 demo-h100 & clusters=$$!; \
	trap 'kill $$worker $$clusters $$agents $$prom 2>/dev/null; wait $$worker $$clusters $$agents $$prom 2>/dev/null' EXIT INT TERM; \
	if test -x "$(PROMETHEUS)"; then \
	  mkdir -p .run .data/prometheus; \
	  printf '{"global": {"scrape_interval": "5s"}, "scrape_configs": [{"job_name": "dcgm-exporter", "honor_labels": true, "static_configs": [{"targets": ["127.0.0.1:%s"]}]}]}\n' \
	    $(DEMO_METRICS_PORT) > .run/prometheus.yml; \
	  "$(PROMETHEUS)" --config.file=.run/prometheus.yml --storage.tsdb.path=.data/prometheus \
	    --storage.tsdb.retention.time=2d --web.listen-address=127.0.0.1:$(PROMETHEUS_PORT) \
	    --log.level=warn & prom=$$!; \
	  export DEMO_PROMETHEUS_URL=http://127.0.0.1:$(PROMETHEUS_PORT) DEMO_METRICS="--metrics-port $(DEMO_METRICS_PORT)"; \
	else \
	  echo "Prometheus is not installed, so demo-h100 reads its node agents only. To see its GPU usage read from Prometheus as well: sudo apt-get install prometheus, then make run again."; \
	fi; \
	for _ in $$(seq 1 120); do test -s .run/kubeconfig && break; sleep 0.5; done; \
	test -s .run/kubeconfig || { echo "the local clusters did not start"; exit 1; }; \
	$(PY) manage.py migrate --noinput && \
	$(PY) manage.py collectstatic --noinput --verbosity 0 && \
	$(PY) manage.py demo && \
	{ $(VENV)/bin/celery -A portal worker --beat --loglevel=info --concurrency=2 & worker=$$!; \
	  $(PY) -m gpu_node_agent.testing.demo --portal http://127.0.0.1:$(PORT) --dir .run/agents \
	    --state-dir .data/agents $${DEMO_METRICS:-} & agents=$$!; \
	  echo "Portal: http://127.0.0.1:$(PORT)/  (API docs: /api/v1/docs/)"; \
	  test -z "$${DEMO_PROMETHEUS_URL:-}" || echo "Prometheus: $${DEMO_PROMETHEUS_URL}/  (demo-h100's DCGM exporter: http://127.0.0.1:$(DEMO_METRICS_PORT)/metrics)"; \
	  echo "Clusters: $(VENV)/bin/kubectl --kubeconfig .run/kubeconfig get clusterqueues,resourcequotas -A"; \
	  $(VENV)/bin/gunicorn portal.wsgi --bind 127.0.0.1:$(PORT) --workers 2 --access-logfile - ; }

# A management command with the demo's settings (what make run uses: portal.settings.demo,
# SQLite or DATABASE_URL, the demo clusters' kubeconfigs): make manage ARGS="createsuperuser".
manage: venv
	@DJANGO_SETTINGS_MODULE=portal.settings.demo DEMO_KUBECONFIG_DIR=$(CURDIR)/.run DEMO_AGENT_DIR=$(CURDIR)/.run/agents \
	  $(PY) manage.py $(ARGS)

# The suite in parallel (pytest-xdist): TEST_WORKERS processes, each with its own test database,
# Redis database (REDIS_URL's number + the worker's: keep them within 0-15) and data directory
# (tests/conftest.py); --dist loadgroup keeps the tests of one xdist_group mark on one
# worker. TEST_WORKERS=0: all in this process. PYTEST_ARGS is added to the command line, e.g. one
# file: make test PYTEST_ARGS=tests/quotas/test_push.py TEST_WORKERS=0 (docs/develop/testing.md).
TEST_WORKERS ?= 3

test: venv lint node_modules
	$(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS)

# The API fuzzer exploring: new random examples each run, 200 per operation (make test runs
# the same fuzzer derandomized, so CI passes or fails on the code, not on chance). Turn what it
# finds into plain tests in tests/fuzz/test_found.py.
fuzz: venv
	FUZZ_RANDOM=1 FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-200} $(PY) -m pytest tests/fuzz -p no:cacheprovider $(PYTEST_ARGS)

# Lint, format, the import layers (import-linter: contracts in pyproject.toml) and types (mypy
# with django-stubs loads the demo's settings, which need no SECRET_KEY: pyproject.toml).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Every bench/*_bench.py, then one table (figure, value, baseline, ratio, target, pass) in
# .data/bench/ (Markdown and JSON); `bench/run.py --compare A.json B.json` compares two runs.
bench: venv
	$(PY) bench/run.py $(BENCH_ARGS)

schema: venv
	DJANGO_SETTINGS_MODULE=portal.settings.demo $(PY) manage.py spectacular --validate --fail-on-warn --file .data/openapi.yml

# The documentation site from docs/ (MkDocs, Material theme) into site/, which the portal
# serves under /help/. Its tools live in a virtualenv of their own, .venv-docs, from
# requirements-docs.lock (re-pin it with .venv-docs/bin/pip freeze); --strict fails on any
# warning: a broken link, a page missing from the nav.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed-$(shell cat requirements-docs.lock | sha1sum | cut -c1-12)

$(DOCS_STAMP): requirements-docs.lock
	@test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet -r requirements-docs.lock
	@rm -f $(DOCS_VENV)/.installed-*
	@touch $@

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --quiet

# Re-pin every dependency: the runtime from requirements.in (requirements.lock, and LDAP's two
# in requirements-ldap.lock), then the development tools from requirements-dev.in within those
# pins (requirements-dev.lock: what they add). Both .in files mirror pyproject.toml.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r requirements.in
	{ echo "# Runtime pins (all the image installs), by 'pip freeze' from requirements.in; 'make lock' regenerates it."; \
	  .lock-venv/bin/pip freeze | grep -v '^-e' | grep -v -E '^(django-auth-ldap|python-ldap)=='; } > requirements.lock
	{ sed -n '/^#/p' requirements-ldap.lock; \
	  .lock-venv/bin/pip freeze | grep -E '^(django-auth-ldap|python-ldap)=='; } > requirements-ldap.lock.new
	mv requirements-ldap.lock.new requirements-ldap.lock
	.lock-venv/bin/pip install --quiet -r requirements-dev.in
	{ echo "# Development pins (what make venv adds to requirements.lock), by 'pip freeze' from requirements-dev.in; 'make lock' regenerates it."; \
	  .lock-venv/bin/pip freeze | grep -v '^-e' | grep -v -E '^(django-auth-ldap|python-ldap)==' \
	    | grep -v -x -F -f requirements.lock; } > requirements-dev.lock
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) $(DOCS_VENV) site node_modules .data .run .pytest_cache .ruff_cache
