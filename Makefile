# Each target bootstraps .venv itself.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test check proto lint bench jepsen jepsen-smoke clean

# Two distributions, both editable: gnomon-client (client-dist/: the SDK, the CLI, the gnomon.v1
# stubs) and gnomon (the node, the gateway, jepsen, bench; it pins gnomon-client). The runtime
# dependencies at the image's versions: deploy/requirements.lock as constraints, its hashes left
# out (hashes in a constraints file put pip in --require-hashes mode for every package).
$(STAMP): pyproject.toml client-dist/pyproject.toml deploy/requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# A gnomon installed before the split owned bin/gnomon: replacing it after gnomon-client
	# was installed would delete gnomon-client's script.
	$(BIN)/python -m pip uninstall -q -y gnomon
	sed -e '/--hash=/d' -e 's/ \\$$//' deploy/requirements.lock > $(VENV)/lock-constraints.txt
	# The editable install's notice (setuptools' InformationOnly, a UserWarning) is a wall of
	# text on every fresh set-up; the build backend inherits PYTHONWARNINGS.
	PYTHONWARNINGS=ignore::UserWarning $(BIN)/python -m pip install -q \
		-c $(VENV)/lock-constraints.txt -e ./client-dist -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gnomon dev

lint: $(STAMP)
	$(BIN)/ruff check node client gateway httpguard tests bench examples jepsen
	$(BIN)/lint-imports
	$(BIN)/mypy

# Everything, including the fault-injection smoke tier (tests/jepsen, marker `jepsen`: root,
# network namespaces, iptables, libfaketime; it skips with the reason where those are missing).
# The 25 slowest tests are listed at the end: every test earns its seconds. The suite is spread
# over 3 pytest-xdist workers (whole files per worker, host-wide resources in one unit:
# tests/conftest.py); TEST_WORKERS=0 runs it serially in one process (35 min on two cores).
TEST_WORKERS ?= 3
test: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) \
		--durations=25 $(PYTEST_ARGS)

# The inner loop: lint, the unit and property tiers (no node processes; a few minutes).
check: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) \
		tests/unit tests/property $(PYTEST_ARGS)

jepsen-smoke: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m jepsen tests/jepsen

jepsen: $(STAMP)
	$(BIN)/python -m gnomon.jepsen matrix

proto: $(STAMP)
	$(BIN)/python proto/generate.py

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python -m gnomon.bench all --install

clean:
	rm -rf .gnomon build *.egg-info client-dist/build client-dist/*.egg-info
