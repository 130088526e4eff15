# Everything creates .venv itself; nothing needs to be set up by hand.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# make test is CPU-bound with waits in it (servers, leases, deadlines): on 2 cores 4 workers kept
# them busier than 3 (1.50 against 1.37 cores of CPU for each second of wall time)
TEST_WORKERS ?= 4
export VENV

.PHONY: all venv lock lint typecheck test dist-check faults demo bench dist image clean docs

all: test

# The venv holds exactly the locked versions (requirements-dev.lock, every file's sha256
# checked), then the project itself without dependencies: what make test runs is what the lock
# names, and make dist ships the runtime part of it (requirements.lock). pip installs the
# locked uv (its lines of the lock, hashes checked), and uv installs the lock: pip took 45-60 s
# of a CI run's CPU unpacking the 120 wheels one by one. The venv's pip stays the one
# Python ships (install.sh meets that one on the operator's machine).
LOCK := requirements.lock
DEV_LOCK := requirements-dev.lock
# checkov (tests/deploy) pins boto3 exactly, so it gets a venv of its own inside this one,
# from its own lock (tests/deploy/checkov.in); the tests find it at $(VENV)/checkov.
CHECKOV_LOCK := requirements-checkov.lock
CHECKOV_VENV := $(VENV)/checkov
$(STAMP): pyproject.toml setup.py $(LOCK) $(DEV_LOCK) $(CHECKOV_LOCK)
	$(PYTHON) -m venv $(VENV)
	awk '/^uv==/ {p = 1; print; next} p && /^ / {print; next} {p = 0}' $(DEV_LOCK) > $(VENV)/uv.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps --require-hashes -r $(VENV)/uv.txt
	UV_LINK_MODE=copy UV_NATIVE_TLS=1 $(VENV)/bin/uv pip install -q --python $(PY) --require-hashes -r $(DEV_LOCK)
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PYTHON) -m venv --without-pip $(CHECKOV_VENV)
	UV_LINK_MODE=copy UV_NATIVE_TLS=1 $(VENV)/bin/uv pip install -q --python $(CHECKOV_VENV)/bin/python --require-hashes -r $(CHECKOV_LOCK)
	touch $(STAMP)

venv: $(STAMP)

## make lock: pin the dependency ranges of pyproject.toml again, newest versions that fit, with
## the sha256 of every file for every platform (uv pip compile --universal); docs/install.md
UV_COMPILE = $(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 \
	--generate-hashes $(LOCK_ARGS)
lock: venv
	$(UV_COMPILE) -o $(LOCK)
	$(UV_COMPILE) --extra dev -c $(LOCK) -o $(DEV_LOCK)
	$(VENV)/bin/uv pip compile tests/deploy/checkov.in --universal --python-version 3.11 \
		--generate-hashes $(LOCK_ARGS) -o $(CHECKOV_LOCK)

lint: venv
	$(VENV)/bin/ruff check mirror tests bench migrations
	$(VENV)/bin/ruff format --check mirror tests bench migrations

typecheck: venv
	$(VENV)/bin/mypy mirror

## make test: lint, types, then the whole suite against real servers on loopback. The tool's
## processes keep their .pyc files, as an installed tool does (PYTHONDONTWRITEBYTECODE, set on
## some machines, made every `mirror` a test starts compile its modules again).
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE
## The tests that fetch from PyPI as make dist does (every default target's locked wheels, the
## README's fetch of weed) are make dist-check: minutes of downloads, run by CI after make test.
## mypy (half a minute of one core) runs beside the suite's start, not before it; either failing
## fails make test, and mypy's report is printed after the suite's.
test: lint
	$(VENV)/bin/mypy mirror > $(VENV)/mypy.out 2>&1 & mypy=$$!; \
	$(TEST_ENV) scripts/with-test-servers $(VENV)/bin/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not pypi" $(PYTEST_ARGS); \
	tests=$$?; wait $$mypy; typed=$$?; cat $(VENV)/mypy.out; \
	[ $$typed -eq 0 ] || echo "make test: mypy failed (above)" >&2; [ $$tests -eq 0 ] && [ $$typed -eq 0 ]

## make dist-check: what make dist builds by default, built from PyPI and installed here
dist-check: venv
	$(TEST_ENV) scripts/with-test-servers $(VENV)/bin/pytest -q -p no:cacheprovider -n 2 -m pypi $(PYTEST_ARGS)

## make monitoring: render deploy/monitoring (rules, PrometheusRule, promtool tests,
## dashboards) from deploy/monitoring/mixin.py; tests/deploy/test_monitoring.py checks them
monitoring: venv
	$(VENV)/bin/python deploy/monitoring/mixin.py

## make faults: every fault case (kill loops at 100 kills), then the fault table; then the
## property tests' longer searches (tests/fixtures/campaign.py: what make test runs once)
faults: venv
	$(TEST_ENV) MIRROR_FAULT_KILLS=100 MIRROR_FAULT_ALL=1 scripts/with-test-servers $(VENV)/bin/pytest -q -p no:cacheprovider tests/faults $(PYTEST_ARGS)
	$(TEST_ENV) MIRROR_FAULT_ALL=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/foundations/test_archive_html.py tests/transferset/test_recipe.py tests/transferset/test_splice.py $(PYTEST_ARGS)

## make demo: the whole pipeline on embedded defaults, in a temporary directory
## make docs: docs/json.md from the command contract (mirror/cli/contract.py)
docs: venv
	$(PY) -c 'from mirror.cli.contract import render_markdown as r; print(r(), end="")' > docs/json.md

demo: venv
	$(PY) -m mirror demo

## make bench: mirror vs curl, openssl dgst, the vendor's recipe and aws-cli, one table
## (MIRROR_BENCH_MIB=256 by default; export run also on the simulator's realistic site,
## MIRROR_BENCH_SITE_MIB=500: 13,579 pages; bench/RESULTS.md); then the FEC libraries, a 1 GiB set
## through the one-way link rig (root; MIRROR_BENCH_ONEWAY_MIB, MIRROR_BENCH_ONEWAY_RATE), and
## 50 clients of mirror serve beside nginx (Debian's nginx-light)
bench: venv
	scripts/with-test-servers $(PY) -m bench
	$(PY) -m bench fec oneway serve_clients

## make dist: the offline installer dist/mirror-tool-VERSION.tar, every wheel for manylinux
## x86_64/aarch64 and CPython 3.11/3.12 from PyPI, exactly the versions and files of
## requirements.lock whose markers hold for each (raptorq: x86_64 only), and the docs,
## signed with DIST_KEY (docs/install.md)
DIST_KEY ?= /etc/mirror/transfer.key
dist: venv
	$(VENV)/bin/mirror bundle-self --key $(DIST_KEY) dist

## make image: the container image as an OCI archive, from Debian's packages (root, a Debian
## mirror, debootstrap and umoci); built from this machine's platform. Not part of make test.
IMAGE_OUT ?= dist/mirror-image.oci.tar
image: venv
	rm -rf dist/image-tool && $(VENV)/bin/mirror bundle-self --local --key $(DIST_KEY) dist/image-tool
	deploy/image/build dist/image-tool/mirror-tool-*.tar $(IMAGE_OUT)
	rm -rf dist/image-tool

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache dist
